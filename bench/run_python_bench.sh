#!/usr/bin/env bash
# The Python package's per-op cost on the host backend next to the C++
# client's, through one daemon in one run: collectived-host-bench (mpirun,
# the C++ client and MPI_Allreduce), then bench/python_host_bench.py (mpi4py
# for the barrier, as MPI_Barrier there), both client- and daemon-executed.
# PYTHON: an interpreter with collectived and mpi4py (default: the build's
# venv from tests/python/run.sh, which sees Debian's python3-mpi4py).
# ROUNDS rounds (default 3) alternate the two: on a 2-core machine every
# figure, MPI's too, swings by up to 3x between runs, so compare the C++
# and Python figures of one round (each round prints MPI's beside them).
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
iters=${ITERS:-1000}
mpi=(mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp --mca mpi_yield_when_idle 1)
for round in $(seq "${ROUNDS:-3}"); do
  echo "# round $round"
  "${mpi[@]}" "$build/bin/collectived-host-bench" --socket "$work/c.sock" --bytes "$bytes" --iters "$iters" \
    --warmup 100 --ops 1 | grep -E "executed|MPI_Allreduce" | grep -v "^ring"
  for mode in client daemon; do
    "${mpi[@]}" "$py" "$root/bench/python_host_bench.py" --socket "$work/c.sock" --bytes "$bytes" --mode "$mode" \
      --iters "$iters" --warmup 100 | { [ "$mode" = client ] && cat || grep -v mpi4py; }
  done
done
