"""A failed call to another service, as the typed local error of the same status code (for relaying it)."""

from __future__ import annotations

import grpc

from common.errors import (
    Aborted,
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RelayedError,
    ResourceExhausted,
    ServiceError,
    Unauthenticated,
    Unavailable,
)
from common.retry import status_code

_TYPED: dict[grpc.StatusCode, type[ServiceError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        InvalidArgument,
        FailedPrecondition,
        AlreadyExists,
        Unavailable,
        DeadlineExceeded,
        ResourceExhausted,
        Unauthenticated,
        PermissionDenied,
        Aborted,
    )
}
# The peer's sentence already says what the caller got wrong; for the others the code name tells what happened.
_CALLER_MISTAKES = {
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
}


def describe(exc: grpc.RpcError) -> str:
    """'CODE: details' of a failed call, for a message a person reads."""
    code = status_code(exc) or grpc.StatusCode.UNKNOWN
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    return f"{code.name}: {details}"


def local_error(exc: grpc.RpcError, context: str = "") -> ServiceError:
    """The typed error to raise for a downstream failure, keeping its status code.

    A caller mistake (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION, ALREADY_EXISTS) keeps the peer's sentence
    as it is: it already names what was wrong. Any other status reads "<context>: <CODE>: <details>", where
    `context` says which call failed ("generator service", "model 'cartpole-ppo'"). A downstream INTERNAL stays
    INTERNAL and carries the peer's correlation id in its sentence.
    """
    code = status_code(exc) or grpc.StatusCode.UNKNOWN
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    return error_from_status(code, details or "", context)


def error_from_status(code: grpc.StatusCode, details: str, context: str = "") -> ServiceError:
    """local_error() for a status that came another way than a gRPC call (e.g. a same-host lane, common/lane.py)."""
    if code in _CALLER_MISTAKES:
        message = details or code.name
    else:
        described = f"{code.name}: {details}"
        message = f"{context}: {described}" if context else described
    cls = _TYPED.get(code)
    return cls(message) if cls is not None else RelayedError(message, code)
