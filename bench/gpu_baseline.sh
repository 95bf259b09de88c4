#!/usr/bin/env bash
# On the GPU machine: the device tests, then the in-process baseline of the GPU
# kernels (throughput 16 MiB..1 GiB at 2/4/8 virtual ranks, latency eager and
# graph-replayed, a checked sweep). BIN holds device_kernels_test and
# collective-bench. Output goes to stdout (and $OUT/gpu_baseline.txt if set).
#   bench/gpu_baseline.sh BIN
set -u
bin=$1
out=${OUT:-/tmp}/gpu_baseline.txt
{
  date -u +"# %Y-%m-%dT%H:%MZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv,noheader
  echo "## device tests"
  "$bin/device_kernels_test" 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|Which|wrong" | head -60
  echo "## checked sweep (every element compared), 8 ranks"
  "$bin/collective-bench" -g 8 -b 1K -e 64M -f 8 -c 1 -n 5 -w 1
  "$bin/collective-bench" -t all_gather -g 8 -b 8K -e 64M -f 8 -c 1 -n 5 -w 1
  for g in 2 4 8; do
    echo "## all_reduce throughput, $g ranks (unchecked timing runs; checks above and in the tests)"
    "$bin/collective-bench" -g "$g" -b 16M -e 1G -f 2 -c 0 -n 20 -w 5
  done
  for g in 2 8; do
    echo "## all_reduce fused launch, $g ranks"
    "$bin/collective-bench" -g "$g" -a fused -b 16M -e 1G -f 4 -c 0 -n 20 -w 5
  done
  for g in 2 4 8; do
    echo "## all_gather throughput, $g ranks"
    "$bin/collective-bench" -t all_gather -g "$g" -b 16M -e 1G -f 2 -c 0 -n 20 -w 5
  done
  for g in 2 8; do
    echo "## latency, $g ranks, eager"
    "$bin/collective-bench" -g "$g" -b 16K -e 1M -f 4 -c 1 -n 200 -w 20
    echo "## latency, $g ranks, graph-replayed (-G 10 launches of 50 ops)"
    "$bin/collective-bench" -g "$g" -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G 10
  done
} 2>&1 | tee "$out"
