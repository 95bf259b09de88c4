#!/usr/bin/env bash
# Starts a private collectived and runs collectived-host-bench under mpirun
# with N client processes (default 8); prints the tables.
#   bench/run_host_bench.sh [N] [extra bench args...]
# COLLECTIVED_DAEMON_ARGS: extra daemon flags (e.g. --one-shot-max-bytes 8192);
# COLLECTIVED_DAEMON_ENV: VAR=value words for the daemon alone (the clients
# keep this shell's environment); COLLECTIVED_DAEMON_WRAP and
# COLLECTIVED_CLIENT_WRAP: commands the daemon and each client run under
# (e.g. taskset -c 0-7 and taskset -c 8-15: where they are placed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${COLLECTIVED_BUILD_DIR:-$root/build}/bin
n=${1:-8}; shift || true
work=$(mktemp -d /tmp/collectived-bench-XXXXXX)
# shellcheck disable=SC2086  # the extra flags and the wrapper split into words
env ${COLLECTIVED_DAEMON_ENV:-} ${COLLECTIVED_DAEMON_WRAP:-} "$bin/collectived" --socket "$work/c.sock" --log-level warn ${COLLECTIVED_DAEMON_ARGS:-} \
  > "$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -S "$work/c.sock.fds" ] && break; sleep 0.05; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2086  # the wrapper splits into words
mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp \
  --mca mpi_yield_when_idle 1 ${COLLECTIVED_CLIENT_WRAP:-} "$bin/collectived-host-bench" --socket "$work/c.sock" "$@"
