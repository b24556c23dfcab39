"""Typed service errors and the one place that turns a servicer's exceptions into gRPC statuses.

Only a ServiceError reaches the caller with its own code and sentence: it is a deliberate answer ("that campaign
does not exist", "batch_size is out of range"). Any other exception is a bug in the service, not the caller's
mistake, so the caller gets INTERNAL with one sentence and a correlation id, and the service's JSON log gets the
same id with the traceback. A plain KeyError or ValueError is deliberately not mapped: a bug deep inside a
handler must not read as NOT_FOUND or INVALID_ARGUMENT (a retrying caller would give up on a transient fault, and
a user would hunt for a mistake they did not make).
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

log = logging.getLogger("gauntlet.errors")
F = TypeVar("F", bound=Callable[..., Any])
MAX_DETAIL_BYTES = 1024  # the longest status detail a service sends (a longer one is cut, marked as cut)


class ServiceError(Exception):
    """A deliberate failure the caller sees as `code` with this exception's message."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AlreadyExists(ServiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class DataLoss(ServiceError):
    """A peer (e.g. a simulator host) answered with data that cannot be read: not retryable, not our bug."""

    code = grpc.StatusCode.DATA_LOSS


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Aborted(ServiceError):
    code = grpc.StatusCode.ABORTED


class RelayedError(ServiceError):
    """A downstream service's status that has no class of its own here (INTERNAL, UNKNOWN, DATA_LOSS, ...),
    passed on with its code (see common/remote.py)."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


def bounded(text: str, limit: int = MAX_DETAIL_BYTES) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, marking the cut. The sources summarise long values already
    (common/validation.py); this is the guard for any sentence that still grew long (a relayed detail, a list of
    every installed plug-in), so that no caller receives an unbounded detail."""
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return text
    marker = f" ... (cut: {len(encoded):,} bytes in all)"
    return encoded[: limit - len(marker.encode())].decode("utf-8", "ignore") + marker


def correlation_id() -> str:
    return uuid.uuid4().hex[:16]


def status_of(exc: BaseException, method: str) -> tuple[grpc.StatusCode, str]:
    """The status a caller gets for `exc` raised in `method`: a ServiceError's own code and (bounded) sentence; for
    anything else INTERNAL with a correlation id, logged here with the traceback under the same id."""
    if isinstance(exc, ServiceError):
        return exc.code, bounded(str(exc))
    cid = correlation_id()
    log.error(
        "internal error in %s (correlation id %s): %s: %s",
        method,
        cid,
        type(exc).__name__,
        exc,
        exc_info=exc,
        extra={"correlation_id": cid},
    )
    return (
        grpc.StatusCode.INTERNAL,
        f"internal error in {method} (correlation id {cid}); the service log has the details",
    )


def _abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    context.abort(*status_of(exc, method))


def _status_set(context: grpc.ServicerContext) -> bool:
    """True when the handler already chose its status (context.abort raised): that status stands."""
    return context.code() is not None  # type: ignore[attr-defined]  # grpcio >= 1.38; the stubs lack it


def grpc_method(func: F) -> F:
    """Turns exceptions raised by a servicer method (unary or streaming) into gRPC status codes."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def stream(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                yield from func(self, request, context)
            except Exception as exc:  # converted to a status
                if _status_set(context):
                    raise
                if isinstance(exc, grpc.RpcError) and not context.is_active():
                    return  # the request stream broke because the caller cancelled or died: nobody to answer
                _abort(context, exc, func.__name__)

        return stream  # type: ignore[return-value]

    @functools.wraps(func)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return func(self, request, context)
        except Exception as exc:  # converted to a status
            if _status_set(context):
                raise
            _abort(context, exc, func.__name__)

    return unary  # type: ignore[return-value]
