"""Under load: long streams cannot take the threads health checks need (common/admission.py), and bench/load.py's
arguments (the bench itself runs for minutes: docs/replications/benchmarks.md)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.generated.gauntlet.v1 import simulator_pb2, simulator_pb2_grpc
from common.server import client_channel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.load import growth_pct, parse_args  # noqa: E402


def _held_session(hold: queue.Queue) -> Iterator[simulator_pb2.OpenSessionRequest]:
    """A session stream that sends nothing until released: its server thread waits for it the whole time."""
    hold.get()
    return
    yield  # a generator


def test_open_streams_cannot_starve_health_checks_and_the_next_call_is_refused_clearly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator_service", "--port", "0", "--metrics-port", "-1", "--workers", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    releases: list[queue.Queue] = []
    try:
        port = json.loads(proc.stdout.readline())["port"]  # type: ignore[union-attr]
        channel = client_channel(f"127.0.0.1:{port}")
        sim = simulator_pb2_grpc.SimulatorServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        sim.ListEnvironments(simulator_pb2.ListEnvironmentsRequest(), timeout=30)  # up and answering
        streams = []
        for _ in range(2):  # as many open streams as the service admits calls
            releases.append(queue.Queue())
            streams.append(sim.OpenSession(_held_session(releases[-1])))
        for _ in range(20):  # both streams admitted (their handlers run and wait for a first request)
            try:
                sim.ListEnvironments(simulator_pb2.ListEnvironmentsRequest(), timeout=5)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                refused = exc
                break
        else:
            pytest.fail("a third call was admitted beside two open streams on a service with --workers 2")
        assert "serving 2 calls at once, its limit (--workers 2)" in refused.details()
        for _ in range(5):  # health checks keep threads of their own
            answer = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        releases.pop().put(None)  # one stream ends: its slot is free again
        for _ in range(50):
            try:
                sim.ListEnvironments(simulator_pb2.ListEnvironmentsRequest(), timeout=5)
                break
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        else:
            pytest.fail("the slot of an ended stream was not freed")
        del streams
    finally:
        for release in releases:
            release.put(None)
        proc.terminate()
        proc.wait(timeout=30)


def test_the_load_bench_defaults_and_checks_its_arguments() -> None:
    args = parse_args([])
    assert (args.campaigns, args.minutes, args.warmup_minutes) == (8, 10.0, 2.0)
    assert parse_args(["--minutes", "2", "--campaigns", "3"]).warmup_minutes == pytest.approx(0.4)
    for bad in (["--campaigns", "0"], ["--minutes", "0"], ["--minutes", "1", "--warmup-minutes", "1"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    with pytest.raises(SystemExit):  # too short after the warm-up for two medians of three readings
        parse_args(["--minutes", "1", "--warmup-minutes", "0.9", "--poll-seconds", "5"])


def test_memory_growth_is_between_medians() -> None:
    assert growth_pct([100, 300, 100], [110, 110, 500]) == pytest.approx(10.0)


def test_services_cap_malloc_arenas_unless_the_environment_chose() -> None:
    # in a fresh interpreter: the cap applies to the process that calls it
    script = "from common.server import cap_malloc_arenas; print(cap_malloc_arenas())"
    env = {"PATH": "/usr/bin:/bin"}
    capped = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert capped.stdout.strip() == "True", capped.stderr[-2000:]
    chosen = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env={**env, "MALLOC_ARENA_MAX": "4"}, capture_output=True, text=True
    )
    assert chosen.stdout.strip() == "False", chosen.stderr[-2000:]
