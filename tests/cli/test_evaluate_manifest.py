"""`gauntlet evaluate MODEL --model-root DIR` writes its measurement (the eval_* fields) into DIR's manifest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent_service.registry import DEFAULT_MODEL_ROOT
from offline.manifest import update_model_fields

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = """\
# a user's model root: this comment stays
models:
  cartpole-ppo:
    subject: cartpole
    algorithm: PPO
    description: the bundled agent, copied
    eval_tests: 50  # an older, smaller measurement: replaced, with its comment
    eval_failures: 0
  other-model:
    subject: cartpole
    algorithm: PPO
    eval_tests: 7
"""


def evaluate(root: Path, tests: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "evaluate",
            "cartpole-ppo",
            "--model-root",
            str(root),
            "--tests",
            str(tests),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "300"},
    )


def test_evaluate_with_a_model_root_writes_the_measurement_into_its_manifest(tmp_path: Path) -> None:
    root = tmp_path / "models"
    shutil.copytree(DEFAULT_MODEL_ROOT / "cartpole-ppo", root / "cartpole-ppo")
    (root / "manifest.yaml").write_text(MANIFEST)
    done = evaluate(root, 300)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout)  # stdout is the JSON alone; the manifest note goes to stderr
    text = (root / "manifest.yaml").read_text()
    entry = yaml.safe_load(text)["models"]["cartpole-ppo"]
    assert entry["eval_tests"] == 300 and entry["eval_failures"] == printed["eval_failures"]
    assert entry["eval_seed"] == printed["eval_seed"] == 100000 and entry["eval_errors"] == 0
    assert entry["eval_failure_rate"] == round(printed["eval_failures"] / 300, 5)
    low, high = entry["eval_failure_rate_ci95"]
    assert [low, high] == printed["failure_rate_ci95"] and low <= entry["eval_failure_rate"] <= high < 1
    assert entry["success_rate"] == printed["success_rate"] and entry["description"] == "the bundled agent, copied"
    assert "# a user's model root: this comment stays" in text and "an older, smaller measurement" not in text
    assert yaml.safe_load(text)["models"]["other-model"] == {"subject": "cartpole", "algorithm": "PPO", "eval_tests": 7}
    # a smaller measurement does not replace a larger one, and says so
    again = evaluate(root, 20)
    note = " ".join(again.stderr.split())
    assert again.returncode == 0 and "not written" in note and "300 inputs" in note
    assert (root / "manifest.yaml").read_text() == text


def test_the_manifest_editor_refuses_what_it_cannot_edit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no manifest.yaml"):
        update_model_fields(tmp_path, "x", {"eval_tests": 1})
    (tmp_path / "manifest.yaml").write_text(MANIFEST)
    with pytest.raises(ValueError, match="'nope' is not listed"):
        update_model_fields(tmp_path, "nope", {"eval_tests": 1})
    (tmp_path / "manifest.yaml").write_text("models: {cartpole-ppo: {subject: cartpole, algorithm: PPO}}\n")
    with pytest.raises(ValueError, match="not a block"):
        update_model_fields(tmp_path, "cartpole-ppo", {"eval_tests": 1})
