"""PyTorch, unmodified, on collectived through libcollectived_nccl.so.

Run under torchrun with LD_PRELOAD naming the library (run_torch_nccl.sh does
both). Modes:
  check  init_process_group("nccl"), all_reduce (sum, avg, max) of bf16, fp16
         and fp32, all_gather_into_tensor, broadcast, barrier, the same inside
         torch.cuda.graph replayed with new values, destroy_process_group;
         every element compared with the exact result.
  ddp    one DDP training step of a small model; its gradients must equal a
         single-process reference (the mean of every rank's own gradients).
  bench  all_reduce timings (eager and graph-replayed) at the given sizes.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = torch.device("cuda", 0)
checks = 0


def fail(msg):
    print(f"FAIL rank {RANK}: {msg}", flush=True)
    sys.exit(1)


def expect_equal(got, want, what):
    global checks
    checks += 1
    if not torch.equal(got, want):
        bad = (got != want).sum().item()
        fail(f"{what}: {bad} of {want.numel()} elements differ (first got {got.flatten()[:4].tolist()}, "
             f"want {want.flatten()[:4].tolist()})")


def inputs(rank, n, dtype, seed):
    # Small integers: every sum, mean over a power-of-two world and max is exact in bf16.
    return ((torch.arange(n, device=DEV, dtype=torch.int64) * 7 + seed + rank * 3) % 9 - 4).to(dtype)


def on_collectived():
    with open("/proc/self/maps") as f:
        return "libcollectived_nccl" in f.read()


def check():
    dist.init_process_group("nccl", device_id=DEV)
    if not on_collectived():
        fail("libcollectived_nccl.so is not loaded (LD_PRELOAD)")
    version = torch.cuda.nccl.version()
    if RANK == 0:
        print(f"torch {torch.__version__}, NCCL version seen by torch: {version}", flush=True)
    seed = 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for n in (1, 1000, (1 << 20) + 3):
            for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"), (dist.ReduceOp.MAX, "max")):
                seed += 1
                x = inputs(RANK, n, dtype, seed)
                every = torch.stack([inputs(r, n, torch.float64, seed) for r in range(WORLD)])
                want = {"sum": every.sum(0), "avg": every.sum(0) / WORLD, "max": every.max(0).values}[name]
                dist.all_reduce(x, op=op)
                expect_equal(x, want.to(dtype), f"all_reduce {name} {dtype} n={n}")
            seed += 1
            x = inputs(RANK, n, dtype, seed)
            out = torch.full((WORLD * n,), float("nan"), device=DEV, dtype=dtype)
            dist.all_gather_into_tensor(out, x)
            want = torch.cat([inputs(r, n, dtype, seed) for r in range(WORLD)])
            expect_equal(out, want, f"all_gather_into_tensor {dtype} n={n}")
    for root in (0, WORLD - 1):
        for dtype, n in ((torch.float32, 4097), (torch.uint8, 1001), (torch.bfloat16, 1 << 16)):
            seed += 1
            x = inputs(RANK, n, torch.float32, seed).to(dtype) if dtype != torch.uint8 else \
                torch.full((n,), RANK + 1, device=DEV, dtype=dtype)
            want = inputs(root, n, torch.float32, seed).to(dtype) if dtype != torch.uint8 else \
                torch.full((n,), root + 1, device=DEV, dtype=dtype)
            dist.broadcast(x, src=root)
            expect_equal(x, want, f"broadcast root {root} {dtype} n={n}")
    dist.barrier()
    torch.cuda.synchronize()

    # The same ops captured in a CUDA graph, replayed with new values.
    n = 1 << 16
    xs = {dt: torch.zeros(n, device=DEV, dtype=dt) for dt in (torch.bfloat16, torch.float16, torch.float32)}
    gathered = torch.zeros(WORLD * n, device=DEV, dtype=torch.float32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch's docs ask
        for x in xs.values():
            dist.all_reduce(x)
        dist.all_gather_into_tensor(gathered, xs[torch.float32])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(xs[torch.bfloat16], op=dist.ReduceOp.SUM)
        dist.all_reduce(xs[torch.float16], op=dist.ReduceOp.AVG)
        dist.all_reduce(xs[torch.float32], op=dist.ReduceOp.MAX)
        dist.all_gather_into_tensor(gathered, xs[torch.float32])
    for replay in range(3):
        seed = 1000 + replay
        for x in xs.values():
            x.copy_(inputs(RANK, n, x.dtype, seed))
        gathered.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        every = torch.stack([inputs(r, n, torch.float64, seed) for r in range(WORLD)])
        expect_equal(xs[torch.bfloat16], every.sum(0).to(torch.bfloat16), f"graph all_reduce sum bf16 replay {replay}")
        expect_equal(xs[torch.float16], (every.sum(0) / WORLD).to(torch.float16), f"graph all_reduce avg fp16 replay {replay}")
        mx = every.max(0).values.to(torch.float32)
        expect_equal(xs[torch.float32], mx, f"graph all_reduce max fp32 replay {replay}")
        expect_equal(gathered, mx.repeat(WORLD), f"graph all_gather replay {replay}")
    del g
    dist.barrier()
    dist.destroy_process_group()
    print(f"PASS rank {RANK} of {WORLD}: {checks} checks, every element exact", flush=True)


def ddp():
    dist.init_process_group("nccl", device_id=DEV)
    if not on_collectived():
        fail("libcollectived_nccl.so is not loaded (LD_PRELOAD)")

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(DEV)

    def batch(rank):
        gen = torch.Generator(device="cpu").manual_seed(100 + rank)
        return torch.randn(8, 16, generator=gen).to(DEV)

    net = torch.nn.parallel.DistributedDataParallel(model(), device_ids=[0])
    net(batch(RANK)).square().sum().backward()
    # The reference: one process, every rank's batch, the mean of the gradients.
    ref = model()
    grads = []
    for r in range(WORLD):
        ref.zero_grad()
        ref(batch(r)).square().sum().backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    worst = 0.0
    for i, p in enumerate(net.module.parameters()):
        want = sum(g[i] for g in grads) / WORLD
        worst = max(worst, (p.grad - want).abs().max().item())
        if not torch.allclose(p.grad, want, rtol=1e-6, atol=1e-7):
            fail(f"DDP gradient {i} differs from the reference by {(p.grad - want).abs().max().item()}")
    dist.destroy_process_group()
    print(f"PASS rank {RANK} of {WORLD}: DDP step, every gradient matches the single-process reference "
          f"(largest difference {worst:g})", flush=True)


def bench(sizes, iters):
    dist.init_process_group("nccl", device_id=DEV)
    rows = []
    for size in sizes:
        n = size // 4
        x = torch.ones(n, device=DEV, dtype=torch.float32)
        reps = max(3, min(iters, int(iters * (1 << 20) / max(size, 1 << 20))))
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / reps * 1e6
        per_graph = min(reps, 20)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(per_graph):
                dist.all_reduce(x)
        g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        launches = max(1, reps // per_graph)
        t0 = time.perf_counter()
        for _ in range(launches):
            g.replay()
        torch.cuda.synchronize()
        graphed = (time.perf_counter() - t0) / (launches * per_graph) * 1e6
        del g
        # The slowest rank's times, as collective-bench reports them.
        slowest = torch.tensor([eager, graphed], device=DEV, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        eager, graphed = slowest.tolist()
        rows.append((size, eager, graphed))
    if RANK == 0:
        print(f"# torch all_reduce float32 sum through libcollectived_nccl.so, {WORLD} ranks on one GPU, slowest rank")
        print(f"{'bytes':>12} {'eager_us':>10} {'graph_us':>10} {'eager_GB/s':>11}")
        for size, e, gr in rows:
            print(f"{size:>12} {e:>10.1f} {gr:>10.1f} {size / e / 1e3:>11.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    if mode == "check":
        check()
    elif mode == "ddp":
        ddp()
    elif mode == "bench":
        bench([int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]) if len(sys.argv) > 3 else 200)
    else:
        fail(f"unknown mode {mode}")
