"""DESIGNATE RQ2's fine-tuning until validation plateaus (issue 30): lockstep arms, the same steps, best weights kept.

Real code paths on a small case: the zoo's segnet-urban weights, a few real train/val images, CPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from offline.designate_retraining import fine_tune_to_plateau, load_segmenter, real_splits, validation_score
from offline.training import get_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "segnet-urban"


Pair = tuple[np.ndarray, np.ndarray]  # (labels, images)
Small = tuple[dict[str, torch.Tensor], dict[str, Pair], Pair]


@pytest.fixture(scope="module")
def small() -> Small:
    torch.set_num_threads(1)
    model, _ = load_segmenter("urban", ROOT / "agent_service/zoo" / RECIPE / "model.pt", RECIPE)
    splits = real_splits("urban", RECIPE)
    (labels, images), (val_labels, val_images) = splits["train"], splits["val"]
    # two arms of 20 images each (20 is not a multiple of the batch: the last batch is short)
    sets = {"a": (labels[:20], images[:20]), "b": (labels[20:40], images[20:40])}
    return model.state_dict(), sets, (val_labels[:16], val_images[:16])


def test_every_arm_runs_the_same_steps_and_keeps_its_best_validation_epoch(small: Small) -> None:
    state, sets, val = small
    models, fit = fine_tune_to_plateau("urban", state, RECIPE, sets, val, max_epochs=4, patience=2, seed=0)
    assert 2 <= fit["epochs"] <= 4
    batch = int(get_recipe(RECIPE).hyperparams.get("batch_size", 16))
    assert fit["steps"] == fit["epochs"] * -(-20 // batch)  # the same steps an epoch for both arms
    for arm, model in models.items():
        log = fit["val_log"][arm]
        assert len(log) == fit["epochs"] + 1  # epoch 0 (the starting model), then every trained epoch
        best = fit["best_epoch"][arm]
        assert 1 <= best <= fit["epochs"] and log[best] == max(log[1:])
        # the model returned is the best epoch's, not the last one's
        assert validation_score("urban", model, *val) == pytest.approx(log[best], abs=1e-4)


def test_a_plateau_stops_every_arm_and_a_fixed_protocol_runs_its_epochs(small: Small) -> None:
    state, sets, val = small
    # no epoch can gain 1.0 IoU: each arm is stale after one epoch, so all stop together after patience = 1
    _, fit = fine_tune_to_plateau("urban", state, RECIPE, sets, val, 5, 1, seed=1, min_delta=1.0)
    assert fit["epochs"] == 1 and fit["best_epoch"] == {"a": 1, "b": 1}
    _, fixed = fine_tune_to_plateau("urban", state, RECIPE, sets, val, 2, None, seed=1, min_delta=1.0)
    assert fixed["epochs"] == 2 and fixed["best_epoch"] == {"a": 2, "b": 2}
    with pytest.raises(ValueError, match="one size"):
        uneven = {"a": sets["a"], "b": (sets["b"][0][:10], sets["b"][1][:10])}
        fine_tune_to_plateau("urban", state, RECIPE, uneven, val, 2, 1, seed=0)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--retrain-patience", "0", "--retrain-patience must be in [1, 100]"),
        ("--retrain-max-epochs", "101", "--retrain-max-epochs must be in [1, 100]"),
        ("--retrain-min-delta", "nan", "--retrain-min-delta must be in [0, 1]"),
        ("--retrain-min-delta", "-0.1", "--retrain-min-delta must be in [0, 1]"),
    ],
)
def test_fine_tuning_options_are_checked_before_anything_runs(flag: str, value: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "replications/replicate_designate.py"), "--subject", "urban", flag, value],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 2
    assert message in done.stderr
