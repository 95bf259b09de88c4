#!/usr/bin/env bash
# Issue 19's eager target: one rank per process under a private MPS, the
# client-executed all-reduce eager (-G 0) and graph-replayed (-G 10) in the
# same run, 16 KiB-1 MiB, at each process count; eager / graph is the ratio
# the target bounds (at most 2x). Output: $OUT/eager_mps.txt.
#   PROCS="2 8" ROUNDS=1 BENCH_ARGS="-H 1" bash gpu-bundle/eager_mps_probe.sh   (BENCH_ARGS: more collective-bench flags)
source "$(dirname "$0")/gpu_bundle_env.sh"
work=$(mktemp -d)
start_private_mps "$work" > /dev/null
bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) --log-level warn \
  > "$work/d.log" 2>&1 &
d=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
flags="--allow-run-as-root --oversubscribe --bind-to none -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x LD_LIBRARY_PATH"
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader), private MPS"
  for round in $(seq "${ROUNDS:-1}"); do
    for np in ${PROCS:-2 8}; do
      for g in 0 10; do
        echo "## round $round, MPS, $np processes, -G $g"
        timeout 120 mpirun $flags -np "$np" bin/collective-bench -D "$work/c.sock" -k "e$round$np$g" -M 1 \
          -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G "$g" ${BENCH_ARGS:-} 2>&1 | grep -v "^# least"
      done
    done
  done
} 2>&1 | tee "$out/eager_mps.txt"
kill "$d"; wait "$d"
echo quit | nvidia-cuda-mps-control
rm -rf "$work"
