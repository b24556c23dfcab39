"""Typed errors reach the caller with their code; anything else is INTERNAL with a correlation id that the
service's log holds together with the traceback; calls to other services retry only transient statuses."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from common.errors import InvalidArgument, NotFound, RelayedError, ServiceError, Unavailable
from common.generated.gauntlet.v1 import simulator_pb2, simulator_pb2_grpc
from common.remote import local_error
from common.retry import Retry, is_retryable
from common.server import client_channel

ROOT = Path(__file__).resolve().parents[2]
# A real subject whose environment cannot be built (CartPole takes no such option): a deployment mistake that
# surfaces inside a handler as an exception no handler expects.
BROKEN_SUBJECT = """
subject: broken_cartpole
description: CartPole with an option CartPole does not take.
backend: gymnasium
env_id: CartPole-v1
env_kwargs: {no_such_option: 1}
max_steps: 10
injector: {kind: state_vector, attribute: state}
oracle: cartpole_balance
parameters:
  - {name: x, low: -0.9, high: 0.9}
  - {name: x_dot, low: -0.3, high: 0.3}
  - {name: theta, low: -0.05, high: 0.05}
  - {name: theta_dot, low: -0.03, high: 0.03}
"""


def test_an_unexpected_exception_is_internal_with_a_correlation_id_found_in_the_log(tmp_path: Path) -> None:
    subjects = tmp_path / "subjects"
    subjects.mkdir()
    (subjects / "broken.yaml").write_text(BROKEN_SUBJECT)
    log_path = tmp_path / "simulator.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "simulator_service", "--port", "0", "--metrics-port", "-1"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=dict(os.environ, GAUNTLET_SUBJECT_PATH=str(subjects)),
        )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, log_path.read_text()
        sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(f"127.0.0.1:{json.loads(line)['port']}"))
        with pytest.raises(grpc.RpcError) as err:
            sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="broken_cartpole"), timeout=60)
        assert err.value.code() == grpc.StatusCode.INTERNAL
        details = err.value.details()
        found = re.fullmatch(
            r"internal error in DescribeEnvironment \(correlation id ([0-9a-f]{16})\); the service log has the details",
            details,
        )
        assert found, details
        assert "Traceback" not in details and "no_such_option" not in details and "TypeError" not in details
        # a deliberate error of the same service still reads as the caller's mistake
        with pytest.raises(grpc.RpcError) as err:
            sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpol"), timeout=60)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and "cartpole" in err.value.details()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    records = [json.loads(r) for r in log_path.read_text().splitlines() if r.startswith("{")]
    matching = [r for r in records if r.get("correlation_id") == found.group(1)]
    assert len(matching) == 1, records
    record = matching[0]
    assert record["level"] == "ERROR" and record["service"] == "simulator"
    assert found.group(1) in record["msg"] and "DescribeEnvironment" in record["msg"]
    assert record["exc"].startswith("Traceback") and "no_such_option" in record["exc"]


# -- relaying a downstream status ------------------------------------------------------------------------------
class FakeRpcError(grpc.RpcError):
    """What a failed stub call raises: an RpcError that is also a grpc.Call with code() and details()."""

    def __init__(self, code: grpc.StatusCode, details: str = "boom") -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_a_relayed_status_keeps_its_code() -> None:
    err = local_error(FakeRpcError(grpc.StatusCode.NOT_FOUND, "unknown campaign 'x'"), "generator service")
    assert isinstance(err, NotFound) and str(err) == "unknown campaign 'x'"
    err = local_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad"))
    assert isinstance(err, InvalidArgument) and err.code == grpc.StatusCode.INVALID_ARGUMENT
    err = local_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"), "generator service")
    assert isinstance(err, Unavailable) and str(err) == "generator service: UNAVAILABLE: connection refused"
    err = local_error(FakeRpcError(grpc.StatusCode.INTERNAL, "internal error in X (correlation id 1)"), "agent")
    assert isinstance(err, RelayedError) and isinstance(err, ServiceError)
    assert err.code == grpc.StatusCode.INTERNAL and "correlation id 1" in str(err)


# -- the retry helper ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "idempotent", "retried"),
    [
        (grpc.StatusCode.UNAVAILABLE, False, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, False, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, False, True),
        (grpc.StatusCode.ABORTED, False, False),
        (grpc.StatusCode.ABORTED, True, True),
        (grpc.StatusCode.INTERNAL, True, False),
        (grpc.StatusCode.UNKNOWN, True, False),
        (grpc.StatusCode.INVALID_ARGUMENT, True, False),
        (grpc.StatusCode.NOT_FOUND, True, False),
        (grpc.StatusCode.FAILED_PRECONDITION, True, False),
        (grpc.StatusCode.UNAUTHENTICATED, True, False),
        (grpc.StatusCode.CANCELLED, True, False),
    ],
)
def test_which_codes_are_retried(code: grpc.StatusCode, idempotent: bool, retried: bool) -> None:
    assert is_retryable(code, idempotent) is retried
    calls: list[int] = []

    def fail() -> None:
        calls.append(1)
        raise FakeRpcError(code)

    with pytest.raises(FakeRpcError):
        Retry(max_attempts=3, idempotent=idempotent, sleep=lambda _: None).call(fail)
    assert len(calls) == (3 if retried else 1)


def test_backoff_grows_exponentially_up_to_its_cap_with_jitter_in_range() -> None:
    retry = Retry(initial_delay=0.5, multiplier=2.0, max_delay=5.0, jitter=0.25, rng=random.Random(7))
    for n, base in enumerate([0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]):
        waits = [retry.delay(n) for _ in range(200)]
        assert all(0.75 * base <= w <= base for w in waits), (n, min(waits), max(waits))
        assert max(waits) - min(waits) > 0.1 * base  # jittered, not one fixed value
    still = Retry(jitter=0.0)
    assert [still.delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]


def test_exhausted_attempts_raise_the_last_error_after_waiting_the_backoff() -> None:
    slept: list[float] = []
    errors = iter(FakeRpcError(grpc.StatusCode.UNAVAILABLE, f"attempt {i}") for i in range(1, 10))
    retries: list[str] = []

    def fail() -> None:
        raise next(errors)

    retry = Retry(max_attempts=4, jitter=0.0, sleep=slept.append)
    with pytest.raises(FakeRpcError) as err:
        retry.call(fail, on_retry=lambda exc, wait: retries.append(exc.details()))
    assert err.value.details() == "attempt 4" and retry.attempts == 4
    assert slept == [0.5, 1.0, 2.0] and retries == ["attempt 1", "attempt 2", "attempt 3"]


def test_the_time_budget_and_a_give_up_flag_end_retrying() -> None:
    now = [0.0]

    def fail() -> None:
        now[0] += 4.0  # each attempt takes 4 s of the 10 s budget
        raise FakeRpcError(grpc.StatusCode.UNAVAILABLE)

    retry = Retry(budget_seconds=10.0, jitter=0.0, clock=lambda: now[0], sleep=lambda _: None)
    with pytest.raises(FakeRpcError):
        retry.call(fail)
    assert retry.attempts == 3  # failed at 4 s and 8 s (retried), at 12 s the budget is spent
    cancelled = Retry(sleep=lambda _: None, give_up=lambda: True)
    with pytest.raises(FakeRpcError):
        cancelled.call(fail)
    assert cancelled.attempts == 1


def test_a_success_after_transient_failures_is_returned() -> None:
    outcomes = [FakeRpcError(grpc.StatusCode.UNAVAILABLE), FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED), "ok"]

    def flaky() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert Retry(sleep=lambda _: None).call(flaky) == "ok"
