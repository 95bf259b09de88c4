"""What an op needs of an array: its address, element count, type, device and
the stream to run on by default; read from a torch tensor directly, from
``__cuda_array_interface__``, or through DLPack and the buffer protocol (the
extension's ``describe``). Refusals raise InvalidArgumentError naming the
argument."""
from __future__ import annotations

import sys
from typing import Any, NamedTuple, Optional

from . import _native
from ._errors import InvalidArgumentError

# collectived's DataType values (include/collectived/types.h).
DTYPES = {"float32": 1, "float64": 2, "float16": 3, "bfloat16": 4, "int32": 5, "int64": 6, "uint32": 7}
NAMES = {v: k for k, v in DTYPES.items()}
ITEMSIZE = {1: 4, 2: 8, 3: 2, 4: 2, 5: 4, 6: 8, 7: 4}
OPS = {"sum": 1, "prod": 2, "min": 3, "max": 4, "avg": 5}
_TYPESTR = {"f4": 1, "f8": 2, "f2": 3, "i4": 5, "i8": 6, "u4": 7}

_torch_dtypes: dict = {}


class Array(NamedTuple):
    ptr: int
    count: int  # elements
    dtype: int  # DataType
    device: int  # CUDA ordinal, -1: host memory
    stream: Optional[int]  # the framework's current stream (GPU), None when it has none
    shape: tuple


def dtype_code(dtype: Any, what: str = "dtype") -> int:
    """DataType of a name ("float32"), a NumPy dtype or a torch dtype."""
    if isinstance(dtype, str):
        code = DTYPES.get(dtype)
    else:
        code = _torch_dtype(dtype) if type(dtype).__module__ == "torch" else None
        if code is None:
            name = getattr(dtype, "name", None) or getattr(getattr(dtype, "dtype", None), "name", None)
            if name is None:
                try:
                    import numpy
                    name = numpy.dtype(dtype).name
                except Exception:
                    name = None
            code = DTYPES.get(name) if name else None
    if code is None:
        raise InvalidArgumentError(f"{what}: {dtype!r} is not a supported type (one of {', '.join(DTYPES)})")
    return code


def _torch_dtype(dt: Any) -> Optional[int]:
    if not _torch_dtypes:
        import torch
        _torch_dtypes.update({torch.float32: 1, torch.float64: 2, torch.float16: 3, torch.bfloat16: 4,
                              torch.int32: 5, torch.int64: 6, torch.uint32: 7})
    return _torch_dtypes.get(dt)


def describe(x: Any, what: str, writable: bool = False, as_dtype: Optional[int] = None) -> Array:
    """The array behind `x`; raises InvalidArgumentError naming `what`.
    `as_dtype`: read the elements as this DataType (same size)."""
    mod = type(x).__module__
    if mod == "torch" or mod.startswith("torch."):
        return _describe_torch(x, what, as_dtype)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None and not hasattr(x, "__dlpack__"):
        return _describe_cai(x, cai, what, writable, as_dtype)
    ptr, count, dtype, device, shape = _native.inspect(x, what, writable, as_dtype or 0)
    return Array(ptr, count, dtype, device, _framework_stream(mod, device) if device >= 0 else None, shape)


def _contiguous(shape, strides) -> bool:
    expect = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _describe_torch(t: Any, what: str, as_dtype: Optional[int]) -> Array:
    dtype = _torch_dtype(t.dtype)
    if as_dtype is not None and t.element_size() == ITEMSIZE[as_dtype]:
        dtype = as_dtype
    if dtype is None:
        raise InvalidArgumentError(f"{what}: torch dtype {t.dtype} is not supported (one of {', '.join(DTYPES)})")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{what}: the tensor is not contiguous (strides {tuple(t.stride())}); "
                                   "pass t.contiguous()")
    # Per op, so the cheap calls: t.is_cuda and t.get_device() (an int) rather
    # than t.device, and the raw current stream rather than
    # torch.cuda.current_stream(), which builds a Stream object under a
    # device guard (tools/gpu-lab/python_overhead_probe.py times each).
    if t.is_cuda:
        index = t.get_device()
        return Array(t.data_ptr(), t.numel(), dtype, index, _torch_raw_stream(index), t.shape)  # torch.Size: a tuple
    if t.device.type == "cpu":
        return Array(t.data_ptr(), t.numel(), dtype, -1, None, tuple(t.shape))
    raise InvalidArgumentError(f"{what}: torch device {t.device} is neither cpu nor cuda")


_raw_stream = None


def _torch_raw_stream(index: int) -> int:
    """torch's current stream on device `index`, as the integer handle."""
    global _raw_stream
    if _raw_stream is None:
        import torch
        # torch._C._cuda_getCurrentRawStream is what torch's own compiled
        # code (inductor) calls per launch; older torch may lack it.
        fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw_stream = fast if fast is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)
        # From now on the extension reads torch CUDA tensors itself
        # (Communicator.all_reduce's one-call path).
        _torch_dtype(torch.float32)
        _native.register_torch(torch.Tensor, _torch_dtypes, _raw_stream)
    return _raw_stream(index)


def _describe_cai(x: Any, cai: dict, what: str, writable: bool, as_dtype: Optional[int]) -> Array:
    ptr, readonly = cai["data"]
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr[1:]) if typestr[:1] in "<|" else None
    if as_dtype is not None and typestr[2:] == str(ITEMSIZE[as_dtype]):
        dtype = as_dtype
    if dtype is None:
        raise InvalidArgumentError(f"{what}: typestr {typestr!r} is not supported (one of {', '.join(DTYPES)})")
    if writable and readonly:
        raise InvalidArgumentError(f"{what}: the array is read-only")
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is not None and not _contiguous(shape, [s // ITEMSIZE[dtype] for s in strides]):
        raise InvalidArgumentError(f"{what}: the array is not contiguous (strides {tuple(strides)} bytes)")
    count = 1
    for n in shape:
        count *= n
    device = _cai_device(ptr)
    stream = cai.get("stream")  # v3: the producer's stream
    if stream is None:
        stream = _framework_stream(type(x).__module__, device)
    return Array(ptr, count, dtype, device, stream, shape)


def _cai_device(ptr: int) -> int:
    # __cuda_array_interface__ names no device: the current one holds it
    # (as its consumers assume).
    if "torch" in sys.modules:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.current_device()
    if "cupy" in sys.modules:
        import cupy
        return cupy.cuda.Device().id
    return 0


def _framework_stream(mod: str, device: int) -> Optional[int]:
    if mod.startswith("cupy"):
        import cupy
        return cupy.cuda.get_current_stream().ptr
    if "torch" in sys.modules:
        import torch
        if torch.cuda.is_available():
            return _torch_raw_stream(device)
    return None
