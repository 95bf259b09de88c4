#!/usr/bin/env bash
# The cost of the end barrier's abort check (1d17a69) on small ops: the
# reference one-shot kernel (../shared/reference/oneshot_ref.cu, copied into
# the bundle and built here) and collective-bench's in-process single launch
# and daemon path, graph-replayed, in one run, each with collective-bench's
# own reference beside it (-r 1: the same plain one-shot, built in, its time
# and our ratio to it per size); compare the ratio with the one recorded
# before the check (bench/RESULTS.md, 2026-12-04). The built-in reference
# against oneshot_ref's own figures checks the yardstick itself.
#   bash gpu-bundle/abort_check_latency.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
work=$(mktemp -d)
{
  echo "## $(date -u +%FT%TZ)"
  if command -v nvcc > /dev/null && [ -f oneshot_ref.cu ]; then
    nvcc -O2 -arch=sm_90 -o "$work/oneshot_ref" oneshot_ref.cu && "$work/oneshot_ref" 2>&1 | tail -25
  else
    echo "no nvcc or no oneshot_ref.cu: reference not run"
  fi
  bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) --log-level warn \
    > "$work/d.log" 2>&1 &
  d=$!
  for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
  for g in 2 8; do
    echo "## $g ranks, graph-replayed (-G 10): in-process single launch, then through the daemon (zero-copy)"
    bin/collective-bench -t all_reduce -p single -g $g -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10 -r 1 2>&1 | grep -v "^# least"
    bin/collective-bench -D "$work/c.sock" -k l$g -g $g -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10 -z 1 -r 1 2>&1 | grep -v "^# least"
  done
  kill $d; wait $d
} 2>&1 | tee "$out/abort_check_latency.txt"
rm -rf "$work"
