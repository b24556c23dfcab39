"""replications/parking_learnability.py: the scene features, the measurement journal's labels, the scores."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from offline.evaluation import draw_test_cases
from offline.surrogate_features import read_lot
from replications.parking_learnability import ENGINEERED, engineer, eval_inputs, ranking
from simulator_service.api import get_subject


def test_engineered_features_are_the_scene_of_the_lot() -> None:
    lot = read_lot()
    values = {"goal_lane": 14, "head_ego": 0.25, "x": 0.0, "y": 0.0, **{f"parked_{i}": i % 2 for i in range(20)}}
    f = dict(zip(ENGINEERED, engineer(values, lot)))
    # spot 14 is the 4th of the lower row: centre (-6, -14); the ego faces +y, so the goal is behind it
    assert (f["goal_x"], f["goal_y"], f["goal_row"], f["goal_col"]) == (-6.0, -14.0, 1, 3)
    assert f["goal_forward"] == pytest.approx(-14.0) and f["goal_lateral"] == pytest.approx(6.0)
    assert f["distance"] == pytest.approx(math.hypot(6, 14)) and f["row_gap"] == 14.0
    assert (f["left_occupied"], f["right_occupied"], f["opposite_occupied"]) == (0, 0, 1)  # spots 13, 15 free; 4 taken
    assert f["rel_heading_cos"] == pytest.approx(-1.0) and f["parked_total"] == 10


def test_eval_labels_come_from_the_journal_and_are_checked(tmp_path: Path) -> None:
    subject = get_subject("parking")
    inputs = draw_test_cases(subject, 6, 7)
    header = {"model": "m", "subject": "parking", "tests": 6, "seed": 7, "chunk": 3, "model_sha256": "x"}
    chunks: list[dict[str, Any]] = [
        {"start": 0, "end": 3, "failures": 1, "errors": 0, "failed": [{"index": 1, "values": inputs[1]}]},
        {"start": 3, "end": 6, "failures": 0, "errors": 0, "failed": []},
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [header, *chunks]) + "\n")
    got, failed, _ = eval_inputs(path, subject)
    assert got == inputs and failed.tolist() == [False, True, False, False, False, False]
    chunks[0]["failed"][0]["values"] = inputs[2]  # a failure that is not the input its seed draws
    path.write_text("\n".join(json.dumps(r) for r in [header, *chunks]) + "\n")
    with pytest.raises(SystemExit, match="failure 1 is not the input its seed draws"):
        eval_inputs(path, subject)
    path.write_text("\n".join(json.dumps(r) for r in [header, chunks[1]]) + "\n")
    with pytest.raises(SystemExit, match="covers 3 of 6 tests"):
        eval_inputs(path, subject)


def test_ranking_scores_a_perfect_and_a_useless_ranking() -> None:
    failed = np.zeros(200, dtype=bool)
    failed[:10] = True
    perfect = ranking(failed, -np.arange(200.0), reps=200)
    assert perfect["auc"] == 1.0 and perfect["auc_ci95"] == [1.0, 1.0]
    assert perfect["top5%"] == {"k": 10, "failures": 10, "precision": 1.0, "lift": 20.0}
    flat = ranking(failed, np.zeros(200), reps=200)
    assert flat["auc"] == 0.5 and flat["top1%"]["k"] == 2
