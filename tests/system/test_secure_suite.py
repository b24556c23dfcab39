"""`gauntlet up --secure`: mTLS and a bearer token on every link, a campaign end to end through them, and the doors
it closes: no token (UNAUTHENTICATED), no client certificate or one from another CA (the TLS handshake fails), no
secret on any service's command line."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from cli.certificates import create_suite_credentials
from cli.endpoints import speaks_tls
from cli.launcher import available_environments
from common.credentials import ClientCredentials
from common.generated.gauntlet.v1 import analysis_pb2, analysis_pb2_grpc, generator_pb2, generator_pb2_grpc
from common.server import client_channel

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = """campaign:
  name: secure-smoke
  subject: cartpole
  model: cartpole-ppo
  strategy: random
  seed: 3
  budget: {max_executions: 40}
  batch_size: 20
  parallelism: 20
"""


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")}
    return {**clean, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **extra}


@pytest.fixture(scope="module")
def secure_suite(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`gauntlet up --secure --json` as a user starts it; yields what it printed (endpoints, pids, credentials)."""
    cwd = tmp_path_factory.mktemp("secure")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "up", "--secure", "--json"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, proc.stderr.read()  # type: ignore[union-attr]
        described = json.loads(line)
        described["cwd"] = cwd
        yield described
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # as systemd or a script stops it (issue 35: SIGTERM left the keys)
        try:
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 128 + signal.SIGTERM, proc.stderr.read()  # type: ignore[union-attr]
    folder = Path(described["credentials"]["GAUNTLET_CA"]).parent
    assert not folder.exists(), "the throwaway credentials outlived the suite"
    assert not any((cwd / "runs" / "secure").iterdir()), "SIGTERM left keys or the token under runs/secure"


def _credentials(described: dict, **override: object) -> ClientCredentials:
    c = described["credentials"]
    base = ClientCredentials(
        Path(c["GAUNTLET_CA"]),
        Path(c["GAUNTLET_CLIENT_CERT"]),
        Path(c["GAUNTLET_CLIENT_KEY"]),
        Path(c["GAUNTLET_TOKEN_FILE"]).read_text().strip(),
    )
    return dataclasses.replace(base, **override)  # type: ignore[arg-type]


def _list_campaigns(described: dict, credentials: ClientCredentials) -> grpc.StatusCode:
    stub = generator_pb2_grpc.GeneratorServiceStub(client_channel(described["generator"]["endpoint"], credentials))
    try:
        stub.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=20)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_a_campaign_runs_end_to_end_over_mtls_and_the_token(secure_suite: dict, tmp_path: Path) -> None:
    spec = tmp_path / "campaign.yaml"
    spec.write_text(CAMPAIGN)
    endpoints = [
        "--generator",
        secure_suite["generator"]["endpoint"],
        "--analysis",
        secure_suite["analysis"]["endpoint"],
    ]
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", str(spec), "--id", "secure-1", *endpoints],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(**secure_suite["credentials"]),  # what `gauntlet up --secure` tells a client to export
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "secure-1" in out.stdout and "Traceback" not in out.stderr
    # analysis -> generator ran too: the report has the campaign's 40 executions
    analysis = analysis_pb2_grpc.AnalysisServiceStub(
        client_channel(secure_suite["analysis"]["endpoint"], _credentials(secure_suite))
    )
    report = analysis.RenderReport(analysis_pb2.RenderReportRequest(campaign_ids=["secure-1"]), timeout=120)
    assert json.loads(report.json)["campaigns"][0]["metrics"]["executions"] == 40


def test_a_client_without_the_token_is_unauthenticated(secure_suite: dict) -> None:
    assert _list_campaigns(secure_suite, _credentials(secure_suite)) == grpc.StatusCode.OK
    assert _list_campaigns(secure_suite, _credentials(secure_suite, token=None)) == grpc.StatusCode.UNAUTHENTICATED
    assert _list_campaigns(secure_suite, _credentials(secure_suite, token="guess")) == grpc.StatusCode.UNAUTHENTICATED


def test_a_client_without_a_certificate_or_with_another_cas_fails_the_handshake(
    secure_suite: dict, tmp_path: Path
) -> None:
    no_cert = _credentials(secure_suite, cert=None, key=None)
    assert _list_campaigns(secure_suite, no_cert) == grpc.StatusCode.UNAVAILABLE
    assert _list_campaigns(secure_suite, ClientCredentials(token=no_cert.token)) == grpc.StatusCode.UNAVAILABLE
    other = create_suite_credentials(tmp_path)  # a CA the suite never heard of
    forged = _credentials(secure_suite, cert=other.client_cert, key=other.client_key)
    assert _list_campaigns(secure_suite, forged) == grpc.StatusCode.UNAVAILABLE


def test_no_secret_on_any_service_command_line_and_files_private(secure_suite: dict) -> None:
    token = Path(secure_suite["credentials"]["GAUNTLET_TOKEN_FILE"]).read_text().strip()
    services = {k: v for k, v in secure_suite.items() if isinstance(v, dict) and "pid" in v}
    # plus a simulator per simulator environment built here (simulator-mario where .venv-mario exists)
    extra = {f"simulator-{name}" for name in available_environments()}
    assert set(services) == {"oracle", "agent", "simulator", "generator", "analysis", "translator"} | extra
    for name, d in services.items():
        argv = Path(f"/proc/{d['pid']}/cmdline").read_bytes().split(b"\0")
        assert token.encode() not in b" ".join(argv), f"the token is on {name}'s command line"
        assert b"--token" not in argv, name
        assert b"--tls-client-ca" in argv, f"{name} does not require client certificates"
    for path in secure_suite["credentials"].values():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    # issue 35 item 8: the store, the logs and runs/ were world-readable (0644/0755)
    runs = secure_suite["cwd"] / "runs"
    for folder in [runs, runs / "logs", runs / "secure"]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    databases = list(runs.rglob("gauntlet.db*"))  # the SQLite store and its WAL and SHM files
    logs = list((runs / "logs").glob("*.log"))
    assert databases and len(logs) == len(services)
    for folder in {path.parent for path in databases}:  # runs/store, whoever created it first
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for path in databases + logs:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def _scrape(url: str, context: ssl.SSLContext | None, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=20, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_are_served_over_tls_with_the_certificate_and_the_token(secure_suite: dict) -> None:
    """Issue 35 item 8: with --secure the metrics were plain HTTP without authentication."""
    c = secure_suite["credentials"]
    token = Path(c["GAUNTLET_TOKEN_FILE"]).read_text().strip()
    with_cert = ssl.create_default_context(cafile=c["GAUNTLET_CA"])
    with_cert.load_cert_chain(c["GAUNTLET_CLIENT_CERT"], c["GAUNTLET_CLIENT_KEY"])
    without_cert = ssl.create_default_context(cafile=c["GAUNTLET_CA"])
    services = {k: v for k, v in secure_suite.items() if isinstance(v, dict) and "pid" in v}
    for name, d in services.items():
        url = d["metrics"]
        assert url.startswith("https://127.0.0.1:") and url.endswith("/metrics"), url
        status, body = _scrape(url, with_cert, token)
        assert status == 200 and "process_cpu_seconds_total" in body, (name, status)
        status, body = _scrape(url, with_cert, "wrong-token")
        assert status == 401 and "Bearer" in body and "process_" not in body, (name, status)
        assert _scrape(url, with_cert)[0] == 401
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _scrape(url, without_cert, token)  # no client certificate: the handshake fails
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            _scrape(url.replace("https://", "http://"), None, token)  # plain HTTP on the TLS port


def test_health_checks_need_no_token_but_still_the_certificate(secure_suite: dict) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channel = client_channel(secure_suite["oracle"]["endpoint"], _credentials(secure_suite, token=None))
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    plaintext = health_pb2_grpc.HealthStub(client_channel(secure_suite["oracle"]["endpoint"]))
    with pytest.raises(grpc.RpcError) as err:
        plaintext.Check(health_pb2.HealthCheckRequest(), timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_plaintext_client_is_told_at_once_that_tls_is_required(secure_suite: dict, tmp_path: Path) -> None:
    """Issue 35 item 7: a plaintext client retried for 124 s, then said 'Socket closed'."""
    spec = tmp_path / "campaign.yaml"
    spec.write_text(CAMPAIGN)
    gen, ana, sim = (secure_suite[name]["endpoint"] for name in ("generator", "analysis", "simulator"))
    for command in (
        ["run", str(spec), "--generator", gen, "--analysis", ana],
        ["environments", "--simulator", sim],
    ):
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
        assert out.returncode == 2 and "requires TLS" in out.stderr and "--ca" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and time.monotonic() - started < 30, command
    assert not speaks_tls("127.0.0.1:1")  # nothing listening


def test_gauntlet_run_secure_runs_its_local_suite_with_mtls(tmp_path: Path) -> None:
    spec = tmp_path / "campaign.yaml"
    spec.write_text(CAMPAIGN)
    out = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "run", str(spec), "--secure", "--id", "local-1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
        env=_env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "local-1" in out.stdout
    assert not any((tmp_path / "runs" / "secure").iterdir()), "the throwaway credentials outlived the run"


def test_the_health_probe_checks_a_tls_service_with_the_same_credentials(secure_suite: dict) -> None:
    probe = [sys.executable, str(ROOT / "deploy" / "grpc_health_probe.py"), secure_suite["agent"]["endpoint"]]
    ok = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=_env(**secure_suite["credentials"]))
    assert ok.returncode == 0 and "SERVING" in ok.stdout, ok.stderr
    plaintext = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=_env())
    assert plaintext.returncode == 1 and "UNAVAILABLE" in plaintext.stderr


def test_gauntlet_certs_writes_a_private_set_for_the_named_hosts(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    cmd = [sys.executable, "-m", "cli.main", "certs", str(out), "--host", "generator", "--host", "10.0.0.7"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    assert "generator" in done.stdout and "10.0.0.7" in done.stdout and "127.0.0.1" in done.stdout
    names = {"ca.crt", "server.crt", "server.key", "client.crt", "client.key", "token"}
    assert {p.name for p in out.iterdir()} == names
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in out.iterdir())
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
    assert again.returncode == 2 and "not empty" in again.stderr and "Traceback" not in again.stderr


def test_the_cli_refuses_secrets_on_its_command_line(tmp_path: Path) -> None:
    spec = tmp_path / "campaign.yaml"
    spec.write_text(CAMPAIGN)
    for flags, remedy in (
        (["--token", "s3cret"], "GAUNTLET_TOKEN_FILE"),
        (["--store-url", "postgresql+psycopg://gauntlet:s3cret@127.0.0.1:1/db"], "GAUNTLET_STORE_URL_FILE"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", "run", str(spec), *flags],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
        assert out.returncode == 2 and remedy in out.stderr, out.stderr
        assert "s3cret" not in out.stderr and "Traceback" not in out.stderr
