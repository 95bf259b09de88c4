"""collectived for Python: all-reduce and all-gather through the node's
collective daemon, zero-copy on arrays it allocated, on NumPy, PyTorch and
CuPy arrays (host and GPU), inside CUDA graphs and torch.compile.

    import collectived, numpy as np
    with collectived.Client() as client:                     # $COLLECTIVED_SOCKET
        with client.communicator("job-1", world_size=2, rank=r) as comm:
            x = comm.alloc((1024,), "float32")              # daemon memory: zero-copy
            x[:] = r + 1
            comm.all_reduce(x).wait()                        # in place: x == 3 everywhere

GPU communicators (``device=0``) take torch or CuPy tensors and run on the
tensor framework's current stream unless ``stream`` is given; ``wait()``
makes that stream wait for the op without blocking the host.
"""
from __future__ import annotations

import os
from typing import Any, List, NamedTuple, Optional, Sequence, Union

from . import _native
from ._arrays import DTYPES, OPS, Array, describe, dtype_code
from ._errors import *  # noqa: F401,F403 (one class per status code)
from ._errors import BY_CODE, CollectivedError, InvalidArgumentError, __all__ as _error_names

__version__ = "0.1.0"
DEFAULT_SOCKET = "/run/collectived/collectived.sock"
_MODES = {"default": 0, "client": 1, "daemon": 2}

__all__ = ["Client", "Communicator", "Handle", "Status", "Version", "DEFAULT_SOCKET"] + list(_error_names)


class Status(NamedTuple):
    """A finished op's status: ``code`` 0 is OK."""
    code: int
    code_name: str
    message: str

    @property
    def ok(self) -> bool:
        return self.code == 0


class Version(NamedTuple):
    """What the daemon runs (``Client.version()``)."""
    daemon_version: str
    api_major: int
    api_minor: int
    backends: List[str]
    active_backend: str
    capabilities: List[str]
    max_message_bytes: int


def _status(t: Optional[tuple]) -> Optional[Status]:
    if t is None:
        return None
    code, message = t
    return Status(code, BY_CODE[code].code_name if code in BY_CODE else "OK", message)


class Handle:
    """One op's completion. ``wait()`` on a host op blocks until it completed
    (and its result is in the output); on a GPU op it makes ``stream``
    (default: the stream the op ran on) wait for it, without blocking the host.
    The handle keeps its arrays alive until the op completed."""

    __slots__ = ("_h", "_stream", "_keep", "result")

    def __init__(self, h: _native.Handle, stream: Optional[int], keep: tuple, result: Any) -> None:
        self._h = h
        self._stream = stream
        self._keep = keep
        #: The output array (``out``, or the input when the op ran in place).
        self.result = result

    def wait(self, stream: Any = None, timeout_ms: int = -1) -> Any:
        """Host op: blocks until complete, raises its error. GPU op: `stream`
        (an int, or an object with ``cuda_stream`` / ``ptr``; default the op's
        own stream) waits for it. Returns ``result``."""
        if self._h.gpu:
            self._h.wait_on(_stream_int(stream) if stream is not None else (self._stream or 0))
        else:
            self._h.wait(timeout_ms)
            self._keep = ()
        return self.result

    def synchronize(self, timeout_ms: int = -1) -> Any:
        """Blocks the host until the op completed (GPU ops too); raises its error."""
        self._h.wait(timeout_ms)
        self._keep = ()
        return self.result

    def done(self) -> bool:
        """True once the op completed (then ``status`` is set)."""
        d = self._h.done()
        if d:
            self._keep = ()
        return d

    @property
    def status(self) -> Optional[Status]:
        """None while the op runs, then its Status."""
        return _status(self._h.status())


def _stream_int(stream: Any) -> int:
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise InvalidArgumentError(f"stream: {stream!r} is neither an int nor a stream object (cuda_stream / ptr)")


class Communicator:
    """A member of a communicator (``Client.communicator``); a context manager
    whose exit destroys it. Ops on one communicator are posted in the same
    order by every rank, from one thread at a time."""

    def __init__(self, native: _native.Communicator) -> None:
        self._c = native
        self._host = not native.on_gpu
        self._destroyed = False

    rank = property(lambda self: self._c.rank, doc="This member's rank.")
    world_size = property(lambda self: self._c.world_size, doc="Members in the communicator.")
    id = property(lambda self: self._c.id, doc="The daemon's id of the communicator (shared by every rank).")
    device = property(lambda self: self._c.device, doc="CUDA device ordinal; -1 for a host communicator.")
    on_gpu = property(lambda self: self._c.on_gpu, doc="True for a GPU communicator.")
    max_message_bytes = property(lambda self: self._c.max_message_bytes,
                                 doc="Largest op per rank on memory not from alloc() (GPU: staged).")

    @property
    def mode(self) -> str:
        """"client" or "daemon": who executes the ops."""
        return {1: "client", 2: "daemon"}.get(self._c.mode, "default")

    def alloc(self, shape: Union[int, Sequence[int]], dtype: Any = "float32") -> Any:
        """An array in memory ops use without a copy: the daemon's shared
        memory (host; a NumPy array where NumPy has the type) or this rank's
        symmetric heap (GPU; a DLPack array: ``torch.from_dlpack`` gives a
        tensor over it). A torch dtype returns a torch tensor. Collective on
        GPU: every rank allocates the same sizes in the same order."""
        shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise InvalidArgumentError(f"shape: {shape} has a negative dimension")
        code = dtype_code(dtype)
        want_torch = type(dtype).__module__ == "torch"
        arr = self._c.alloc(list(shape), code, not want_torch)
        if want_torch:
            import torch
            return torch.from_dlpack(arr)
        return arr

    def all_reduce(self, x: Any, out: Any = None, op: str = "sum", stream: Any = None,
                   dtype: Any = None) -> Handle:
        """out[i] = op over ranks of x[i] (in place when out is None or x).
        `op`: sum, prod, min, max or avg (floating types). `dtype` reads
        the arrays as another type of the same size (bfloat16 bits in a
        NumPy uint16 array, say)."""
        opc = OPS.get(op) if isinstance(op, str) else None
        if opc is None:
            raise InvalidArgumentError(f"op: {op!r} is not one of {', '.join(OPS)}")
        if (self._host and dtype is None and stream is None and type(x).__module__ == "numpy"
                and (out is None or type(out).__module__ == "numpy")):
            # The common host case in one call to the extension (the same
            # checks and messages as below): about 1 us less per op.
            return Handle(self._c.all_reduce_arrays(x, out, opc), None, (x, out), x if out is None else out)
        if not self._host and dtype is None and stream is None:
            # torch CUDA tensors in one call to the extension (None for
            # anything else, which the checks below then describe).
            h = self._c.all_reduce_torch(x, out, opc)
            if h is not None:
                return Handle(h, h.stream, (x, out), x if out is None else out)
        a = self._arg(x, "x", out is None or out is x, dtype)
        o = a if out is None or out is x else self._arg(out, "out", True, dtype)
        if o.count != a.count:
            raise InvalidArgumentError(f"out: {o.count} elements where x has {a.count}")
        if o.dtype != a.dtype:
            raise InvalidArgumentError(f"out: type {_name(o.dtype)} where x is {_name(a.dtype)}")
        s = self._stream(a, stream)
        h = self._c.all_reduce(a.ptr, o.ptr, a.count, a.dtype, opc, s or 0)
        res = x if out is None else out
        return Handle(h, s, (x, out), res)

    def all_gather(self, x: Any, out: Any = None, stream: Any = None, dtype: Any = None) -> Handle:
        """out holds every rank's x, rank after rank (world_size * x.size
        elements). out=None allocates it in x's framework (NumPy, torch or
        CuPy): ``handle.result``."""
        a = self._arg(x, "x", False, dtype)
        if out is None:
            out = _empty_like(x, a, self.world_size)
        o = self._arg(out, "out", True, dtype)
        if o.count != a.count * self.world_size:
            raise InvalidArgumentError(f"out: {o.count} elements where world_size * x.size is "
                                       f"{a.count * self.world_size}")
        if o.dtype != a.dtype:
            raise InvalidArgumentError(f"out: type {_name(o.dtype)} where x is {_name(a.dtype)}")
        s = self._stream(a, stream)
        h = self._c.all_gather(a.ptr, o.ptr, a.count, a.dtype, s or 0)
        return Handle(h, s, (x, out), out)

    def zero_copy(self, x: Any) -> bool:
        """True when ops on `x` run without a copy (it lives in alloc() memory)."""
        a = describe(x, "x")
        return self._c.zero_copy(a.ptr, a.count * _itemsize(a.dtype))

    def async_error(self) -> Optional[Status]:
        """The communicator's first failure (a peer left, an abort, a deadline), or None; cheap."""
        return _status(self._c.async_error())

    def abort(self, reason: str = "aborted from Python") -> None:
        """Ends every rank's ops now; peers' ops fail ABORTED naming `reason`."""
        self._c.abort(reason)

    def destroy(self) -> None:
        """Waits for this rank's ops, then leaves. Idempotent."""
        if not self._destroyed:
            self._destroyed = True
            self._c.destroy()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.destroy()
        except CollectivedError:
            # Leaving an aborted communicator (or on an error already
            # propagating) reports nothing new.
            if exc[0] is None and self.async_error() is None:
                raise

    def _arg(self, x: Any, what: str, writable: bool, dtype: Any) -> Array:
        code = None if dtype is None else dtype_code(dtype, "dtype")
        a = describe(x, what, writable, code)
        if code is not None and a.dtype != code:
            raise InvalidArgumentError(f"dtype: {_name(code)} is {_itemsize(code)} bytes, {what}'s elements "
                                       f"are {_itemsize(a.dtype)}")
        dev = self._c.device
        if a.device != dev:
            if dev < 0:
                raise InvalidArgumentError(f"{what}: GPU memory (device {a.device}) given to a host communicator")
            if a.device < 0:
                raise InvalidArgumentError(f"{what}: host memory given to a GPU communicator (device {dev})")
            raise InvalidArgumentError(f"{what}: on device {a.device}, this communicator is on device {dev}")
        return a

    def _stream(self, a: Array, stream: Any) -> Optional[int]:
        if not self._c.on_gpu:
            if stream is not None:
                raise InvalidArgumentError("stream: a host communicator runs on no stream")
            return None
        return _stream_int(stream) if stream is not None else a.stream


def _itemsize(code: int) -> int:
    from ._arrays import ITEMSIZE
    return ITEMSIZE[code]


def _name(code: int) -> str:
    from ._arrays import NAMES
    return NAMES.get(code, str(code))


def _empty_like(x: Any, a: Array, world: int) -> Any:
    shape = (world * a.shape[0],) + tuple(a.shape[1:]) if a.shape else (world,)
    mod = type(x).__module__
    if mod == "torch" or mod.startswith("torch."):
        import torch
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if mod.startswith("cupy"):
        import cupy
        return cupy.empty(shape, dtype=x.dtype)
    if mod.startswith("numpy"):
        import numpy
        return numpy.empty(shape, dtype=x.dtype)
    raise InvalidArgumentError(f"out: cannot allocate an output like {type(x).__name__}: pass out=")


class Client:
    """A session with the daemon (``socket``: default $COLLECTIVED_SOCKET,
    else /run/collectived/collectived.sock). A context manager; closing
    frees what the session held once its communicators are gone."""

    def __init__(self, socket: Optional[str] = None, name: str = "python", rpc_timeout_ms: int = 10000) -> None:
        socket = socket or os.environ.get("COLLECTIVED_SOCKET") or DEFAULT_SOCKET
        self._c: Optional[_native.Client] = _native.Client(socket, name, rpc_timeout_ms)

    def version(self) -> Version:
        """The daemon's version, backends and limits."""
        d = self._native().version()
        return Version(**d)

    @property
    def session_id(self) -> int:
        return self._native().session_id

    def communicator(self, key: str, world_size: int, rank: int, device: Optional[int] = None,
                     heap_bytes: int = 0, mode: str = "default", op_timeout_ms: int = 0,
                     join_timeout_ms: int = 60000) -> Communicator:
        """Joins communicator `key` as `rank` of `world_size`; blocks until
        every member joined (or join_timeout_ms). `device`: a CUDA ordinal for
        a GPU communicator (its symmetric heap: `heap_bytes` per rank, the same
        on every rank), None for host. `mode`: "client" or "daemon" executes."""
        if mode not in _MODES:
            raise InvalidArgumentError(f"mode: {mode!r} is not one of {', '.join(_MODES)}")
        if not isinstance(world_size, int) or world_size <= 0:
            raise InvalidArgumentError(f"world_size: {world_size!r} is not a positive int")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise InvalidArgumentError(f"rank: {rank!r} is outside [0, {world_size})")
        native = self._native().communicator(key, world_size, rank, -1 if device is None else int(device),
                                             int(heap_bytes), _MODES[mode], int(op_timeout_ms),
                                             int(join_timeout_ms))
        return Communicator(native)

    def close(self) -> None:
        """Detaches the session (the daemon frees what it held)."""
        self._c = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _native(self) -> _native.Client:
        if self._c is None:
            raise CollectivedError("the client is closed")
        return self._c
