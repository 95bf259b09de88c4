# Sourced by the device batch scripts, from inside a bundle made by
# ../shared/tools/device-bundle (this file copied in beside them): drops the
# bundled libraries the machine already has, points the loader and the test
# harness at the bundle's binaries, and sets $out (the device tool's $OUT).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1  # the bundle: this file sits in it
bash device-bundle prune . > /dev/null
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-} COLLECTIVED_BUILD_DIR=$PWD
export COLLECTIVED_DAEMON_BIN=$PWD/bin/collectived COLLECTIVED_TEST_CLIENT_BIN=$PWD/bin/collectived_test_client
export COLLECTIVED_GPU_TEST_CLIENT_BIN=$PWD/bin/collectived_gpu_test_client
# The NCCL API library and the programs linked against it (nccl_device_batch.sh).
export LD_LIBRARY_PATH=$PWD/nccl:$LD_LIBRARY_PATH COLLECTIVED_NCCL_LIB=$PWD/nccl/libcollectived_nccl.so
export COLLECTIVED_NCCL_CHECK_BIN=$PWD/bin/nccl_check
out=${OUT:-/tmp}
