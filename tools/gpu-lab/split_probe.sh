#!/usr/bin/env bash
# The NCCL split test under MPS (docs/gpu-kernels.md, "Residency"):
# `nccl_check --mode split` (a 4-rank parent, then two 2-rank halves, four
# processes on one GPU) ROUNDS times under a private MPS with programmatic
# launches on and off (COLLECTIVED_PROGRAMMATIC_LAUNCH), then under MPS with
# the daemon's --gpu-max-blocks-per-rank 33, then without MPS (contexts
# time-slice: the control). Halves sized alone (66 blocks each on 132 SMs)
# stalled here in 2 of 6 runs (twenty-second session); the daemon's sizing
# across live communicators (4f02c8a) is what the first rows now check.
# Short op and join timeouts (15 s) and the ranks' watchdog (40 s) turn a
# stall into a line that says where. Per round: how many ranks passed, the
# failure lines, the seconds; then what each daemon decided (MPS seen, the
# communicators' blocks, crowding warnings). Outputs under $OUT
# (split_probe.txt, the daemons' logs).
#   ROUNDS=8 bash gpu-bundle/split_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export COLLECTIVED_NCCL_OP_TIMEOUT_MS=15000 COLLECTIVED_NCCL_JOIN_TIMEOUT_MS=15000
work=$(mktemp -d)
rounds() {  # $1: label; the daemon at $work/c.sock
  for pdl in 1 0; do
    for i in $(seq "${ROUNDS:-8}"); do
      mkdir -p "$work/r$1$pdl$i"
      t0=$SECONDS
      COLLECTIVED_PROGRAMMATIC_LAUNCH=$pdl timeout 60 mpirun --oversubscribe --bind-to none -np 4 \
        -x COLLECTIVED_SOCKET -x LD_LIBRARY_PATH -x COLLECTIVED_NCCL_OP_TIMEOUT_MS -x COLLECTIVED_NCCL_JOIN_TIMEOUT_MS \
        -x COLLECTIVED_PROGRAMMATIC_LAUNCH ${CUDA_MPS_PIPE_DIRECTORY:+-x CUDA_MPS_PIPE_DIRECTORY} \
        bin/nccl_check --mode split --dir "$work/r$1$pdl$i" --watchdog-s 40 > "$work/out" 2>&1
      rc=$?
      echo "$1 launch=$pdl round $i: rc=$rc, $(grep -c '^PASS' "$work/out") of 4 passed, $((SECONDS - t0)) s"
      grep -E "FAIL|watchdog" "$work/out" | head -4 | sed 's/^/    /'
    done
  done
}
start_daemon() {  # $1: the log's name; more daemon flags after it
  bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((16 << 20)) --log-level info \
    "${@:2}" > "$out/daemon_$1.log" 2>&1 &
  d=$!
  for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
  export COLLECTIVED_SOCKET=$work/c.sock
}
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  nvidia-smi --query-compute-apps=pid,name --format=csv
  start_private_mps "$work" > /dev/null
  start_daemon mps
  rounds mps
  kill "$d"; wait "$d"; rm -f "$work/c.sock"
  start_daemon mps-capped --gpu-max-blocks-per-rank 33
  rounds mps-capped
  kill "$d"; wait "$d"; rm -f "$work/c.sock"
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  sleep 2
  start_daemon nomps
  rounds no-mps
  kill "$d"; wait "$d"
  # What the daemons decided: MPS seen or not, each communicator's blocks,
  # and any crowding warning (the daemon's sizing, daemon/gpu_blocks.h).
  for f in "$out"/daemon_*.log; do
    echo "## $(basename "$f"): $(grep -c "blocks per rank's kernel" "$f") communicators formed"
    grep -hoE "MPS (not )?active[^:]*" "$f" | head -1
    grep -hoE "'[^']*': [0-9]+ blocks per rank's kernel.*|could need more blocks.*holds? \([^)]*\)" "$f" | sed -E "s/nccl-[0-9a-f]+/nccl-*/" | sort | uniq -c | head -6
  done
} 2>&1 | tee "$out/split_probe.txt"
rm -rf "$work"
