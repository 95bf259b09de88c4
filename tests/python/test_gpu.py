"""GPU tests of the package (torch tensors, CUDA graphs, torch.compile):
2 and 4 ranks in separate processes on GPU 0 (tests/python/gpu_worker.py),
under MPS where the runner started it (tools/gpu-lab/python_device_batch.sh).
Skipped without torch and a GPU, or when the daemon is not on the cuda backend."""
import os
import subprocess
import sys
import uuid

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
HERE = os.path.dirname(os.path.abspath(__file__))


def run_world(daemon, world, mode):
    import collectived
    with collectived.Client(daemon) as c:
        if c.version().active_backend != "cuda":
            pytest.skip("the daemon is not on the cuda backend (COLLECTIVED_DAEMON_ARGS='--backend cuda')")
    key = "pygpu-" + uuid.uuid4().hex
    ps = [subprocess.Popen([sys.executable, os.path.join(HERE, "gpu_worker.py"), daemon, key, str(world), str(r), mode],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = [p.communicate(timeout=600)[0] for p in ps]
    for o in outs:
        print(o)
    assert [p.returncode for p in ps] == [0] * world, "\n".join(outs)
    return outs


@pytest.mark.parametrize("world", [2, 4])
def test_torch_tensors_eager_graph_and_compile_exact(daemon, world):
    outs = run_world(daemon, world, "check")
    assert all(f"PASS rank {r}" in outs[r] for r in range(world))


def test_bench_python_per_op(daemon):
    if not os.environ.get("COLLECTIVED_PY_BENCH"):
        pytest.skip("set COLLECTIVED_PY_BENCH=1 to time per-op costs")
    for world in (2, 4):
        run_world(daemon, world, "bench")
