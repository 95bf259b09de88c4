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
# A private MPS for this batch, pipe and log under $1 (stop it with
# `echo quit | nvidia-cuda-mps-control`). On the H100 (2026-12-05) the daemon
# then found no control pipe there: the listing shows what MPS made.
start_private_mps() {
  export CUDA_MPS_PIPE_DIRECTORY=$1/mps-pipe CUDA_MPS_LOG_DIRECTORY=$1/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || echo "MPS did not start"
  sleep 1
  ls -la "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  tail -5 "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null
}
