#!/usr/bin/env bash
# One device call over a bundle (bench/make_gpu_bundle.sh): the kernel tests,
# every GPU daemon test (registered buffers and legacy cudaIpc windows among them), then
# throughput through the daemon, 16 MiB-1 GiB, with the buffers on the
# symmetric heap (-z 1) next to each rank's own registered cuMem allocation
# (-z 2), and with the daemon sharing its memory by legacy cudaIpc handles.
# Every sweep checks every element first (-c 1). Outputs under $OUT.
#   bash gpu-bundle/registered_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
timeout 150 ./bin/device_kernels_test > "$out/device_kernels.txt" 2>&1; echo "kernel tests rc=$?"
grep -E "^\[ +(FAILED|PASSED) |Failure" "$out/device_kernels.txt" | head -20
timeout 240 ./bin/gpu_daemon_test > "$out/gpu_daemon.txt" 2>&1
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
  for g in 2 8; do
    for t in all_reduce all_gather; do
      for z in 1 2; do
        echo "## $t, $g ranks, -z $z"
        timeout 100 ./bin/collective-bench -D "$work/c.sock" -k "$t-$g-$z" -t $t -g $g -b 16M -e 1G -f 4 -z $z \
          -n 20 -w 5 -c 1 2>&1 | grep -v "^# least"
      done
    done
  done
  stop_daemon
  run_daemon legacy-ipc
  for t in all_reduce all_gather; do
    echo "## $t, 8 ranks, heap, daemon memory by legacy cudaIpc handles"
    timeout 100 ./bin/collective-bench -D "$work/c.sock" -k "legacy-$t" -t $t -g 8 -b 16M -e 1G -f 4 -z 1 \
      -n 20 -w 5 -c 1 2>&1 | grep -v "^# least"
  done
  stop_daemon
} > "$out/registered_bench.txt" 2>&1
echo "bench rc=$?"
grep -E "^## |^ +(1073741824|16777216) |FAILED" "$out/registered_bench.txt"
rm -rf "$work"
