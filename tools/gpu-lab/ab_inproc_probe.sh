#!/usr/bin/env bash
# A kernel change before and after, in process, on one card in one call:
# bin/collective-bench-old (make_gpu_bundle.sh OLD_BENCH=) against
# bin/collective-bench, alternated, graph-replayed single launches, each
# element checked where CHECK=1. Outputs under $OUT (ab_inproc.txt).
#   OPS="all_reduce all_gather" RANKS="2 4 8" B=16M E=64M ROUNDS=2 bash gpu-bundle/ab_inproc_probe.sh
# (the eighteenth session's streaming loads and stores: B=16M E=64M, then
# B=256M E=1G CHECK=0; docs/latency.md, "The 16-64 MiB range")
source "$(dirname "$0")/gpu_bundle_env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
for round in $(seq "${ROUNDS:-2}"); do
  for g in ${RANKS:-2 4 8}; do
    for t in ${OPS:-all_reduce all_gather}; do
      for v in old new; do
        b=./bin/collective-bench; [ $v = old ] && b=./bin/collective-bench-old
        echo "## r$round $v $t $g ranks single -G 5"
        timeout 60 $b -t $t -g $g -b "${B:-16M}" -e "${E:-64M}" -f 4 -p single -G 5 -c "${CHECK:-1}" -n 20 -w 5 |
          grep -E "^ +[0-9]|rror" | cut -c1-160
      done
    done
  done
done 2>&1 | tee "$out/ab_inproc.txt"
