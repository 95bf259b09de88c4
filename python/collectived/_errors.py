"""One exception class per collectived status code.

Every class derives from CollectivedError and carries the status: ``code``
(gRPC numbering, as in collectived/status.h), ``code_name`` and ``message``.
Some also derive from the builtin a Python caller would catch:
InvalidArgumentError is a ValueError, DeadlineExceededError a TimeoutError,
UnavailableError a ConnectionError.
"""
from __future__ import annotations

from typing import Dict, Tuple, Type


class CollectivedError(RuntimeError):
    """A collectived call failed; ``code``, ``code_name`` and ``message`` say how."""

    code: int = 2
    code_name: str = "UNKNOWN"

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{self.code_name}: {message}")
        self.message = message


_TABLE: Tuple[Tuple[int, str, str, Tuple[type, ...]], ...] = (
    (1, "CANCELLED", "CancelledError", ()),
    (2, "UNKNOWN", "UnknownError", ()),
    (3, "INVALID_ARGUMENT", "InvalidArgumentError", (ValueError,)),
    (4, "DEADLINE_EXCEEDED", "DeadlineExceededError", (TimeoutError,)),
    (5, "NOT_FOUND", "NotFoundError", ()),
    (6, "ALREADY_EXISTS", "AlreadyExistsError", ()),
    (7, "PERMISSION_DENIED", "PermissionDeniedError", (PermissionError,)),
    (8, "RESOURCE_EXHAUSTED", "ResourceExhaustedError", ()),
    (9, "FAILED_PRECONDITION", "FailedPreconditionError", ()),
    (10, "ABORTED", "AbortedError", ()),
    (11, "OUT_OF_RANGE", "OutOfRangeError", ()),
    (12, "UNIMPLEMENTED", "UnimplementedError", (NotImplementedError,)),
    (13, "INTERNAL", "InternalError", ()),
    (14, "UNAVAILABLE", "UnavailableError", (ConnectionError,)),
    (15, "DATA_LOSS", "DataLossError", ()),
    (16, "UNAUTHENTICATED", "UnauthenticatedError", ()),
)

BY_CODE: Dict[int, Type[CollectivedError]] = {}
for _code, _name, _cls, _extra in _TABLE:
    _c = type(_cls, (CollectivedError,) + _extra,
              {"code": _code, "code_name": _name, "__doc__": f"Status {_name} ({_code})."})
    globals()[_cls] = _c
    BY_CODE[_code] = _c

__all__ = ["CollectivedError"] + [t[2] for t in _TABLE]


def from_status(code: int, message: str) -> CollectivedError:
    """The exception for a status (used by the extension to raise)."""
    return BY_CODE.get(code, BY_CODE[2])(message)
