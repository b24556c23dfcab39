"""replications/reproduce.py: an extracted ref runs with its own plug-ins, saved runs are read strictly, and a
campaign run with two codes is compared row by row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replications.reproduce import saved_prt_runs, with_own_entry_points

ROOT = Path(__file__).resolve().parents[2]

TINY_CAMPAIGN = """campaign:
  name: reproduce-tiny
  subject: cartpole
  model: cartpole-ppo
  strategy: random
  seed: 3
  budget: {max_executions: 16}
  batch_size: 8
  parallelism: 8
"""


def reproduce(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "replications/reproduce.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_an_extracted_trees_entry_points_shadow_the_installed_ones(tmp_path: Path) -> None:
    # a ref from before a plug-in moved names it where it was then; the installed metadata names where it is now
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "gauntlet"\nversion = "0.1.0"\n'
        '[project.scripts]\ngauntlet = "cli.main:main"\n'
        '[project.entry-points."gauntlet.oracles"]\nonly_here = "then_module:ORACLE"\n'
    )
    with_own_entry_points(tmp_path)
    probe = (
        "from importlib.metadata import entry_points; "
        "print(sorted(e.name + '=' + e.value for e in entry_points(group='gauntlet.oracles')))"
    )
    elsewhere = tmp_path / "run"  # a command's scratch folder (the checkout's own egg-info would come first)
    elsewhere.mkdir()
    seen = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(tmp_path)},
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    )
    assert seen.stdout.strip() == "['only_here=then_module:ORACLE']"
    installed = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, capture_output=True, text=True, check=True)
    assert "cartpole_balance=" in installed.stdout  # without the tree first on the path: today's plug-ins


def saved_run(strategy: str, seed: int, tests: float, **settings: object) -> str:
    row = {"strategy": strategy, "subject": "cartpole", "max_tests": 100, "batch": 16, "me_init": 100}
    row |= {"fuzz_init": 100, "seed": seed, "found": tests < 100, "tests": tests, "executions": 8, **settings}
    return json.dumps(row)


def test_saved_runs_are_read_by_strategy_and_seed_and_mixed_settings_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.runs.jsonl"
    path.write_text(saved_run("prt", 0, 5.0) + "\n" + saved_run("random", 0, 100.0) + "\n")
    runs, settings = saved_prt_runs(path)
    assert runs[("random", 0)]["found"] is False and settings["batch"] == 16
    path.write_text(saved_run("prt", 0, 5.0) + "\n" + saved_run("prt", 1, 7.0, batch=32) + "\n")
    with pytest.raises(SystemExit, match=r"a.runs.jsonl:2: batch is 32, earlier runs 16"):
        saved_prt_runs(path)


def test_bad_options_are_named(tmp_path: Path) -> None:
    out = reproduce("--campaign", "examples/cartpole_random.yaml")
    assert out.returncode == 2 and "--campaign and --before go together" in out.stderr
    out = reproduce("--prt", str(tmp_path / "missing.jsonl"))
    assert out.returncode == 2 and "missing.jsonl is not a file" in out.stderr
    out = reproduce("--prt", "results/prt_table3_cartpole.runs.jsonl", "--seeds", "0")
    assert out.returncode == 2 and "--seeds must be in 1..100, got 0" in out.stderr


@pytest.mark.slow
def test_a_campaign_run_with_two_extracted_codes_stores_the_same_executions(tmp_path: Path) -> None:
    campaign = tmp_path / "tiny.yaml"
    campaign.write_text(TINY_CAMPAIGN)
    out_file = tmp_path / "reproduce.json"
    out = reproduce(
        "--campaign", str(campaign), "--before", "HEAD", "--after", "HEAD", "--out", str(out_file), timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reproduce: identical=yes" in out.stdout
    result = json.loads(out_file.read_text())["campaign"]
    assert result["rows_before"] == result["rows_after"] == 16 and result["rows_differing"] == 0
    assert result["before_commit"] == json.loads(out_file.read_text())["after_commit"]
