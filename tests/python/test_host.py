"""The package on the host backend with NumPy arrays: every type and op,
exact; zero-copy and staged; the errors that bad input raises, after which
the communicator still works. Inputs are small integers, so every result is
exact in every type (avg: worlds of 2 and 4)."""
import subprocess
import sys
import os

import numpy as np
import pytest

import collectived
from collectived import _arrays

NUMPY_TYPES = ["float32", "float64", "float16", "int32", "int64", "uint32"]
OPS = ["sum", "prod", "min", "max", "avg"]


def inputs(rank, n, dtype, op, seed):
    i = np.arange(n, dtype=np.int64)
    if op == "prod":
        v = (i + seed + rank) % 3 - 1 if dtype != "uint32" else (i + seed + rank) % 2 + 1  # -1, 0, 1 / 1, 2
    elif dtype == "uint32":
        v = (i * 7 + seed + rank * 3) % 9
    else:
        v = (i * 7 + seed + rank * 3) % 9 - 4
    return v.astype(dtype)


def expected(world, n, dtype, op, seed):
    xs = np.stack([inputs(r, n, dtype, op, seed).astype(np.float64) for r in range(world)])
    r = {"sum": xs.sum(0), "prod": xs.prod(0), "min": xs.min(0), "max": xs.max(0), "avg": xs.sum(0) / world}[op]
    return r.astype(dtype)


def valid(dtype, op):
    return op != "avg" or dtype.startswith("float")


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("where", ["zero-copy", "staged", "staged in place"])
def test_all_reduce_every_type_and_op_exact(run_ranks, world, where):
    sizes = [1, 7, 1000, 65539]

    def body(comm):
        wrong = []
        seed = 0
        for dtype in NUMPY_TYPES:
            for op in OPS:
                if not valid(dtype, op):
                    continue
                for n in sizes:
                    seed += 1
                    x = inputs(comm.rank, n, dtype, op, seed)
                    if where == "zero-copy":
                        a = comm.alloc(n, dtype)
                        a[:] = x
                        assert comm.zero_copy(a)
                        h = comm.all_reduce(a, op=op)
                    elif where == "staged":
                        a = np.full(n, 77, dtype)  # poisoned output
                        assert not comm.zero_copy(x)
                        h = comm.all_reduce(x, out=a, op=op)
                    else:
                        a = x.copy()
                        h = comm.all_reduce(a, op=op)
                    assert h.wait() is a
                    assert h.done() and h.status.ok
                    want = expected(comm.world_size, n, dtype, op, seed)
                    bad = int(np.count_nonzero(a != want))
                    if bad:
                        wrong.append(f"{dtype} {op} n={n}: {bad} wrong")
        return wrong

    for wrong in run_ranks(world, body):
        assert wrong == []


def test_bfloat16_as_uint16_bits(run_ranks):
    def body(comm):
        n = 4099
        vals = ((np.arange(n) * 5 + comm.rank) % 9 - 4).astype(np.float32)
        bits = (vals.view(np.uint32) >> 16).astype(np.uint16)  # exact: small integers
        a = comm.alloc(n, "bfloat16")  # no NumPy type: a DLPack array over daemon memory
        x = bits.copy()
        comm.all_reduce(x, op="sum", dtype="bfloat16").wait()
        got = (x.astype(np.uint32) << 16).view(np.float32)
        want = sum(((np.arange(n) * 5 + r) % 9 - 4).astype(np.float32) for r in range(comm.world_size))
        return int(np.count_nonzero(got != want)), hasattr(a, "__dlpack__")

    for wrong, allocated in run_ranks(2, body):
        assert wrong == 0 and allocated


@pytest.mark.parametrize("world", [2, 3])
def test_all_gather_exact(run_ranks, world):
    def body(comm):
        wrong = []
        for dtype in NUMPY_TYPES:
            for n in (1, 7, 1000, 65539):
                x = inputs(comm.rank, n, dtype, "sum", n)
                h = comm.all_gather(x)  # allocates the output
                out = h.wait()
                want = np.concatenate([inputs(r, n, dtype, "sum", n) for r in range(comm.world_size)])
                if out.shape != (comm.world_size * n,) or np.count_nonzero(out != want):
                    wrong.append(f"{dtype} n={n} staged")
                # zero-copy, in place: x is out's rank-th chunk
                z = comm.alloc(comm.world_size * n, dtype)
                z[:] = 99
                chunk = z[comm.rank * n:(comm.rank + 1) * n]
                chunk[:] = x
                comm.all_gather(chunk, out=z).wait()
                if np.count_nonzero(z != want):
                    wrong.append(f"{dtype} n={n} zero-copy in place")
        return wrong

    for wrong in run_ranks(world, body):
        assert wrong == []


def test_many_ops_in_flight_each_result_exact(run_ranks):
    def body(comm):
        hs = []
        for k in range(32):
            x = np.full(513, k + comm.rank, np.int64)
            out = np.zeros(513, np.int64)
            hs.append((k, out, comm.all_reduce(x, out=out)))
        bad = 0
        for k, out, h in reversed(hs):  # waited out of order
            h.wait()
            bad += int(np.count_nonzero(out != sum(k + r for r in range(comm.world_size))))
        return bad

    assert run_ranks(2, body) == [0, 0]


class NotAnArray:
    pass


class FakeGpuArray:
    __cuda_array_interface__ = {"data": (1 << 40, False), "shape": (4,), "typestr": "<f4", "version": 3}


def test_bad_input_raises_the_right_error_and_loses_nothing(run_ranks):
    def body(comm):
        seen = []
        x = np.ones(16, np.float32)

        def expect(exc, words, fn):
            with pytest.raises(exc) as e:
                fn()
            for w in words:
                assert w in str(e.value), (w, str(e.value))
            seen.append(type(e.value).__name__)

        expect(collectived.InvalidArgumentError, ["x:", "int8"], lambda: comm.all_reduce(np.ones(4, np.int8)))
        expect(collectived.InvalidArgumentError, ["x:", "complex"], lambda: comm.all_reduce(np.ones(4, np.complex64)))
        expect(collectived.InvalidArgumentError, ["x:", "not contiguous"], lambda: comm.all_reduce(x[::2]))
        expect(collectived.InvalidArgumentError, ["out:", "8 elements", "16"],
               lambda: comm.all_reduce(x, out=np.ones(8, np.float32)))
        expect(collectived.InvalidArgumentError, ["out:", "float64"],
               lambda: comm.all_reduce(x, out=np.ones(16, np.float64)))
        expect(collectived.InvalidArgumentError, ["out:", "world_size"],
               lambda: comm.all_gather(x, out=np.ones(16, np.float32)))
        expect(collectived.InvalidArgumentError, ["op:", "'median'"], lambda: comm.all_reduce(x, op="median"))
        expect(collectived.InvalidArgumentError, ["avg"], lambda: comm.all_reduce(np.ones(4, np.int32), op="avg"))
        expect(collectived.InvalidArgumentError, ["x:", "GPU memory", "host communicator"],
               lambda: comm.all_reduce(FakeGpuArray()))
        expect(collectived.InvalidArgumentError, ["x:", "NotAnArray"], lambda: comm.all_reduce(NotAnArray()))
        ro = np.ones(16, np.float32)
        ro.flags.writeable = False
        expect(collectived.InvalidArgumentError, ["out:", "read-only"], lambda: comm.all_reduce(x, out=ro))
        # In place writes x: read-only is refused there too, on the one-call
        # path (NumPy) and the general one (dtype= takes it).
        expect(collectived.InvalidArgumentError, ["x:", "read-only"], lambda: comm.all_reduce(ro))
        expect(collectived.InvalidArgumentError, ["x:", "read-only"], lambda: comm.all_reduce(ro, dtype="float32"))
        expect(collectived.InvalidArgumentError, ["stream:"], lambda: comm.all_reduce(x, stream=5))
        expect(collectived.InvalidArgumentError, ["dtype:"], lambda: comm.alloc(4, "int8"))
        # ValueError too: callers catch it as Python's own.
        with pytest.raises(ValueError):
            comm.all_reduce(x[::2])
        # Nothing was posted, so every rank is still in step: an op works.
        y = np.full(16, comm.rank + 1, np.float32)
        comm.all_reduce(y).wait()
        assert np.all(y == sum(r + 1 for r in range(comm.world_size)))
        assert comm.async_error() is None
        return seen

    for seen in run_ranks(2, body):
        assert len(seen) == 15


def test_communicator_arguments_are_checked(daemon):
    with collectived.Client(daemon) as c:
        with pytest.raises(collectived.InvalidArgumentError, match="rank"):
            c.communicator("k", 2, 2)
        with pytest.raises(collectived.InvalidArgumentError, match="world_size"):
            c.communicator("k", 0, 0)
        with pytest.raises(collectived.InvalidArgumentError, match="mode"):
            c.communicator("k", 1, 0, mode="turbo")


def test_a_missing_peer_is_a_deadline_and_an_unreachable_daemon_unavailable(daemon, tmp_path):
    with collectived.Client(daemon) as c:
        with pytest.raises(collectived.CollectivedError) as e:
            c.communicator("alone", 2, 0, join_timeout_ms=300)
        assert isinstance(e.value, (collectived.DeadlineExceededError, collectived.AbortedError)), e.value
        assert e.value.code in (4, 10) and e.value.message
    with pytest.raises(collectived.UnavailableError) as e:
        collectived.Client(str(tmp_path / "nobody.sock"), rpc_timeout_ms=1000)
    assert isinstance(e.value, ConnectionError)


def test_abort_fails_the_peers_op_naming_the_reason(run_ranks):
    def body(comm):
        x = np.ones(64, np.float32)
        if comm.rank == 1:
            comm.abort("python test says stop")
            return None
        with pytest.raises(collectived.AbortedError) as e:  # at the post, or at the wait
            comm.all_reduce(x).wait(timeout_ms=20000)
        assert comm.async_error() is not None and comm.async_error().code == 10
        return str(e.value)

    got = run_ranks(2, body)
    assert "python test says stop" in got[0] or "rank 1" in got[0], got[0]


def test_modes_and_properties(run_ranks):
    for mode in ("client", "daemon"):
        def body(comm):
            x = comm.alloc((4, 3), np.int32)
            x[:] = comm.rank
            comm.all_reduce(x).wait()
            return comm.mode, comm.world_size, comm.device, comm.on_gpu, int(x.sum()), x.shape

        for m, w, dev, gpu, total, shape in run_ranks(2, body, mode=mode):
            assert (m, w, dev, gpu, total, shape) == (mode, 2, -1, False, 12, (4, 3))


def test_ranks_in_separate_processes(daemon):
    script = (
        "import sys, numpy as np, collectived\n"
        "r = int(sys.argv[1])\n"
        "with collectived.Client(sys.argv[2]) as c, c.communicator(sys.argv[3], 2, r) as comm:\n"
        "    x = np.arange(100000, dtype=np.float64) * (r + 1)\n"
        "    comm.all_reduce(x).wait()\n"
        "    assert np.array_equal(x, np.arange(100000, dtype=np.float64) * 3), 'wrong'\n"
        "    print('ok', r)\n")
    key = "proc-" + str(os.getpid())
    ps = [subprocess.Popen([sys.executable, "-c", script, str(r), daemon, key], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    assert "ok 0" in outs[0] and "ok 1" in outs[1]


def test_error_classes_cover_every_status_code():
    for code in range(1, 17):
        cls = collectived._errors.BY_CODE[code]
        e = collectived._errors.from_status(code, "why")
        assert isinstance(e, cls) and isinstance(e, collectived.CollectivedError)
        assert e.code == code and e.message == "why" and e.code_name in str(e)
    assert _arrays.dtype_code("bfloat16") == 4 and _arrays.dtype_code(np.float16) == 3


def test_negative_control_a_staged_result_arrives_only_at_wait(run_ranks):
    # The checks above compare poisoned outputs: here the copy-out of a staged
    # op has not run (no wait yet), and the same comparison sees the poison.
    def body(comm):
        x = np.full(4096, comm.rank + 1, np.int32)
        out = np.full(4096, 77, np.int32)
        h = comm.all_reduce(x, out=out)
        before = int(np.count_nonzero(out != 3))
        h.wait()
        return before, int(np.count_nonzero(out != 3))

    for before, after in run_ranks(2, body):
        assert before == 4096 and after == 0


def test_the_readme_example_runs_as_written(daemon):
    # README.md's Python example, run by two ranks (processes, as a user
    # would), each checking what the example leaves behind: x summed in
    # place, g every rank's arange(4). Only the socket path is this test's.
    import pathlib
    import re
    import subprocess
    import sys
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert "comm.all_reduce(x).wait()" in code, code
    code = code.replace('"/run/collectived/collectived.sock"', repr(daemon))
    check = ("\nimport numpy\nassert numpy.all(x == 3), x\n"
             "assert list(g) == [0, 1, 2, 3, 0, 1, 2, 3], g\nprint('example ok', rank)\n")
    procs = [subprocess.Popen([sys.executable, "-c", f"rank = {r}\n" + code + check],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"example ok {r}" in out, out
