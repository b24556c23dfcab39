"""One retry policy for calls to another service: which statuses are worth another try, and how long to wait.

Retried: UNAVAILABLE (the peer is down or restarting), DEADLINE_EXCEEDED (it was slow) and RESOURCE_EXHAUSTED (it
shed load); ABORTED only for a call the caller declares idempotent (a retried non-idempotent call could apply twice).
Never retried: INTERNAL, UNKNOWN and every caller-mistake code (INVALID_ARGUMENT, NOT_FOUND, ...): the same request
would fail the same way, and retrying a service bug only hides it for the length of the retry budget.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

T = TypeVar("T")
TRANSIENT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)


def is_retryable(code: grpc.StatusCode | None, idempotent: bool = False) -> bool:
    return code in TRANSIENT or (idempotent and code == grpc.StatusCode.ABORTED)


def status_code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    """The status of a failed call (None for an RpcError that carries none, e.g. a channel that never connected)."""
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


@dataclass
class Retry:
    """Retry state of one operation: exponential backoff with jitter, bounded by attempts and by wall time.

    The n-th wait (n = 0, 1, ...) is min(max_delay, initial_delay * multiplier**n), scaled by a uniform factor
    in [1 - jitter, 1] so that callers that failed together do not come back together.
    """

    budget_seconds: float = 60.0  # no new attempt starts once this long has passed since the first
    max_attempts: int | None = None  # None: only the time budget bounds the attempts
    idempotent: bool = False
    initial_delay: float = 0.5
    max_delay: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.25
    sleep: Callable[[float], object] = time.sleep  # e.g. threading.Event().wait, so a cancel cuts a wait short
    give_up: Callable[[], bool] = lambda: False  # e.g. a cancel flag: no further attempt once it is true
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = field(default=0, init=False)  # failed attempts so far
    _deadline: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._deadline = self.clock() + self.budget_seconds

    def delay(self, retry_number: int) -> float:
        """The wait before retry number `retry_number` (0-based), jitter included."""
        base = min(self.max_delay, self.initial_delay * self.multiplier**retry_number)
        return base * self.rng.uniform(1.0 - self.jitter, 1.0)

    def next_delay(self, exc: grpc.RpcError) -> float | None:
        """Records a failed attempt; the wait before the next one, or None when `exc` is final."""
        self.attempts += 1
        if not is_retryable(status_code(exc), self.idempotent) or self.give_up():
            return None
        if self.max_attempts is not None and self.attempts >= self.max_attempts:
            return None
        if self.clock() >= self._deadline:
            return None
        return self.delay(self.attempts - 1)

    def call(self, fn: Callable[[], T], on_retry: Callable[[grpc.RpcError, float], object] | None = None) -> T:
        """fn's result; a retryable failure is retried after a backoff, and the last failure is raised."""
        while True:
            try:
                return fn()
            except grpc.RpcError as exc:
                wait = self.next_delay(exc)
                if wait is None:
                    raise
                if on_retry is not None:
                    on_retry(exc, wait)
                self.sleep(wait)
                if self.give_up():
                    raise
