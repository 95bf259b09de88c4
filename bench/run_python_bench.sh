#!/usr/bin/env bash
# The Python package's per-op cost on the host backend next to the C++
# client's, through one daemon in one run: collectived-host-bench (mpirun,
# the C++ client and MPI_Allreduce), then bench/python_host_bench.py (mpi4py
# for the barrier, as MPI_Barrier there), both client- and daemon-executed.
# PYTHON: an interpreter with collectived and mpi4py (default: the build's
# venv from tests/python/run.sh, which sees Debian's python3-mpi4py).
#   bench/run_python_bench.sh [N] [BYTES]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COLLECTIVED_BUILD_DIR:-$root/build}
py=${PYTHON:-$build/python-venv/bin/python}
n=${1:-2} bytes=${2:-16384}
work=$(mktemp -d /tmp/collectived-pybench-XXXXXX)
"$build/bin/collectived" --socket "$work/c.sock" --log-level warn > "$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -S "$work/c.sock.fds" ] && break; sleep 0.05; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 \
  "$build/bin/collectived-host-bench" --socket "$work/c.sock" --bytes "$bytes" --iters 200 --ops 1 | sed -n '1,6p'
for mode in client daemon; do
  mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 \
    "$py" "$root/bench/python_host_bench.py" --socket "$work/c.sock" --bytes "$bytes" --mode "$mode"
done
