#!/usr/bin/env bash
# A kernel change before and after, in process, on one card in one call,
# alternated, graph-replayed single launches, each element checked where
# CHECK=1. "old" is bin/collective-bench-old (make_gpu_bundle.sh OLD_BENCH=)
# where the bundle has one, else bin/collective-bench; OLD_ARGS and NEW_ARGS
# are extra flags for each side (a bench bit against none: OLD_ARGS="-S 512" NEW_ARGS=, plain launches against programmatic ones);
# THIRD_ARGS, where set, adds a third side: the new bench with those flags.
# Outputs under $OUT (ab_inproc.txt).
#   OPS="all_reduce all_gather" RANKS="2 4 8" B=16M E=64M ROUNDS=2 bash gpu-bundle/ab_inproc_probe.sh
# (the eighteenth session's streaming loads and stores: B=16M E=64M, then
# B=256M E=1G CHECK=0; docs/latency.md, "The 16-64 MiB range")
source "$(dirname "$0")/gpu_bundle_env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
old=./bin/collective-bench
[ -x ./bin/collective-bench-old ] && old=./bin/collective-bench-old
for round in $(seq "${ROUNDS:-2}"); do
  for g in ${RANKS:-2 4 8}; do
    for t in ${OPS:-all_reduce all_gather}; do
      for v in old new ${THIRD_ARGS:+third}; do
        b=./bin/collective-bench extra=${NEW_ARGS:-}
        [ $v = old ] && b=$old extra=${OLD_ARGS:-}
        [ $v = third ] && extra=$THIRD_ARGS
        echo "## r$round $v $t $g ranks single -G 5 $extra"
        # shellcheck disable=SC2086  # the extra flags split into words
        timeout 60 $b -t $t -g $g -b "${B:-16M}" -e "${E:-64M}" -f 4 -p single -G 5 -c "${CHECK:-1}" -n 20 -w 5 \
          $extra | grep -E "^ +[0-9]|rror" | cut -c1-160
      done
    done
  done
done 2>&1 | tee "$out/ab_inproc.txt"
