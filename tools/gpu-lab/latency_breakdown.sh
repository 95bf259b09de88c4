#!/usr/bin/env bash
# Issue 19 item 1: where the in-process single launch's per-op time goes
# beyond the plain one-shot reference. Graph-replayed float32 sum all-reduce
# at 16 KiB / 256 KiB / 1 MiB, 2 and 8 ranks: the full protocol with the
# reference beside it (-r 1), then the same with each part left out
# (collective-bench -S, ring::kSkip* bits; 32 the end barrier), all parts at
# once, and fewer blocks per rank (-K); then the same sizes through the
# daemon (client-executed, zero copy), reference beside. With bin/collective-bench-old (a
# build before a cut, packed by hand) the same runs of it come first, so
# before and after share one run (a bench built before the eighth cut reads
# -S 64 as the start flag's release left out, this one as put back). Outputs under $OUT.
#   bash gpu-bundle/latency_breakdown.sh     (env: ROUNDS, RANKS, SKIPS, BLOCKS; SKIPS= or BLOCKS= for none; RUN_S; PER_BLOCK; EAGER)
source "$(dirname "$0")/gpu_bundle_env.sh"
# Each run is bounded (RUN_S): on 2026-12-05 (tenth session) one hung run
# took a whole device call with it. stdbuf: a killed run still shows its rows.
bench() {
  local bin=$1
  shift
  timeout "${RUN_S:-90}" stdbuf -oL "$bin" -t all_reduce -p single -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10 "$@" 2>&1 |
    grep -v "^# least"
  [ "${PIPESTATUS[0]}" = 124 ] && echo "## timed out after ${RUN_S:-90} s"
  return 0
}
work=$(mktemp -d)
bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) --log-level warn \
  > "$work/d.log" 2>&1 &
d=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
bins=bin/collective-bench
[ -x bin/collective-bench-old ] && bins="bin/collective-bench-old $bins"
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  echo "## GPU processes: $(nvidia-smi --query-compute-apps=pid,name --format=csv,noheader | tr '\n' ' ')"
  echo "## MPS control running: $(pgrep -c nvidia-cuda-mps || true)"
  # The plain reference as shipped (../shared/reference, copied in by
  # make_gpu_bundle.sh), built and run here: the yardstick from the same
  # script even if collective-bench -r 1 stalls.
  if [ -f oneshot_ref.cu ] && command -v nvcc > /dev/null; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    if nvcc -O2 -arch="sm_$cc" -o "$work/oneshot_ref" oneshot_ref.cu; then
      echo "## ../shared/reference/oneshot_ref.cu (sm_$cc)"
      timeout 60 "$work/oneshot_ref" | grep "graph-replayed" || echo "## oneshot_ref failed or timed out"
    fi
  fi
  for round in $(seq "${ROUNDS:-1}"); do
    for g in ${RANKS:-2 8}; do
      for b in $bins; do
        # The full protocol alone, then (this build) with the reference beside:
        # on 2026-12-05 every -r 1 run hung, and the old build's reference has
        # no bounded spin (eedda1a added it).
        echo "## round $round, $g ranks, $b: full protocol"
        bench "$b" -g "$g" -r 0
        if [ "$b" = bin/collective-bench ]; then
          echo "## round $round, $g ranks, $b: full protocol, reference beside (-r 1)"
          bench "$b" -g "$g" -r 1
        fi
        # As the client library's captured ops complete: a word per block,
        # no verdict copy (the fifth cut, docs/latency.md).
        echo "## round $round, $g ranks, $b: full protocol, block completion words (-P 1)"
        bench "$b" -g "$g" -P 1
        # As its eager zero-copy ops complete since the ninth cut: a word per
        # block, the generation copied to host memory (-P 2); EAGER=1 also
        # times them eager (-G 0) beside the full protocol's verdict copy.
        echo "## round $round, $g ranks, $b: block completion words, generation copied (-P 2)"
        bench "$b" -g "$g" -P 2
        if [ -n "${EAGER:-}" ]; then
          for p in 0 2; do
            echo "## round $round, $g ranks, $b: eager (-G 0), -P $p"
            bench "$b" -g "$g" -G 0 -P "$p"
          done
        fi
        # PER_BLOCK=1: the parts left out of the -P 1 protocol instead.
        for s in ${SKIPS-1 2 4 8 16 32 63}; do
          echo "## round $round, $g ranks, $b: -S $s${PER_BLOCK:+ -P 1}"
          bench "$b" -g "$g" -S "$s" ${PER_BLOCK:+-P 1}
        done
      done
      for k in ${BLOCKS-1 4 16}; do
        echo "## round $round, $g ranks, bin/collective-bench: -K $k (blocks per rank)"
        bench bin/collective-bench -g "$g" -K "$k"
      done
      # The issue's target: through the daemon (client-executed, zero copy on
      # the heap, ranks as sessions of one process), reference beside.
      echo "## round $round, $g ranks, through the daemon (-z 1), reference beside (-r 1)"
      bench bin/collective-bench -D "$work/c.sock" -k "l$g$round" -g "$g" -z 1 -r 1
    done
  done
} 2>&1 | tee "$out/latency_breakdown.txt"
kill "$d"; wait "$d"
rm -rf "$work"
