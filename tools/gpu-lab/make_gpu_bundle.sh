#!/usr/bin/env bash
# Packs what the device batch scripts need into gpu-bundle/ (ignored by git;
# carry it with the device tool): the built binaries with the shared libraries
# the GPU machine lacks (../shared/tools/device-bundle), and the scripts.
#   bash tools/gpu-lab/make_gpu_bundle.sh [BUNDLE_DIR]   (after deploy/build.sh)
# SLIM=1 leaves out the host-only test binaries (the whole bundle is about
# 68 MB, over the device tool's 64 MiB carry limit with the tree); OLD_BENCH=F
# packs F as bin/collective-bench-old (latency_breakdown.sh's "before");
# OLD_CLIENT=F packs F as lib-old/libcollectived_client.so.0: the client
# library's kernels before a change, for a side of launch_ab_probe.sh
# (A_ENV="LD_LIBRARY_PATH=<bundle>/lib-old:<bundle>/lib").
# The batch scripts expect every script flat beside bin/ in the bundle: this
# folder's scripts, bench/gpu_baseline.sh, bench/run_host_bench.sh, tests/run_example.sh and
# tests/stress/negative-controls.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)  # tools/gpu-lab is two levels down
out=${1:-$root/gpu-bundle}
tool=${DEVICE_BUNDLE:-$root/../shared/tools/device-bundle}
[ -x "$tool" ] || { echo "make_gpu_bundle: $tool not found (set DEVICE_BUNDLE)" >&2; exit 1; }
rm -rf "$out"
bins=()
for b in "$root"/build/bin/*; do [ -x "$b" ] && bins+=("$b"); done
# The NCCL API library (packed with its closure), for LD_PRELOAD.
[ -f "$root"/build/lib/libcollectived_nccl.so ] && bins+=("$root"/build/lib/libcollectived_nccl.so)
# The network's own yardstick (multinode_device_batch.sh), where installed.
for b in ucx_perftest ucx_info; do command -v "$b" > /dev/null && bins+=("$(command -v "$b")"); done
bash "$tool" pack "$out" "${bins[@]}"
# Debug info would take the bundle past the device tool's 64 MiB carry limit.
strip --strip-debug "$out"/bin/* "$out"/lib/* 2>/dev/null || true
# The raw UCX yardstick of the exchange between nodes (multinode_device_batch.sh).
if command -v mpicxx > /dev/null; then
  mpicxx -O2 -o "$out"/bin/ucx_exchange_probe "$root"/tools/gpu-lab/ucx_exchange_probe.cc -lucp -lucs
fi
# The data-loop probes (loop_probe.cu, wide_reduce_probe.cu), where a CUDA
# compiler is installed.
if command -v nvcc > /dev/null; then
  for probe in loop_probe wide_reduce_probe; do
    nvcc -O3 -arch=sm_90 -std=c++17 -o "$out"/bin/$probe "$root"/tools/gpu-lab/$probe.cu
  done
fi
# Programs linked with -lnccl load it as libnccl.so.2: a directory of its own,
# which `device-bundle prune` leaves alone (the machine may have a real NCCL).
if [ -f "$out"/bin/libcollectived_nccl.so ]; then
  mkdir -p "$out"/nccl
  mv "$out"/bin/libcollectived_nccl.so "$out"/nccl/
  ln -s libcollectived_nccl.so "$out"/nccl/libnccl.so.2
  rm -f "$out"/lib/libnccl.so.2
  cp "$root"/nccl/symbols_test.sh "$root"/nccl/torch_nccl_symbols.txt "$root"/tests/frameworks/* "$out"/
fi
cp "$root"/tools/gpu-lab/*.sh "$root"/bench/gpu_baseline.sh "$root"/bench/run_host_bench.sh "$root"/tests/run_example.sh \
  "$root"/tests/stress/negative-controls.sh "$root"/bench/run_multinode_bench.sh "$out"/

# The client library's headers and CMake package, for building the Python
# package on the machine (python_device_batch.sh); its library is in lib/.
for component in libcollectived-client libcollectived-dev; do
  cmake --install "$root"/build --prefix "$out"/python-prefix --component "$component" > /dev/null
done
# The same library is in lib/ (packed above): a link, not a second 7 MB copy,
# keeps the bundle inside the carry limit.
for so in "$out"/python-prefix/lib/libcollectived_client.so.*.*; do
  [ -f "$out"/lib/libcollectived_client.so.0 ] && ln -sf ../../lib/libcollectived_client.so.0 "$so"
done
if [ -n "${SLIM:-}" ]; then
  for b in daemon_unit_test client_unit_test ring_test host_executor_test collectived_intruder host_kernels_test \
    cluster_test daemon_test shm_window_test cumem_window_test multinode_test nccl_unit_test membership_test; do
    rm -f "$out/bin/$b"
  done
fi
if [ -n "${OLD_BENCH:-}" ]; then
  cp "$OLD_BENCH" "$out"/bin/collective-bench-old
  strip --strip-debug "$out"/bin/collective-bench-old
fi
if [ -n "${OLD_CLIENT:-}" ]; then
  mkdir -p "$out"/lib-old
  cp -L "$OLD_CLIENT" "$out"/lib-old/libcollectived_client.so.0
  strip --strip-debug "$out"/lib-old/libcollectived_client.so.0
fi
# The plain reference kernel's source, for building it there beside ours.
[ -f "$root"/../shared/reference/oneshot_ref.cu ] && cp "$root"/../shared/reference/oneshot_ref.cu "$out"/
echo "bundle: $out ($(du -sh "$out" | cut -f1))"
