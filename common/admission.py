"""How many calls a service serves at once, so that long streams cannot starve health checks of threads.

gRPC's synchronous server runs every call on one thread of its pool for the call's whole life, and the suite's
long calls are streams (a simulator's RunEpisodes for a whole batch, the agent's Act stream beside it, a
client's WatchCampaign for a whole campaign). With a pool of N threads, N such streams would leave a health
check queued behind them until one ends: the service looks dead while it works. So each service admits at
most ``--workers`` calls at once (health checks exempt) and refuses the next one at once with RESOURCE_EXHAUSTED
(which clients retry with backoff, common/retry.py), and its pool has HEALTH_THREADS threads more than that:
however many streams are open, a health check (or a refusal) always finds a free thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

HEALTH_PREFIX = "/grpc.health.v1.Health/"
HEALTH_THREADS = 4  # threads beyond the admitted calls: health checks and refusals never wait behind streams


def pool_size(workers: int) -> int:
    """Threads of a service's pool that admits `workers` calls at once."""
    return workers + HEALTH_THREADS


class AdmissionLimit(grpc.ServerInterceptor):
    """Admits at most `limit` calls at once (health checks exempt); the next is refused with RESOURCE_EXHAUSTED."""

    def __init__(self, service: str, limit: int) -> None:
        self._service = service
        self._limit = limit
        self._active = 0
        self._lock = threading.Lock()

    @property
    def active(self) -> int:
        return self._active

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        # The count is taken inside the call (on its pool thread), so a call that never starts is never counted.
        if handler.response_streaming:
            field = "stream_stream" if handler.request_streaming else "unary_stream"
            return handler._replace(**{field: self._streaming(getattr(handler, field))})  # type: ignore[attr-defined]
        field = "stream_unary" if handler.request_streaming else "unary_unary"
        return handler._replace(**{field: self._unary(getattr(handler, field))})  # type: ignore[attr-defined]

    def _enter(self, context: grpc.ServicerContext) -> None:
        with self._lock:
            if self._active >= self._limit:
                refused = True
            else:
                self._active += 1
                refused = False
        if refused:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the {self._service} service is serving {self._limit} calls at once, its limit (--workers "
                f"{self._limit}); retry later or start it with more --workers",
            )

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1

    def _unary(self, behavior: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[..., Any]:
        def admitted(request: Any, context: grpc.ServicerContext) -> Any:
            self._enter(context)
            try:
                return behavior(request, context)
            finally:
                self._leave()

        return admitted

    def _streaming(self, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]]) -> Callable[..., Any]:
        def admitted(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            self._enter(context)
            try:
                yield from behavior(request, context)
            finally:
                self._leave()

        return admitted
