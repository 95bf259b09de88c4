#!/usr/bin/env bash
# Several checks in one device call: each step in STEPS runs in turn,
# bounded by what is left of BATCH_S (560 s by default, inside one call); a
# step whose usual time no longer fits is named as skipped, for the next
# call. Issue 19's no-regression list: kernels (the kernel tests), daemon
# (the GPU daemon tests), controls (the GPU negative controls, 20 s each, at
# once), eager (eager_mps_probe.sh at 2 and 8 processes), nccl
# (nccl_device_batch.sh: API test, nccl_gpu_test, PyTorch), python
# (python_device_batch.sh). Probes: inproc (ab_inproc_probe.sh; RANKS and
# ROUNDS from INPROC_RANKS and INPROC_ROUNDS where set), launch
# (launch_ab_probe.sh), sweep (MIDSIZE=1 sweep_probe.sh), split
# (split_probe.sh: the NCCL split test's silence), host
# (host_placement_probe.sh, free placement: issue 19's host table, PROCS,
# BYTES, ROUNDS from HOST_PROCS, HOST_BYTES, HOST_ROUNDS); the variables each
# script reads pass through. Outputs under $OUT, as each script names them.
#   STEPS="kernels daemon controls eager nccl" bash gpu-bundle/steps_batch.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
budget=${BATCH_S:-560}
declare -A need=([kernels]=100 [daemon]=150 [controls]=110 [eager]=90 [nccl]=200 [python]=200 [inproc]=150
  [launch]=150 [sweep]=150 [split]=120 [host]=120)
for step in ${STEPS:-kernels daemon controls eager nccl python}; do
  left=$((budget - SECONDS))
  if [ "$left" -lt "${need[$step]:-60}" ]; then echo "## $step: skipped, $left s left"; continue; fi
  echo "## $step: start at $SECONDS s, $left s left"
  case $step in
    kernels) timeout "$left" ./bin/device_kernels_test > "$out/device_kernels.txt" 2>&1
             echo "rc=$?"; grep -E "^\[ +(FAILED|PASSED) |Failure|tests from .* ran" "$out/device_kernels.txt" | head -20 ;;
    daemon)  timeout "$left" ./bin/gpu_daemon_test > "$out/gpu_daemon.txt" 2>&1
             echo "rc=$?"; grep -E "^\[ +(FAILED|PASSED) |Failure|tests from .* ran" "$out/gpu_daemon.txt" | head -20 ;;
    controls) timeout "$left" bash negative-controls.sh --gpu --seconds 20 --parallel > "$out/gpu_controls.txt" 2>&1
             echo "rc=$?"; head -20 "$out/gpu_controls.txt" ;;
    eager)   PROCS="2 8" BENCH_ARGS="-H 1" timeout "$left" bash eager_mps_probe.sh > /dev/null 2>&1
             echo "rc=$?"; grep -v "^#" "$out/eager_mps.txt" | head -40 ;;
    nccl)    timeout "$left" bash nccl_device_batch.sh > /dev/null 2>&1
             echo "rc=$?"; grep -E "^##|PASSED|FAILED|passed|failed|exact|OK|ok" "$out/nccl.txt" | head -40 ;;
    python)  timeout "$left" bash python_device_batch.sh > /dev/null 2>&1
             echo "rc=$?"; tail -30 "$out/python.txt" ;;
    inproc)  RANKS=${INPROC_RANKS:-${RANKS:-2 4 8}} ROUNDS=${INPROC_ROUNDS:-${ROUNDS:-2}} timeout "$left" bash ab_inproc_probe.sh > /dev/null 2>&1
             echo "rc=$?"; cut -c1-110 "$out/ab_inproc.txt" | grep -E "^##|^ +(16384|1048576|16777216|67108864|268435456|1073741824) " ;;
    launch)  timeout "$left" bash launch_ab_probe.sh 2>&1 | cut -c1-160; echo "rc=$?" ;;
    sweep)   MIDSIZE=1 timeout "$left" bash sweep_probe.sh 2>&1 | tail -60; echo "rc=$?" ;;
    split)   timeout "$left" bash split_probe.sh 2>&1 | tail -80; echo "rc=$?" ;;
    host)    PLACEMENTS=free PROCS=${HOST_PROCS:-8 4 2} BYTES=${HOST_BYTES:-16384,1048576,4194304} \
               ROUNDS=${HOST_ROUNDS:-2} MODES=client,daemon timeout "$left" bash host_placement_probe.sh > /dev/null 2>&1
             echo "rc=$?"; grep -E "^## round|^collectived|^Open" "$out/host_placement_probe.txt" | cut -c1-90 ;;
    *)       echo "unknown step $step" ;;
  esac
done
echo "## done at $SECONDS s"
