#!/usr/bin/env bash
# Issue 19 item 4 on the GPU machine's 16 cores: the host backend against
# MPI_Allreduce with the waits' spin and yield budgets varied
# (COLLECTIVED_SPIN_ITERS, COLLECTIVED_YIELD_US, ring/wait.cc), to choose the
# default for daemon-executed waits (at 8 processes 4000 spins lost to MPI by
# 8-38x on 2026-12-05). "default" is the build's own policy. A variant is
# SPINS:YIELD_US[:ONE_SHOT_MAX_BYTES[:CLIENT_SPINS[:SPIN_US]]]: the third field is the
# daemon's --one-shot-max-bytes (two-shot above it; 262144 by default, empty
# for that), since at 16 KiB and 8 processes a one-shot rank reads 128 KiB
# where two-shot reads 32; the fourth gives the clients their own spin count
# (the daemon's executors keep SPINS): whether daemon-executed runs are slow
# when clients spinning for completion crowd the executors; the fifth, the
# spins' time bound for everyone (COLLECTIVED_SPIN_US, 10 by default): with
# led ops fewer threads spin than there are cores, and spinning for as long
# as a wait lasts, as MPI's shared-memory waits do, may beat sleeping
# (nineteenth session: a slow mode of 25-105 us per op in some runs).
# One run of a policy is not enough: on 2026-12-05 (tenth session) the same
# policy gave 43 and 244 us at 16 KiB, so ROUNDS repeats every variant,
# rounds outermost (drift spreads over all variants alike).
#   bash gpu-bundle/host_spin_sweep.sh     (env: PROCS, VARIANTS, ITERS, ROUNDS, BYTES, MODES)
source "$(dirname "$0")/gpu_bundle_env.sh"
{
  echo "## $(date -u +%FT%TZ) $(nproc) cores: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//')"
  for round in $(seq "${ROUNDS:-1}"); do
    for n in ${PROCS:-8 4 2}; do
      for v in ${VARIANTS:-default 4000:20 400:20 50:20 50:0}; do
        unset COLLECTIVED_SPIN_ITERS COLLECTIVED_YIELD_US COLLECTIVED_DAEMON_ARGS COLLECTIVED_DAEMON_ENV COLLECTIVED_SPIN_US
        if [ "$v" != default ]; then
          IFS=: read -r spins yield_us one_shot client_spins spin_us <<< "$v"
          export COLLECTIVED_SPIN_ITERS=$spins COLLECTIVED_YIELD_US=$yield_us
          [ -n "$spin_us" ] && export COLLECTIVED_SPIN_US=$spin_us
          [ -n "$one_shot" ] && export COLLECTIVED_DAEMON_ARGS="--one-shot-max-bytes $one_shot"
          if [ -n "$client_spins" ]; then
            export COLLECTIVED_DAEMON_ENV="COLLECTIVED_SPIN_ITERS=$spins COLLECTIVED_YIELD_US=$yield_us${spin_us:+ COLLECTIVED_SPIN_US=$spin_us}"
            export COLLECTIVED_SPIN_ITERS=$client_spins
          fi
        fi
        echo "## round $round, $n processes, spins:yield_us $v"
        timeout 120 bash run_host_bench.sh "$n" --iters "${ITERS:-200}" --bytes "${BYTES:-16384,1048576,4194304}" --ops 0 \
          --modes "${MODES:-client,daemon}" 2>&1 | grep -v "^#\|^$"
      done
    done
  done
} 2>&1 | tee "$out/host_spin_sweep.txt"
