#!/usr/bin/env bash
# Issue 19's 16-64 MiB range, in process (no daemon): where the op loses
# against a lone copy of its traffic. Per op and rank count, graph-replayed:
# the single launch at one and two blocks per SM (-B), with the end barrier
# left out (-S 32), a fused launch over the whole GPU (-a fused: the data
# loop alone, no barrier, one kernel), and other blocks per rank (-K).
# The lone copies of 8 MiB-512 MiB first, in the same run. Outputs under $OUT.
#   bash gpu-bundle/midsize_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
bench=./bin/collective-bench
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
{
  date -u +"# %Y-%m-%dT%H:%MZ $gpu"
  $bench -t ceilings -b 8M -e 512M -f 2 -n 20 -w 3
  for g in 2 4 8; do
    for t in all_reduce all_gather; do
      for v in "-B 1" "-B 2" "-B 1 -S 32" "-a fused" ${KS:-}; do
        echo "## in-process $t, $g ranks, -G 5 $v"
        timeout 60 $bench -t $t -g $g -b 16M -e 64M -f 4 -p single -G 5 $v -c 0 -n 20 -w 5 | grep -v "^# least"
      done
    done
  done
} > "$out/midsize_probe.txt" 2>&1
echo "rc=$?"
grep -E "^## |^# memory|^ +(16777216|67108864) " "$out"/midsize_probe.txt | cut -c1-160
