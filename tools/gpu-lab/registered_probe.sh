#!/usr/bin/env bash
# One device call over a bundle (tools/gpu-lab/make_gpu_bundle.sh): the kernel tests,
# every GPU daemon test (registered buffers and legacy cudaIpc windows among them), then
# throughput through the daemon, 16 MiB-1 GiB, with the buffers on the
# symmetric heap (-z 1) next to each rank's own registered cuMem allocation
# (-z 2), and with the daemon sharing its memory by legacy cudaIpc handles.
# 2-rank sweeps check every element (-c 1); 8-rank ones time 256 MiB-1 GiB
# only (checking 8 x 1 GiB on the host takes minutes; the GPU tests check
# registered buffers exactly). Outputs under $OUT.
#   [TESTS=gtest-filter] [SKIP_KERNELS=1] [RANKS="2 8"] [LEGACY_BENCH=1] bash gpu-bundle/registered_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
if [ -z "${SKIP_KERNELS:-}" ]; then
  timeout 150 ./bin/device_kernels_test > "$out/device_kernels.txt" 2>&1; echo "kernel tests rc=$?"
  grep -E "^\[ +(FAILED|PASSED) |Failure" "$out/device_kernels.txt" | head -20
fi
timeout 240 ./bin/gpu_daemon_test --gtest_filter="${TESTS:-*}" > "$out/gpu_daemon.txt" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which|wrong|status:" "$out/gpu_daemon.txt" | head -40
work=$(mktemp -d)
run_daemon() {  # $1: memory export
  ./bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) \
    --max-buffer-bytes $((32 << 30)) --gpu-memory-export "$1" --log-level warn > "$work/d-$1.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
}
stop_daemon() { kill -TERM "$daemon"; wait "$daemon"; rm -f "$work/c.sock"; }
{
  date -u +"# %Y-%m-%dT%H:%MZ"
  run_daemon cumem
  for g in ${RANKS:-2 8}; do
    sweep="-b 16M -c 1"; [ $g = 8 ] && sweep="-b 256M -c 0"
    for t in all_reduce all_gather; do
      for z in 1 2; do
        echo "## $t, $g ranks, -z $z"
        timeout 100 ./bin/collective-bench -D "$work/c.sock" -k "$t-$g-$z" -t $t -g $g $sweep -e 1G -f 4 -z $z \
          -n 20 -w 5 2>&1 | grep -v "^# least"
      done
    done
  done
  stop_daemon
  run_daemon legacy-ipc
  [ "${LEGACY_BENCH:-1}" = 1 ] && for t in all_reduce all_gather; do
    echo "## $t, 8 ranks, heap, daemon memory by legacy cudaIpc handles"
    timeout 100 ./bin/collective-bench -D "$work/c.sock" -k "legacy-$t" -t $t -g 8 -b 256M -e 1G -f 4 -z 1 -c 0 \
      -n 20 -w 5 2>&1 | grep -v "^# least"
  done
  stop_daemon
} > "$out/registered_bench.txt" 2>&1
echo "bench rc=$?"
grep -E "^## |^ +(1073741824|16777216) |FAILED" "$out/registered_bench.txt"
rm -rf "$work"
