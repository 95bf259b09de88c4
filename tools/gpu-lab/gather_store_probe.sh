#!/usr/bin/env bash
# On the GPU machine, from a bundle (see gpu_device_batch.sh) that also holds
# bin/collective-bench-plain (the same commit without streaming stores in the
# all-gather kernels): the memory ceilings, then the in-process all-gather
# at 2, 4 and 8 ranks, plain and streaming stores alternated twice, so drift
# between runs shows. Output: stdout and $OUT/gather_store_probe.txt.
source "$(dirname "$0")/gpu_bundle_env.sh"
bench() { "$@" 2>&1 | grep -v "^# least\|^#  *size\|Avg bus"; }
{
  ./bin/collective-bench -t ceilings -e 2G -n 20 -w 3
  for round in 1 2; do
    for g in 8 4 2; do
      for b in collective-bench-plain collective-bench; do
        echo "## round $round, $g ranks, $b"
        bench ./bin/$b -t all_gather -g $g -p post -b 256M -e 1G -f 4 -c 0 -n 20 -w 5
      done
    done
  done
  echo "## checked all_gather with streaming stores, 8 ranks (every element compared)"
  bench ./bin/collective-bench -t all_gather -g 8 -p post -b 4K -e 256M -f 16 -c 1 -n 3 -w 1
} 2>&1 | tee "$out/gather_store_probe.txt"
