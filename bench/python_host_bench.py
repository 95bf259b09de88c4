#!/usr/bin/env python3
"""Per-op latency of the Python package on the host backend, measured as
collectived-host-bench measures the C++ client: per iteration MPI_Barrier
(mpi4py), then each rank times its post + wait of one float32 sum; the
figure is the median over iterations of the slowest rank's time. Zero-copy
(arrays from comm.alloc) and staged (NumPy arrays). Run under mpirun, one
process per rank (bench/run_python_bench.sh does).
    mpirun -np N python_host_bench.py --socket S [--bytes 16384] [--iters 200] [--mode client]"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import collectived


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--bytes", type=int, default=16384)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--mode", default="client")
    a = p.parse_args()
    w = MPI.COMM_WORLD
    key = w.bcast(f"pybench-{time.time_ns()}" if w.rank == 0 else None)
    with collectived.Client(a.socket, name=f"py bench {w.rank}") as c:
        with c.communicator(key, w.size, w.rank, mode=a.mode) as comm:
            n = a.bytes // 4
            z = comm.alloc(n, "float32")
            z[:] = 1
            s = np.ones(n, np.float32)
            # mpi4py's Allreduce of the same bytes, timed the same way: this
            # machine's state during the run (2 vCPUs here swing every
            # figure, MPI's too, by up to 3x between runs: bench/RESULTS.md).
            m = np.ones(n, np.float32)
            mo = np.empty_like(m)
            for label, x in (("zero-copy", z), ("staged", s), ("mpi4py", m)):
                t = np.zeros(a.iters)
                for i in range(a.warmup + a.iters):
                    w.Barrier()
                    t0 = time.perf_counter()
                    if x is m:
                        w.Allreduce(m, mo, op=MPI.SUM)
                    else:
                        comm.all_reduce(x).wait()
                    if i >= a.warmup:
                        t[i - a.warmup] = (time.perf_counter() - t0) * 1e6
                slowest = np.empty_like(t)
                w.Allreduce(t, slowest, op=MPI.MAX)
                if w.rank == 0:
                    what = "mpi4py Allreduce         " if x is m else f"python {label:<10} {a.mode}-executed"
                    print(f"{what}  median {np.median(slowest):6.1f} us  "
                          f"({w.size} ranks, {a.bytes} bytes, slowest rank's post+wait)", flush=True)


if __name__ == "__main__":
    main()
