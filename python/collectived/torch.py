"""collectived ops as PyTorch custom ops: ``torch.ops.collectived.all_reduce``
and ``all_gather``, with fake (meta) kernels, so they trace into
``torch.compile`` graphs and capture into ``torch.cuda.graph``. No build
dependency on libtorch: registered from Python at import.

    import collectived.torch as cdt
    y = cdt.all_reduce(x, comm)                 # out of place, on the current stream
    cid = cdt.register(comm)                    # compiled code names it by id
    f = torch.compile(lambda x: torch.ops.collectived.all_reduce(x * 2, cid, "max"))

The ops run on torch's current stream and order it after themselves (no
host wait for GPU tensors); a communicator is named by its id, kept here
while it is registered (``all_reduce`` registers it on first use).
"""
from __future__ import annotations

from typing import Dict

import torch

from . import Communicator, InvalidArgumentError

_comms: Dict[int, Communicator] = {}


def register(comm: Communicator) -> int:
    """Makes `comm` reachable from the custom ops; returns the id they take."""
    _comms[comm.id] = comm
    return comm.id


def _comm(comm_id: int) -> Communicator:
    c = _comms.get(comm_id)
    if c is None:
        raise InvalidArgumentError(f"comm: no registered communicator {comm_id} (collectived.torch.register)")
    return c


@torch.library.custom_op("collectived::all_reduce", mutates_args=())
def _all_reduce(x: torch.Tensor, comm_id: int, op: str) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _comm(comm_id).all_reduce(x.contiguous(), out=out, op=op).wait()
    return out


@_all_reduce.register_fake
def _(x: torch.Tensor, comm_id: int, op: str) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("collectived::all_gather", mutates_args=())
def _all_gather(x: torch.Tensor, comm_id: int, world_size: int) -> torch.Tensor:
    shape = (world_size * x.shape[0],) + tuple(x.shape[1:]) if x.dim() else (world_size,)
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    _comm(comm_id).all_gather(x.contiguous(), out=out).wait()
    return out


@_all_gather.register_fake
def _(x: torch.Tensor, comm_id: int, world_size: int) -> torch.Tensor:
    shape = (world_size * x.shape[0],) + tuple(x.shape[1:]) if x.dim() else (world_size,)
    return torch.empty(shape, dtype=x.dtype, device=x.device)


def all_reduce(x: torch.Tensor, comm: Communicator, op: str = "sum") -> torch.Tensor:
    """A new tensor: `op` over every rank's `x` (sum, prod, min, max, avg)."""
    if comm.id not in _comms:
        register(comm)
    return torch.ops.collectived.all_reduce(x, comm.id, op)


def all_gather(x: torch.Tensor, comm: Communicator) -> torch.Tensor:
    """A new tensor: every rank's `x` along dimension 0, rank after rank."""
    if comm.id not in _comms:
        register(comm)
    return torch.ops.collectived.all_gather(x, comm.id, comm.world_size)
