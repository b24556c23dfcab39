"""Service errors that map to gRPC status codes with one human sentence (never a traceback)."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

log = logging.getLogger("gauntlet")
F = TypeVar("F", bound=Callable[..., Any])


class ServiceError(Exception):
    code = grpc.StatusCode.INTERNAL


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


def _message(exc: BaseException) -> str:
    # KeyError quotes its message; unwrap it so the sentence reads naturally.
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    if isinstance(exc, ServiceError):
        context.abort(exc.code, _message(exc))
    if isinstance(exc, KeyError):
        context.abort(grpc.StatusCode.NOT_FOUND, _message(exc))
    if isinstance(exc, ValueError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, _message(exc))
    log.exception("unexpected error in %s", method)
    context.abort(
        grpc.StatusCode.INTERNAL, f"{method} failed: {type(exc).__name__}: {exc} (details in the service log)"
    )


def grpc_method(func: F) -> F:
    """Turns exceptions raised by a servicer method (unary or streaming) into gRPC status codes."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def stream(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                yield from func(self, request, context)
            except Exception as exc:  # noqa: BLE001 - converted to a status
                if context.code() is None or not isinstance(exc, grpc.RpcError):
                    _abort(context, exc, func.__name__)
                raise

        return stream  # type: ignore[return-value]

    @functools.wraps(func)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return func(self, request, context)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, grpc.RpcError) and context.code() is not None:
                raise
            _abort(context, exc, func.__name__)

    return unary  # type: ignore[return-value]
