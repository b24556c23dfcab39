"""The local launcher's supervisor: a dead service comes back on its port; one that keeps crashing stops the suite."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli.launcher import LocalSuite
from cli.supervisor import RestartPolicy, Supervisor

FAST = RestartPolicy(initial_delay=0.1, max_delay=0.2, max_quick_crashes=3)


def _serving(endpoint: str) -> bool:
    with grpc.insecure_channel(endpoint) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def _until(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_killed_service_is_restarted_on_its_ports_and_logged(tmp_path: Path) -> None:
    local = LocalSuite(store_url="sqlite://", log_dir=tmp_path)
    oracle = local.start_service("oracle", "oracle_service")
    lines: list[str] = []
    supervisor = Supervisor(local, FAST, notify=lines.append).start()
    local.supervisor = supervisor
    try:
        oracle.process.kill()
        _until(lambda: local.services["oracle"].process.pid != oracle.process.pid)
        restarted = local.services["oracle"]
        assert (restarted.port, restarted.metrics_port) == (oracle.port, oracle.metrics_port)
        assert _serving(restarted.endpoint) and supervisor.restarts["oracle"] == 1
    finally:
        local.stop()
    assert lines[0].startswith(f"oracle service (pid {oracle.process.pid}) exited with signal SIGKILL after ")
    assert lines[0].endswith(f"restarting it on {oracle.endpoint} in 0.1s (crash 1)")
    assert lines[1] == f"oracle service restarted on {oracle.endpoint} (pid {restarted.process.pid})"
    logged = [json.loads(line) for line in (tmp_path / "oracle.log").read_text().splitlines() if '"launcher"' in line]
    assert [entry["msg"] for entry in logged] == lines  # the service's own log keeps the story too


def test_a_service_that_keeps_crashing_stops_the_suite_with_one_clear_line(tmp_path: Path) -> None:
    local = LocalSuite(store_url="sqlite://", log_dir=tmp_path)
    oracle = local.start_service("oracle", "oracle_service")
    translator = local.start_service("translator", "translator_service")
    oracle.args = ("--log-level", "NOISY")  # every restart now exits at once (argparse refuses the value)
    lines: list[str] = []
    local.supervisor = Supervisor(local, FAST, notify=lines.append).start()
    try:
        oracle.process.kill()
        reason = local.wait()  # what `gauntlet up` prints before it exits 2
    finally:
        local.stop()
    assert reason == lines[-1]
    assert reason.startswith("the oracle service crashed 3 times in a row, each within 30s of its start; ")
    assert reason.endswith(f"the suite is stopped (log {(tmp_path / 'oracle.log').resolve()})")
    assert "did not start again" in lines[-2]
    assert translator.process.poll() is not None, "giving up stops the other services too"
