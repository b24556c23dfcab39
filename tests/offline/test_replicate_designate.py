"""The DESIGNATE replication's tables (RQ1 per pair, the issue's lines) and its run-selection arguments."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from replications.replicate_designate import _p, render, summarise

ROOT = Path(__file__).resolve().parents[2]


def fake_run(seed: int, accuracy: list[float]) -> dict[str, Any]:
    return {
        "seed": seed,
        "campaign": f"c{seed}",
        "evaluations": 1260,
        "executed": 1200,
        "seconds": 1.0,
        "accuracy": accuracy,
        "class_share": [0.1] * len(accuracy),
        "iou_simulated": accuracy,
        "poses": [],
        "feature_div": 1.0,
        "pixel_div": 0.9,
    }


def args() -> argparse.Namespace:
    return argparse.Namespace(generations=100, random_budget=1200, diversity_percentile=0.5, retrain_seeds=0)


def test_every_pair_is_compared_and_rendered() -> None:
    rng = np.random.default_rng(0)
    runs = {
        "DESIGNATE": [fake_run(s, list(rng.uniform(0.0, 0.5, 40))) for s in range(3)],
        "Random": [fake_run(s, list(rng.uniform(0.5, 1.0, 40))) for s in range(3)],
        "DeepJanus": [fake_run(s, list(rng.uniform(0.0, 1.0, 40))) for s in range(2)],
    }
    s = summarise("mars", runs, None, {"t_relevance": 0.3}, args())
    assert list(s["rq1_pairs"]) == ["DESIGNATE vs Random", "DESIGNATE vs DeepJanus", "Random vs DeepJanus"]
    # DESIGNATE's images all lie below random's: Â12 0 and a tiny p; the pair table agrees with DESIGNATE's column
    assert s["rq1_pairs"]["DESIGNATE vs Random"]["a12"] == 0.0
    assert s["rq1_pairs"]["DESIGNATE vs Random"]["p"] < 1e-10
    assert s["rq1_pairs"]["DESIGNATE vs DeepJanus"]["a12"] == s["rq1"]["DeepJanus"]["designate_a12"]
    assert s["rq1_pairs"]["Random vs DeepJanus"]["a12"] > 0.5
    assert s["runs"] == 3 and s["rq1"]["DeepJanus"]["runs"] == 2
    assert s["archive_images_per_run"] == 40
    md = render("mars", s)
    assert "| DESIGNATE vs Random | 3 / 3 | 0.00 |" in md
    assert "| Random vs DeepJanus | 3 / 2 |" in md
    # the lines close the file, retraining nan without an RQ2
    assert md.rstrip().splitlines()[-5:][0].startswith("designate_vs_random_iou=")
    assert "retraining_gain=nan" in md


def test_a_p_value_that_underflows_is_not_printed_as_zero() -> None:
    assert _p(0.0) == "< 1e-300"
    assert _p(2.1e-184) == "2.1e-184"


def run_script(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "replications/replicate_designate.py"), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_seeds_are_checked_before_anything_runs() -> None:
    for bad in (["--seeds", "1", "1"], ["--seeds", "-1"], ["--seeds", "10001"]):
        done = run_script("--subject", "mars", *bad, "--campaigns-only")
        assert done.returncode == 2, bad
        assert "--seeds must be distinct integers in [0, 10000]" in done.stderr
