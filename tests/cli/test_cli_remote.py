"""The CLI is a client of the contract: listings ask the services (a remote suite's, or one started for the
listing), unreachable or port-less endpoints fail within seconds naming the service, and `gauntlet report` starts
only the services a report reads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.launcher import LocalSuite

ROOT = Path(__file__).resolve().parents[2]
# A subject only the remote simulator has (its own GAUNTLET_SUBJECT_PATH), with a name longer than 80 columns
# leave beside it: a listing must print it whole, because users copy it into campaign files.
REMOTE_SUBJECT = "remote_only_cartpole_declared_on_the_far_simulator_and_nowhere_else_in_this_checkout"
REMOTE_YAML = f"""
subject: {REMOTE_SUBJECT}
description: CartPole declared only in the remote simulator's subject folder.
backend: gymnasium
env_id: CartPole-v1
max_steps: 50
injector: {{kind: state_vector, attribute: state}}
oracle: cartpole_balance
parameters:
  - {{name: x, low: -0.9, high: 0.9}}
  - {{name: x_dot, low: -0.3, high: 0.3}}
  - {{name: theta, low: -0.05, high: 0.05}}
  - {{name: theta_dot, low: -0.03, high: 0.03}}
"""
CAMPAIGN = (
    "campaign:\n  subject: cartpole\n  model: cartpole-ppo\n  strategy: random\n  seed: 5\n"
    "  budget: {max_executions: 8}\n  batch_size: 8\n"
)


def gauntlet(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # an 80-column terminal, and no subject folder of the caller's: the CLI's process must not be what is listed
    base = {k: v for k, v in os.environ.items() if k != "GAUNTLET_SUBJECT_PATH"}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, "COLUMNS": "80", **(env or {})},
    )


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    """A simulator and a generator in their own processes, the simulator with a subject folder of its own."""
    root = tmp_path_factory.mktemp("remote")
    folder = root / "subjects"
    folder.mkdir()
    (folder / "remote_only.yaml").write_text(REMOTE_YAML)
    previous = os.environ.get("GAUNTLET_SUBJECT_PATH")
    os.environ["GAUNTLET_SUBJECT_PATH"] = str(folder)  # the services started now inherit it; the CLI will not
    try:
        local = LocalSuite(
            store_url=f"sqlite:///{root / 'store.db'}",
            log_dir=root / "logs",
            resume_on_start=False,
            roles=frozenset({"simulator", "generator", "oracle"}),
        ).start()
    finally:
        if previous is None:
            os.environ.pop("GAUNTLET_SUBJECT_PATH")
        else:
            os.environ["GAUNTLET_SUBJECT_PATH"] = previous
    yield local
    local.stop()


def test_environments_lists_the_remote_simulators_own_subject_whole(remote: LocalSuite) -> None:
    out = gauntlet("environments", "--simulator", remote.endpoint("simulator"))
    assert out.returncode == 0, out.stderr
    assert f"{REMOTE_SUBJECT}  (gymnasium CartPole-v1)" in out.stdout.splitlines()  # whole, on its own line
    assert "cartpole_balance; at most 50 steps" in out.stdout
    assert "x [-0.9, 0.9]" in out.stdout
    # the same command without --simulator lists the local suite's subjects, where it does not exist
    local = gauntlet("environments")
    assert local.returncode == 0, local.stderr
    assert "cartpole  (gymnasium CartPole-v1)" in local.stdout and REMOTE_SUBJECT not in local.stdout


def test_strategies_and_oracles_come_from_the_named_services(remote: LocalSuite) -> None:
    out = gauntlet("strategies", "--generator", remote.endpoint("generator"))
    assert out.returncode == 0, out.stderr
    assert "prt  (package gauntlet)" in out.stdout.splitlines()
    assert "    lam = 20.0: a number >= 1; confidence lambda of Eq. 4 (1 = uniform)" in out.stdout
    oracles = gauntlet("oracles", "--oracle", remote.endpoint("oracle"), "--json")
    assert oracles.returncode == 0, oracles.stderr
    assert '"name": "cartpole_balance"' in oracles.stdout and '"required_signals"' in oracles.stdout


def test_a_listing_of_an_unreachable_service_names_it_within_seconds() -> None:
    started = time.monotonic()
    out = gauntlet("models", "--agent", "127.0.0.1:1")
    assert time.monotonic() - started < 10
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot reach the agent service at 127.0.0.1:1" in out.stderr


def test_run_against_an_unreachable_generator_fails_within_10_s_naming_it(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN)
    started = time.monotonic()
    out = gauntlet("run", str(spec), "--generator", "127.0.0.1:1", "--analysis", "127.0.0.1:2", cwd=tmp_path)
    assert time.monotonic() - started < 10, out.stderr
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot reach the generator service at 127.0.0.1:1" in out.stderr


def test_a_silent_endpoint_is_given_up_on_within_seconds(tmp_path: Path) -> None:
    """A port that accepts connections and never answers (a hung host, a wrong service behind a load balancer)."""
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshakes; nothing ever reads or answers
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        out = gauntlet("run", str(spec), "--generator", endpoint, "--analysis", "127.0.0.1:2", cwd=tmp_path)
        elapsed = time.monotonic() - started
    assert elapsed < 15, out.stderr
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"cannot reach the generator service at {endpoint}: no answer within 5 s" in out.stderr


def test_an_endpoint_without_a_port_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN)
    out = gauntlet("run", str(spec), "--generator", "gen.example", "--analysis", "127.0.0.1:2", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "argument --generator: 'gen.example' has no port" in out.stderr and "443" in out.stderr
    # the same in a campaign file's endpoints: section, which names the file
    spec.write_text(CAMPAIGN + "endpoints: {generator: gen.example, analysis: 'an.example:5'}\n")
    out = gauntlet("run", str(spec), cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"generator service endpoint ({spec}: endpoints): 'gen.example' has no port" in out.stderr


def test_report_starts_only_what_it_reads(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN)
    (tmp_path / "run").mkdir()
    ran = gauntlet("run", str(spec), "--id", "only-1", "--store-url", store, cwd=tmp_path / "run")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (tmp_path / "report").mkdir()
    out = gauntlet("report", "only-1", "--store-url", store, cwd=tmp_path / "report")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "report-only-1.html" in out.stdout
    started = sorted(p.stem for p in (tmp_path / "report" / "runs" / "logs").glob("*.log"))
    assert started == ["analysis", "generator"]  # an RL campaign's report reads the store only
