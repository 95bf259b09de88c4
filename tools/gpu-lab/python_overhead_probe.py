"""Probe (issue 22): what the Python package's per-op path costs before the
native call, piece by piece, for a 16 KiB torch CUDA tensor. Python's eager
op took 12-13 us more than the C++ client's like-for-like loop on the H100
(2026-12-05, eleventh session); this says which steps of that are ours.
Run where torch and the built package are importable:
  python3 tools/gpu-lab/python_overhead_probe.py"""
import timeit

import torch

from collectived import _arrays

x = torch.ones(4096, device="cuda")
steps = {
    "torch.cuda.current_stream(0).cuda_stream": lambda: torch.cuda.current_stream(0).cuda_stream,
    "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
    "t.device.index": lambda: x.device.index,
    "t.get_device()": lambda: x.get_device(),
    "t.is_contiguous()": lambda: x.is_contiguous(),
    "t.data_ptr()": lambda: x.data_ptr(),
    "describe(t) (the package's whole array step)": lambda: _arrays.describe(x, "x"),
    "torch.cuda.synchronize() on an idle GPU": torch.cuda.synchronize,
}
for name, fn in steps.items():
    n = 20000
    best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    print(f"PROBE {best:7.3f} us  {name}", flush=True)
