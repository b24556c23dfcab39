"""A process that holds a LocalSuite and is killed outright (no __exit__) leaves no service running."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import json, sys, time
from pathlib import Path
from cli.launcher import LocalSuite
suite = LocalSuite(store_url="sqlite:///" + sys.argv[1] + "/s.db", log_dir=Path(sys.argv[1]) / "logs").start()
print(json.dumps([s.process.pid for s in suite.services.values()]), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead; its parent (init, after the kill) reaps it
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # reaped between the two looks
        return False
    return stat.split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal is Linux's prctl")
def test_services_exit_when_their_launcher_is_killed(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    pids: list[int] = []
    try:
        pids = json.loads(holder.stdout.readline())  # type: ignore[union-attr]
        assert len(pids) == 6 and all(_alive(pid) for pid in pids)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in pids if _alive(pid)], "services outlived their killed launcher"
    finally:
        holder.kill()
        holder.wait()
        for pid in pids:  # a failing run must not leave its services behind either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_service_drains_once_however_many_signals_arrive(tmp_path: Path) -> None:
    # A launcher's death (parent-death SIGTERM) and a user's Ctrl-C can land together; handling each signal by
    # draining inside the handler deadlocked on re-entry and left the process running.
    with (tmp_path / "oracle.log").open("w") as log:
        service = subprocess.Popen(
            [sys.executable, "-m", "oracle_service", "--port", "0", "--metrics-port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            assert json.loads(service.stdout.readline())["service"]  # type: ignore[union-attr]
            # A burst of signals, so that some land while the first one's drain is under way.
            # (The old in-handler drain deadlocked in about 1 of 3 runs of this test.)
            burst = itertools.cycle((signal.SIGTERM, signal.SIGINT))
            deadline = time.monotonic() + 3
            while service.poll() is None and time.monotonic() < deadline:
                service.send_signal(next(burst))
                time.sleep(0.001)
            # It must end (a hang raises TimeoutExpired): 0 after its drain, or killed by one of these signals if a
            # loaded machine delayed it until the process was already finalising (handlers are reset then).
            assert service.wait(timeout=30) in (0, -signal.SIGINT, -signal.SIGTERM)
        finally:
            service.kill()
            service.wait()
    assert "draining" in (tmp_path / "oracle.log").read_text()
