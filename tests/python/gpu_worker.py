"""One rank of the GPU tests (test_gpu.py starts WORLD of them under MPS):
torch tensors on a GPU communicator, eager (staged and zero-copy on the
heap), in a CUDA graph replayed with new values, and under torch.compile;
every element compared with the exact result. With "bench": per-op times.
    python gpu_worker.py SOCKET KEY WORLD RANK check|bench
Prints "PASS rank R: N checks" or "FAIL rank R: ..." (exit 1)."""
import sys
import time

import torch

import collectived
import collectived.torch as cdt

sock, key, world, rank, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
checks = 0


def fail(msg):
    print(f"FAIL rank {rank}: {msg}", flush=True)
    sys.exit(1)


def expect(got, want, what):
    global checks
    checks += 1
    torch.cuda.synchronize()
    if not torch.equal(got, want):
        bad = (got != want).sum().item()
        fail(f"{what}: {bad} of {want.numel()} wrong (got {got.flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()})")


def inputs(r, n, dtype, seed):
    # Small integers: sums, max and the mean over 2 or 4 ranks are exact in every type.
    return ((torch.arange(n, device=dev, dtype=torch.int64) * 7 + seed + r * 3) % 9 - 4).to(dtype)


def want_reduce(n, dtype, op, seed):
    xs = torch.stack([inputs(r, n, torch.float64, seed) for r in range(world)])
    w = {"sum": xs.sum(0), "max": xs.max(0).values, "min": xs.min(0).values, "avg": xs.sum(0) / world}[op]
    return w.to(dtype)


def check(comm):
    seed = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        for op in ("sum", "max", "min", "avg"):
            if op == "avg" and not dtype.is_floating_point:
                continue
            for n in (1, 1000, (1 << 20) + 3):
                seed += 1
                x = inputs(rank, n, dtype, seed)
                out = torch.full((n,), 7, dtype=dtype, device=dev)
                comm.all_reduce(x, out=out, op=op).wait()
                expect(out, want_reduce(n, dtype, op, seed), f"eager staged {dtype} {op} n={n}")
    # Zero-copy: tensors over the symmetric heap, in place.
    for n in (1, 4099, 1 << 22):
        t = comm.alloc(n, torch.float32)
        if not comm.zero_copy(t):
            fail("a heap tensor is not zero-copy")
        t.copy_(inputs(rank, n, torch.float32, n))
        comm.all_reduce(t).wait()
        expect(t, want_reduce(n, torch.float32, "sum", n), f"eager zero-copy n={n}")
    # All-gather, staged and allocated by the call.
    for n in (1, 1001, 1 << 20):
        x = inputs(rank, n, torch.bfloat16, n)
        out = comm.all_gather(x).wait()
        expect(out, torch.cat([inputs(r, n, torch.bfloat16, n) for r in range(world)]), f"all_gather n={n}")
    # A CUDA graph replayed with new values: staged and zero-copy.
    n = 65536
    x = torch.zeros(n, device=dev)
    out = torch.full((n,), 7.0, device=dev)
    h = comm.alloc(n, torch.float32)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the graph, as torch asks
        comm.all_reduce(x, out=out).wait()
        comm.all_reduce(h).wait()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        comm.all_reduce(x, out=out).wait()
        comm.all_reduce(h, op="max").wait()
    for k in range(1, 6):
        x.copy_(inputs(rank, n, torch.float32, 100 + k))
        h.copy_(inputs(rank, n, torch.float32, 200 + k))
        out.fill_(7)
        g.replay()
        expect(out, want_reduce(n, torch.float32, "sum", 100 + k), f"graph replay {k} staged")
        expect(h, want_reduce(n, torch.float32, "max", 200 + k), f"graph replay {k} zero-copy")
    # The custom ops: eager, under torch.compile, and captured.
    x = inputs(rank, 4096, torch.float32, 5)
    expect(cdt.all_reduce(x, comm), want_reduce(4096, torch.float32, "sum", 5), "custom op eager")
    cid = cdt.register(comm)  # the compiled graph names the communicator by id
    f = torch.compile(lambda t: torch.ops.collectived.all_reduce(t * 2, cid, "max") + 1, fullgraph=True)
    for k in range(3):
        x = inputs(rank, 4096, torch.float32, 300 + k)
        expect(f(x), want_reduce(4096, torch.float32, "max", 300 + k) * 2 + 1, f"torch.compile call {k}")
    gx = cdt.all_gather(inputs(rank, 100, torch.float16, 9), comm)
    expect(gx, torch.cat([inputs(r, 100, torch.float16, 9) for r in range(world)]), "custom all_gather")
    # Bad input: raised before anything runs; the communicator goes on.
    for bad, words in ((torch.ones(4), "host memory"), (torch.ones(8, device=dev)[::2], "not contiguous"),
                       (torch.ones(4, device=dev, dtype=torch.int8), "int8")):
        try:
            comm.all_reduce(bad)
            fail(f"accepted bad input ({words})")
        except collectived.InvalidArgumentError as e:
            if words not in str(e):
                fail(f"error text {e} lacks {words!r}")
    x = inputs(rank, 10, torch.float32, 1)
    comm.all_reduce(x).wait()
    expect(x, want_reduce(10, torch.float32, "sum", 1), "an op after the refusals")


def bench(comm):
    # Per-op time of an eager 16 KiB float32 sum through Python, host-synchronized
    # per op like collective-bench's eager rows; and graph-replayed.
    n = 4096
    for label, x in (("staged", torch.ones(n, device=dev)), ("zero-copy", comm.alloc(n, torch.float32))):
        for _ in range(50):
            comm.all_reduce(x).synchronize()
        times = []
        for _ in range(20):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(100):
                comm.all_reduce(x).synchronize()
            times.append((time.perf_counter() - t0) / 100 * 1e6)
        times.sort()
        print(f"BENCH rank {rank} world {world} python eager {label} 16KiB: median {times[10]:.2f} us/op", flush=True)
        # Graph-replayed, timed as collective-bench -G 10 -n 20 times the C++
        # client: 20 ops per graph, 10 replays back to back, one synchronize.
        # (Timed per single replay, the launch and the synchronize were
        # spread over 10 ops only: 1.8 us per op more than the C++ figure on
        # the H100, 2026-12-05, for the same kernels.)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            comm.all_reduce(x).wait()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(20):
                comm.all_reduce(x).wait()
        g.replay()
        times = []
        for _ in range(20):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                g.replay()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / 200 * 1e6)
        times.sort()
        print(f"BENCH rank {rank} world {world} python graph {label} 16KiB: median {times[10]:.2f} us/op", flush=True)


with collectived.Client(sock, name=f"py gpu rank {rank}") as client:
    with client.communicator(key, world, rank, device=0, heap_bytes=256 << 20) as comm:
        (check if mode == "check" else bench)(comm)
print(f"PASS rank {rank}: {checks} checks", flush=True)
