"""The gauntlet command: help that teaches, errors without tracebacks, listings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gauntlet(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_help_lists_commands_and_examples() -> None:
    out = gauntlet("--help")
    assert out.returncode == 0
    for word in ("run", "up", "environments", "models", "strategies", "report", "train", "examples:"):
        assert word in out.stdout


def test_bad_campaign_field_is_named_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "campaign:\n  subject: cartpole\n  model: cartpole-ppo\n  batch_size: 0\n  budget: {max_executions: 10}\n"
    )
    out = gauntlet("run", str(bad))
    assert out.returncode == 2
    assert "campaign.batch_size: must be an integer in [1, 4096] (got 0)" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_key_and_missing_file_are_explained(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("campaign:\n  subject: cartpole\n  model: m\n  budgets: {}\n")
    out = gauntlet("run", str(bad))
    assert out.returncode == 2 and "campaign.budgets: Extra inputs are not permitted" in out.stderr
    assert "campaign.budget: Field required" in out.stderr
    out = gauntlet("run", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_unknown_subject_is_reported_by_the_suite(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("campaign:\n  subject: cartpol\n  model: cartpole-ppo\n  budget: {max_executions: 10}\n")
    out = gauntlet("run", str(bad), "--store-url", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "NOT_FOUND: unknown subject 'cartpol'; known subjects:" in out.stderr and "Traceback" not in out.stderr


def test_a_campaign_that_keeps_final_observations_reports_their_sparsity(tmp_path: Path) -> None:
    spec = tmp_path / "keep.yaml"
    spec.write_text(
        "campaign:\n  subject: cartpole\n  model: cartpole-ppo\n  strategy: prt\n  seed: 3\n"
        "  budget: {max_executions: 64}\n  batch_size: 32\n  keep_final_observations: true\n"
    )
    out = gauntlet(
        "run",
        str(spec),
        "--store-url",
        f"sqlite:///{tmp_path / 's.db'}",
        "--report-dir",
        str(tmp_path / "reports"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(line for line in out.stdout.splitlines() if "final-state sparsity" in line)
    fs, ffs = (float(v) for v in row.split("│")[2].split("/"))  # numbers on both sides: both verdicts occurred
    assert fs > 0 and ffs > 0


def test_listings() -> None:
    assert "cartpole" in gauntlet("environments").stdout
    assert "random" in gauntlet("strategies").stdout
    assert "lunar_crash" in gauntlet("oracles").stdout


def test_every_example_campaign_is_valid() -> None:
    from cli.commands import load_campaign_file
    from common.seeding import derive_seed
    from generator_service.strategies import make_strategy
    from simulator_service.subject import load_subjects

    subjects = load_subjects()
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        config, _ = load_campaign_file(path)
        assert config.subject in subjects, path
        strategy = make_strategy(
            config.strategy,
            subjects[config.subject].space,
            derive_seed(config.seed, "strategy"),
            config.strategy_params,
        )
        asked = strategy.ask(4)
        assert asked and all(subjects[config.subject].space.violations(v) == [] for v in asked), path


def test_evaluate_measures_a_zoo_model_and_names_bad_input() -> None:
    import json

    out = gauntlet("evaluate", "cartpole-ppo", "--tests", "6", "--parallelism", "3", "--seed", "7")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["eval_tests"] == 6 and summary["eval_errors"] == 0 and 0 <= summary["eval_failures"] <= 6
    low, high = summary["failure_rate_ci95"]
    assert 0.0 <= low <= summary["eval_failures"] / 6 <= high <= 1.0
    out = gauntlet("evaluate", "cartpole-ppo", "--workers", "0")
    assert out.returncode == 2 and "--workers must be >= 1 (got 0)" in out.stderr and "Traceback" not in out.stderr
    out = gauntlet("evaluate", "no-such-model")
    assert out.returncode == 2 and "unknown model 'no-such-model'" in out.stderr and "Traceback" not in out.stderr
