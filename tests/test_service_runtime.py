"""Runtime promises every service keeps: --help, loopback by default, token auth, graceful SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.generated.gauntlet.v1 import oracle_pb2, oracle_pb2_grpc
from common.server import client_channel

ROOT = Path(__file__).resolve().parent.parent
SERVICES = [
    "simulator_service",
    "agent_service",
    "oracle_service",
    "generator_service",
    "analysis_service",
    "translator_service",
]


@pytest.mark.parametrize("module", SERVICES)
def test_help_explains_the_service(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0
    assert "--port" in out.stdout and "--metrics-port" in out.stdout and "loopback" in out.stdout


def start(*args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "oracle_service", "--port", "0", "--metrics-port", "-1", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line, proc.stderr.read()  # type: ignore[union-attr]
    return proc, json.loads(line)["port"]


def test_token_is_required_except_for_health_checks() -> None:
    proc, port = start("--token", "s3cret")
    try:
        endpoint = f"127.0.0.1:{port}"
        with pytest.raises(grpc.RpcError) as err:
            oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint)).ListOracles(oracle_pb2.ListOraclesRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError):
            oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint, token="wrong")).ListOracles(
                oracle_pb2.ListOraclesRequest()
            )
        listed = oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint, token="s3cret")).ListOracles(
            oracle_pb2.ListOraclesRequest()
        )
        assert any(o.name == "cartpole_balance" for o in listed.oracles)
        health = health_pb2_grpc.HealthStub(client_channel(endpoint)).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_drains_and_exits_cleanly() -> None:
    proc, port = start()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    log = proc.stderr.read()  # type: ignore[union-attr]
    assert '"msg": "stopped"' in log and "Traceback" not in log


def test_bad_flag_combination_is_explained() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "oracle_service", "--tls-cert", "cert.pem"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "--tls-cert and --tls-key go together" in out.stderr
