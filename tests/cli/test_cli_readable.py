"""The CLI as a reader meets it at 80 columns: listings that keep every name whole, one subject shown in full
(`gauntlet environments NAME`), and a progress bar's rate and time left over valid executions only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.follow import Pace
from cli.launcher import LocalSuite

ROOT = Path(__file__).resolve().parents[2]


def gauntlet(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(("command", "key"), [("models", "name"), ("environments", "subject"), ("strategies", "name")])
def test_listings_at_80_columns_print_every_name_whole(command: str, key: str) -> None:
    listed = gauntlet(command, "--json")
    assert listed.returncode == 0, listed.stderr
    names = [
        item.get("summary", item)[key] if command == "environments" else item[key] for item in json.loads(listed.stdout)
    ]
    assert len(names) >= 3
    text = gauntlet(command)
    assert text.returncode == 0, text.stderr
    first_words = {line.split()[0] for line in text.stdout.splitlines() if line and not line[0].isspace()}
    assert set(names) <= first_words, f"cut or missing: {sorted(set(names) - first_words)}"
    # detail lines fold at the terminal's width
    assert all(len(line) <= 80 for line in text.stdout.splitlines() if line.startswith("  ")), text.stdout


def test_environments_name_shows_one_subject_in_full() -> None:
    out = gauntlet("environments", "cartpole")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "cartpole  (gymnasium CartPole-v1)"
    assert "    x  [-0.9, 0.9] [m]  cart position; failure-prone: boundary" in lines  # unit, meaning, hint
    assert "  oracle: cartpole_balance" in lines
    assert "    descriptors: action0_count, action1_count" in lines  # from the oracle service
    assert any(line.startswith("    reads signals: observations") for line in lines)
    assert any(line.startswith("    final_observation (episode)") for line in lines)  # recorded signals
    assert "cartpole-v2" not in out.stdout  # one subject only
    missing = gauntlet("environments", "no-such-subject")
    assert missing.returncode == 2 and "no-such-subject" in missing.stderr and "Traceback" not in missing.stderr


def test_pace_counts_valid_executions_from_the_first_status_seen() -> None:
    pace = Pace(started=100.0)
    assert pace.fields(40, 200, 100.0) == {"rate": "-/s", "eta": "ETA -"}  # a resumed campaign at 40
    assert pace.fields(60, 200, 110.0) == {"rate": "2.0/s", "eta": "ETA 1:10"}  # 20 in 10 s; 140 left
    assert pace.fields(190, 200, 130.0) == {"rate": "5.0/s", "eta": "ETA 0:02"}  # 150 in 30 s; 10 left
    assert Pace(0.0, 0).fields(36_000, 0, 10.0) == {"rate": "3600/s", "eta": ""}  # no execution budget
    assert Pace(0.0, 0).fields(10, 100_000, 10.0)["eta"] == "ETA 27:46:30"


def test_the_local_suite_says_which_services_are_up(tmp_path: Path) -> None:
    """`gauntlet run` prints a line per service once it answers (LocalSuite.on_ready), in the order they answer."""
    from cli.launcher import LocalSuite

    ready: list[str] = []
    local = LocalSuite(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        log_dir=tmp_path / "logs",
        agent_preload=False,
        roles=frozenset({"oracle", "agent"}),
        on_ready=lambda role, _seconds: ready.append(role),
    ).start()
    try:
        assert sorted(ready) == ["agent", "oracle"]
    finally:
        local.stop()


def test_the_progress_bar_counts_valid_executions_and_shows_invalid_ones(suite: LocalSuite, tmp_path: Path) -> None:
    """`gauntlet run` at 80 columns, on a subject whose uniform draws break a validity rule about 1 time in 11
    (Taxi's passenger == destination): the bar's last frame reads 60/60 (not 6x/60), the invalid inputs beside it,
    the rate and the ETA."""
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "campaign:\n  subject: taxi_large\n  model: taxi-qlearning\n  strategy: random\n  seed: 2\n"
        "  budget: {max_executions: 60}\n  batch_size: 20\n  parallelism: 10\n"
    )
    out = gauntlet(
        "run", str(spec), "--generator", suite.endpoint("generator"), "--analysis", suite.endpoint("analysis")
    )
    assert out.returncode == 0, out.stdout + out.stderr
    bar = [line for line in out.stdout.splitlines() if " invalid" in line and "/s" in line]
    assert bar, out.stdout
    found = re.search(r"(\d+)/60\s+(\d+) failures\s+(\d+) invalid\s+([\d.]+)/s\s+\d+:\d\d:\d\d\s+ETA \d+:\d\d", bar[-1])
    assert found, bar[-1]
    assert int(found.group(1)) == 60 and int(found.group(3)) > 0 and float(found.group(4)) > 0, bar[-1]
    assert len(bar[-1]) <= 80, bar[-1]
