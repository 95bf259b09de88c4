#!/usr/bin/env bash
# Issue 19 item 1: where the in-process single launch's per-op time goes
# beyond the plain one-shot reference. Graph-replayed float32 sum all-reduce
# at 16 KiB / 256 KiB / 1 MiB, 2 and 8 ranks: the full protocol with the
# reference beside it (-r 1), then the same with each part left out
# (collective-bench -S, ring::kSkip* bits; 32 the end barrier), all parts at
# once, and fewer blocks per rank (-K). Each variant runs ROUNDS times,
# interleaved, so drift shows as spread. Outputs under $OUT.
#   bash gpu-bundle/latency_breakdown.sh     (env: ROUNDS, RANKS)
source "$(dirname "$0")/gpu_bundle_env.sh"
bench() { bin/collective-bench -t all_reduce -p single -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10 "$@" 2>&1 |
  grep -E "^ +[0-9]|wrong|error|Error" | grep -v "^# least"; }
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  echo "## columns as collective-bench prints them (size, then out-of-place and in-place time algbw busbw wrong; with -r 1 the reference's time and the ratio)"
  for round in $(seq "${ROUNDS:-2}"); do
    for g in ${RANKS:-2 8}; do
      echo "## round $round, $g ranks: full protocol, reference beside (-r 1)"
      bench -g "$g" -r 1
      for s in 1 2 4 8 16 32 63; do
        echo "## round $round, $g ranks: -S $s"
        bench -g "$g" -S "$s"
      done
      for k in 1 2 4 8 16; do
        echo "## round $round, $g ranks: -K $k (blocks per rank)"
        bench -g "$g" -K "$k"
      done
    done
  done
} 2>&1 | tee "$out/latency_breakdown.txt"
