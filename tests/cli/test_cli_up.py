"""`gauntlet up` in an 80-column terminal: endpoints, metrics URLs and log paths printed whole, and --json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.launcher import available_environments

ROOT = Path(__file__).resolve().parents[2]
# `gauntlet up` also starts a simulator per simulator environment built here (e.g. "simulator-mario" with .venv-mario)
SERVICES = {"oracle", "agent", "simulator", "generator", "analysis", "translator"} | {
    f"simulator-{name}" for name in available_environments()
}


def _up(tmp_path: Path, *flags: str) -> subprocess.Popen:
    # cwd is a scratch folder, so the default store and logs (runs/...) land there; pytest's deep tmp path makes
    # each log path longer than the table cell that 80 columns used to leave it
    env = dict(os.environ, COLUMNS="80", LINES="24", PYTHONPATH=str(ROOT), TERM="xterm")
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "up", *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _read_until(proc: subprocess.Popen, last: str, timeout: float = 300) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if last in line:
            return lines
    pytest.fail(f"`gauntlet up` printed no {last!r}: {lines}\n{proc.stderr.read()}")  # type: ignore[union-attr]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the suite stops its services and exits 130
    try:
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_up_prints_every_endpoint_metrics_url_and_log_path_whole(tmp_path: Path) -> None:
    proc = _up(tmp_path)
    try:
        lines = _read_until(proc, "Ctrl-C stops the suite.")
    finally:
        _stop(proc)
    text = "\n".join(lines)
    assert "…" not in text and "..." not in text
    # first the start's progress, a line per service as it answers; then the suite's description
    described_from = lines.index("Gauntlet services on loopback:")
    progress, description = lines[:described_from], lines[described_from:]
    ready = {line.split()[0] for line in progress if line.split()[1:2] == ["ready"]}
    # one line per role (a role's extra simulators, e.g. Mario's, answer within their role's line), then the total
    assert ready == {s for s in SERVICES if not s.startswith("simulator-")} | {"all"}, text
    logs = tmp_path / "runs" / "logs"
    for name in SERVICES:
        block = [line.split() for line in description if line.split()[:1] == [name]]
        assert len(block) == 1 and block[0][1].startswith("127.0.0.1:"), text
        assert f"log     {(logs / f'{name}.log').resolve()}" in text  # the whole path, on one line
    metrics = [line.split()[-1] for line in lines if line.strip().startswith("metrics ")]
    assert len(metrics) == len(SERVICES)
    assert all(url.startswith("http://127.0.0.1:") and url.endswith("/metrics") for url in metrics)


def test_up_json_describes_each_service_for_scripts(tmp_path: Path) -> None:
    proc = _up(tmp_path, "--json")
    try:
        line = _read_until(proc, "{")[-1]
        described = json.loads(line)
        assert set(described) == SERVICES
        for name, d in described.items():
            assert d["endpoint"].startswith("127.0.0.1:") and d["metrics"].endswith("/metrics")
            assert d["log"] == str((tmp_path / "runs" / "logs" / f"{name}.log").resolve())
            os.kill(d["pid"], 0)  # running
    finally:
        _stop(proc)
    deadline = time.monotonic() + 30
    while not all(_gone(d["pid"]) for d in described.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(_gone(d["pid"]) for d in described.values()), "Ctrl-C left services running"


def test_up_restarts_a_killed_service_on_its_port(tmp_path: Path) -> None:
    proc = _up(tmp_path, "--json")
    try:
        described = json.loads(_read_until(proc, "{")[-1])
        oracle = described["oracle"]
        os.kill(oracle["pid"], signal.SIGKILL)
        notes = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            notes.append(proc.stderr.readline().strip())  # type: ignore[union-attr]
            if "restarted" in notes[-1]:
                break
        assert notes[0].startswith(f"gauntlet: oracle service (pid {oracle['pid']}) exited with signal SIGKILL"), notes
        assert notes[-1].startswith(f"gauntlet: oracle service restarted on {oracle['endpoint']} (pid "), notes
        assert proc.poll() is None, "the suite keeps running"
    finally:
        _stop(proc)
