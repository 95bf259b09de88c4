#!/usr/bin/env bash
# Issue 19 item 4 on the GPU machine's 16 cores: the host backend against
# MPI_Allreduce with the waits' spin and yield budgets varied
# (COLLECTIVED_SPIN_ITERS, COLLECTIVED_YIELD_US, ring/wait.cc), to choose the
# default for daemon-executed waits (at 8 processes 4000 spins lost to MPI by
# 8-38x on 2026-12-05). "default" is the build's own policy.
#   bash gpu-bundle/host_spin_sweep.sh     (env: PROCS, VARIANTS, ITERS)
source "$(dirname "$0")/gpu_bundle_env.sh"
{
  echo "## $(date -u +%FT%TZ) $(nproc) cores: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//')"
  for n in ${PROCS:-8 4 2}; do
    for v in ${VARIANTS:-default 4000:20 400:20 50:20 50:0}; do
      unset COLLECTIVED_SPIN_ITERS COLLECTIVED_YIELD_US
      if [ "$v" != default ]; then
        export COLLECTIVED_SPIN_ITERS=${v%%:*} COLLECTIVED_YIELD_US=${v##*:}
      fi
      echo "## $n processes, spins:yield_us $v"
      timeout 120 bash run_host_bench.sh "$n" --iters "${ITERS:-200}" --bytes 16384,1048576,4194304 --ops 0 \
        --modes client,daemon 2>&1 | grep -v "^#\|^$"
    done
  done
} 2>&1 | tee "$out/host_spin_sweep.txt"
