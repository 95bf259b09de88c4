#!/usr/bin/env bash
# Lab probe (issue 19, host backend): a waiter that spins on a core shared
# with the thread it waits for. Runs bench/run_host_bench.sh with 2
# processes at 16 KiB, first free, then with the daemon and both clients on
# one core (taskset -c 0), SP spins per wait (the 16-core default is 4000).
# From the repository root (not the bundle):
#   SP=4000 COLLECTIVED_SPIN_US=10 DENV="COLLECTIVED_SPIN_US=10" bash tools/gpu-lab/spin_placement_ab.sh LABEL
# DENV: VAR=value words for the daemon alone.
for wrap in "" "taskset -c 0"; do
  r=$(COLLECTIVED_SPIN_ITERS=$SP COLLECTIVED_DAEMON_ENV="COLLECTIVED_SPIN_ITERS=$SP ${DENV:-}" COLLECTIVED_DAEMON_WRAP="$wrap" COLLECTIVED_CLIENT_WRAP="$wrap" timeout 120 bash bench/run_host_bench.sh 2 --iters 300 --bytes 16384 --ops 0 --modes client,daemon 2>&1 | awk '/client-executed/{c=$3} /daemon-executed/{d=$3} /MPI_Allreduce/{m=$4} END{print c" / "d" / "m}')
  echo "$1 spins=$SP wrap='${wrap:-free}': client / daemon / MPI = $r"
done
