"""The DESIGNATE replication's tables (RQ1 per pair, the issue's lines) and its run-selection arguments."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replications.replicate_designate import _p, merge_runs, read_runs_spec, render, render_sweep, summarise

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
    assert md.rstrip().splitlines()[-7:][0].startswith("designate_vs_random_iou=")
    # every DESIGNATE run lies below every random run: the run-resampled interval stays below 1, but with 3 runs a
    # side the run-level test cannot go below 0.1 (two-sided Mann-Whitney, exact: 2/20)
    low, high = s["designate_vs_random_iou_ci95"]
    assert low <= s["designate_vs_random_iou"] <= high < 1
    assert s["designate_vs_random_run_p"] == pytest.approx(0.1)
    assert "designate_vs_random_iou_ci95=" in md and "designate_vs_random_run_p=0.1 " in md
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


def calibration(t_relevance: float, percentile: float, t_diversity: float) -> dict[str, Any]:
    return {
        "t_relevance": t_relevance,
        "relevance_percentile": 97.0,
        "diversity_percentile": percentile,
        "t_diversity_features": t_diversity,
        "t_diversity_pixels": 0.5,
    }


def share(path: Path, thresholds: dict[str, Any], **runs: list[int]) -> str:
    path.write_text(
        json.dumps(
            {"thresholds": thresholds, "runs": {v: [fake_run(s, [0.5]) for s in seeds] for v, seeds in runs.items()}}
        )
    )
    return str(path)


def test_random_runs_merge_with_designate_runs_of_another_t_diversity_only_when_chosen(tmp_path: Path) -> None:
    old = share(tmp_path / "old.json", calibration(0.14, 0.5, 2.15), DESIGNATE=[0, 1], Random=[0, 1])
    new = share(tmp_path / "new.json", calibration(0.14, 0.25, 1.87), DESIGNATE=[0, 1, 2])
    runs, thresholds = merge_runs([(s, *read_runs_spec(s)) for s in (f"{old}:Random", new)])
    assert [r["seed"] for r in runs["DESIGNATE"]] == [0, 1, 2] and [r["seed"] for r in runs["Random"]] == [0, 1]
    assert thresholds["diversity_percentile"] == 0.25  # the T_diversity the DESIGNATE runs were made with
    # both files' DESIGNATE runs: two T_diversity in one row
    with pytest.raises(ValueError, match="another T_diversity"):
        merge_runs([(s, *read_runs_spec(s)) for s in (old, new)])
    # another T_relevance never merges, whatever the variants
    other = share(tmp_path / "other.json", calibration(0.2, 0.25, 1.87), Random=[5])
    with pytest.raises(ValueError, match="T_relevance"):
        merge_runs([(s, *read_runs_spec(s)) for s in (new, other)])
    # a run given twice
    with pytest.raises(ValueError, match=r"DESIGNATE seed\(s\) \[0, 1, 2\] already given"):
        merge_runs([(s, *read_runs_spec(s)) for s in (new, new)])
    with pytest.raises(ValueError, match="must be among"):
        read_runs_spec(f"{old}:Nope")


def test_the_sweep_table_gives_each_percentile_its_median_over_seeds() -> None:
    row = {"t_diversity_features": 2.0, "median_iou": 0.7, "mean_iou": 0.6, "feature_div": 5.0, "pixel_div": 0.9}
    s = {
        "subject": "urban",
        "generations": 100,
        "commands": ["python replications/replicate_designate.py --sweep 0.25"],
        "rows": [
            {
                **row,
                "percentile": 0.25,
                "seed": 0,
                "archive_images": 120,
                "relevant_evaluated": 600,
                "relevant_distinct": 500,
                "seconds": 1,
            },
            {
                **row,
                "percentile": 0.25,
                "seed": 1,
                "archive_images": 90,
                "relevant_evaluated": 400,
                "relevant_distinct": 300,
                "seconds": 1,
            },
            {
                **row,
                "percentile": 0.25,
                "seed": 2,
                "archive_images": 150,
                "relevant_evaluated": 700,
                "relevant_distinct": 650,
                "seconds": 1,
            },
            {**row, "percentile": 50, "seed": 0, "archive_images": 5, "seconds": 1},  # an old row, no counts
        ],
    }
    md = render_sweep(s)
    assert "| 0.25 | 2.000 | 3 | 120 (90-150) | 0.700 | 5.00 | 0.900 | 600 | 500 |" in md
    assert "| 50 | 2.000 | 1 | 5 (5-5) | 0.700 | 5.00 | 0.900 | - | - |" in md


def test_a_percentile_outside_0_100_or_not_finite_is_refused() -> None:
    for bad in ("nan", "-1", "100.5", "inf"):
        done = run_script("--subject", "urban", "--diversity-percentile", bad, "--campaigns-only")
        assert done.returncode == 2, bad
        assert "a percentile must be in [0, 100]" in done.stderr
    done = run_script("--subject", "urban", "--from-runs", "results/designate_urban.runs.json:Nope")
    assert done.returncode == 2 and "--from-runs:" in done.stderr and "must be among" in done.stderr
