"""Runtime promises every service keeps: --help, loopback by default, token auth, graceful SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.credentials import ClientCredentials
from common.generated.gauntlet.v1 import oracle_pb2, oracle_pb2_grpc
from common.server import client_channel

ROOT = Path(__file__).resolve().parents[2]
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


def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "oracle_service", "--port", "0", "--metrics-port", "-1", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line, proc.stderr.read()  # type: ignore[union-attr]
    return proc, json.loads(line)["port"]


def test_token_is_required_except_for_health_checks() -> None:
    proc, port = start(env={"GAUNTLET_TOKEN": "s3cret"})
    try:
        endpoint = f"127.0.0.1:{port}"
        with pytest.raises(grpc.RpcError) as err:
            oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint)).ListOracles(oracle_pb2.ListOraclesRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError):
            oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint, ClientCredentials(token="wrong"))).ListOracles(
                oracle_pb2.ListOraclesRequest()
            )
        listed = oracle_pb2_grpc.OracleServiceStub(
            client_channel(endpoint, ClientCredentials(token="s3cret"))
        ).ListOracles(oracle_pb2.ListOraclesRequest())
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


def test_secrets_on_the_command_line_are_refused_with_the_file_or_environment_way(tmp_path: Path) -> None:
    token = subprocess.run(
        [sys.executable, "-m", "oracle_service", "--token", "s3cret"], cwd=ROOT, capture_output=True, text=True
    )
    assert token.returncode == 2 and "--token-file" in token.stderr and "GAUNTLET_TOKEN" in token.stderr
    assert "Traceback" not in token.stderr
    url = "postgresql+psycopg://gauntlet:hunter2@127.0.0.1:1/db"
    store = subprocess.run(
        [
            sys.executable,
            "-m",
            "generator_service",
            "--simulator-endpoint",
            "x:1",
            "--oracle-endpoint",
            "x:1",
            "--store-url",
            url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert store.returncode != 0 and "GAUNTLET_STORE_URL_FILE" in store.stderr and "hunter2" not in store.stderr


def test_token_file_and_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-a-file\n")
    proc, port = start("--token-file", str(tmp_path / "token"), env={"GAUNTLET_TOKEN": "ignored"})
    try:
        endpoint = f"127.0.0.1:{port}"
        stub = oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint, ClientCredentials(token="from-a-file")))
        assert stub.ListOracles(oracle_pb2.ListOraclesRequest()).oracles
        with pytest.raises(grpc.RpcError) as err:
            oracle_pb2_grpc.OracleServiceStub(client_channel(endpoint, ClientCredentials(token="ignored"))).ListOracles(
                oracle_pb2.ListOraclesRequest()
            )
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        proc.kill()
        proc.wait()
    (tmp_path / "empty").write_text("\n")
    empty = subprocess.run(
        [sys.executable, "-m", "oracle_service", "--token-file", str(tmp_path / "empty")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert empty.returncode != 0 and "one line" in empty.stderr and "Traceback" not in empty.stderr


def test_a_taken_port_fails_the_start_instead_of_sharing_it() -> None:
    # gRPC's default SO_REUSEPORT would let a second server share the first one's port without a word
    proc, port = start()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "oracle_service", "--port", str(port), "--metrics-port", "-1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0
        assert "could not bind" in out.stderr and f":{port} (--port)" in out.stderr
        assert "Traceback" not in out.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.parametrize(
    ("module", "flags", "bad"),
    [
        ("generator_service", ["--simulator-endpoint", "127.0.0.1:50051,sim", "--oracle-endpoint", "o:1"], "sim"),
        ("generator_service", ["--simulator-endpoint", "s:1", "--oracle-endpoint", "oracle"], "oracle"),
        ("simulator_service", ["--agent-endpoint", "agent-host"], "agent-host"),
        ("simulator_service", ["--allow-endpoint", "localhost"], "localhost"),
        ("analysis_service", ["--generator-endpoint", "generator"], "generator"),
    ],
)
def test_a_service_refuses_an_endpoint_flag_without_a_port(module: str, flags: list[str], bad: str) -> None:
    # gRPC would dial a host without a port on 443: the service refuses it at start, naming the flag and the value
    done = subprocess.run(
        [sys.executable, "-m", module, "--port", "0", *flags], capture_output=True, text=True, timeout=60
    )
    flag = next(f for f, v in zip(flags, flags[1:]) if bad in v.split(","))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"argument {flag}: {bad!r} has no port" in done.stderr, done.stderr[-2000:]
