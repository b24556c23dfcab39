"""DESIGNATE's RQ2: retrain the DNN under test with a campaign's archive and measure it on the held-out real split.

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section IV-B (RQ2), Tables X and XII: the
archive's images (up to a cap; the paper: 900 beside Cityscapes' 2,975) with their simulator ground truth are
added to the training set and the model is trained further; per-image IoU_car (urban) or mIoU (Mars) on the real
test split is compared with the original model and with the same extra epochs on the original data only.

Our scale: the zoo's segnet is fine-tuned from its weights (the paper's "100 additional epochs" also start from
the trained model) for ``epochs`` epochs (default 1) with the recipe's optimiser settings; the cap defaults to
30 % of the real train split, the paper's ratio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from offline.image_training import Segmenter, _dataset, predict_labels
from offline.training import get_recipe
from subjects.urban.metrics import class_iou, mean_iou
from subjects.urban.scene import CLASSES


def per_image_accuracy(kind: str, model: Any, labels: np.ndarray, images: np.ndarray) -> np.ndarray:
    """IoU_car of every test image with cars (urban), or mIoU of every image (Mars)."""
    predicted = predict_labels(model, images)
    classes = CLASSES[kind]
    if "car" in classes:
        car = classes.index("car")
        return np.array([class_iou(t, p, car) for t, p in zip(labels, predicted) if (t == car).any()])
    return np.array([mean_iou(t, p, len(classes)) for t, p in zip(labels, predicted)])


def load_segmenter(kind: str, model_path: Path, recipe: str) -> tuple[Segmenter, dict[str, Any]]:
    """The zoo model as a trainable Segmenter (its TorchScript weights in the recipe's architecture)."""
    hp = dict(get_recipe(recipe).hyperparams)
    scripted = torch.jit.load(str(model_path))
    model = Segmenter(len(CLASSES[kind]), 64, 128, tuple(hp.get("widths", (16, 32, 64))))
    model.load_state_dict(scripted.state_dict())
    return model, hp


def fine_tune(
    kind: str,
    model_path: Path,
    recipe: str,
    extra: tuple[np.ndarray, np.ndarray] | None,
    epochs: int,
    seed: int,
) -> Segmenter:
    """The model trained ``epochs`` more epochs on the real train split plus ``extra`` (labels, images)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model, hp = load_segmenter(kind, model_path, recipe)
    labels, images = _dataset(kind, hp)["train"]
    if extra is not None and len(extra[0]):
        labels, images = np.concatenate([labels, extra[0]]), np.concatenate([images, extra[1]])
    optimiser = torch.optim.Adam(model.parameters(), lr=float(hp.get("learning_rate", 2e-3)) / 3)
    for _ in range(epochs):
        _train_epoch(model, optimiser, labels, images, int(hp.get("batch_size", 16)), rng)
    model.eval()
    return model


def test_split(kind: str, recipe: str) -> tuple[np.ndarray, np.ndarray]:
    hp = dict(get_recipe(recipe).hyperparams)
    return _dataset(kind, hp)["test"]


# --------------------------------------------------------------------------- RQ2 as an experiment (issue 30)
#
# The paper's RQ2 retrains a DNN that had been trained to convergence; a DNN stopped early gains from any further
# epoch, which hides what the added images do. So: (1) the zoo model is trained further on the real train split
# until its validation score stops improving (``train_to_plateau``); (2) from that plateau model each approach
# fine-tunes on a set of the same size: the same number of real train images plus n images of its own (the
# DESIGNATE archive, random relevant images, or n more real train images for "original data only"), for the same
# number of steps, once per seed (``fine_tune_from``).


def validation_score(kind: str, model: Any, labels: np.ndarray, images: np.ndarray) -> float:
    """Mean per-image IoU_car (urban) or mIoU (Mars) on a split: what the plateau is judged on."""
    return float(np.mean(per_image_accuracy(kind, model, labels, images)))


def _train_epoch(
    model: Segmenter,
    optimiser: torch.optim.Optimizer,
    labels: np.ndarray,
    images: np.ndarray,
    batch: int,
    rng: np.random.Generator,
) -> None:
    model.train()
    order = rng.permutation(len(labels))
    for i in range(0, len(order), batch):
        idx = order[i : i + batch]
        x = model.normalise(torch.from_numpy(images[idx]))
        y = torch.from_numpy(labels[idx].astype(np.int64))
        if rng.random() < 0.5:
            x, y = x.flip(3), y.flip(2)
        loss = F.cross_entropy(model.logits(x), y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()


def train_to_plateau(
    kind: str, model_path: Path, recipe: str, max_epochs: int, patience: int, seed: int = 0, min_delta: float = 0.005
) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    """The zoo model trained further on the real train split until the validation score has not improved by
    ``min_delta`` for ``patience`` epochs (or ``max_epochs``); the best epoch's weights and the per-epoch log."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model, hp = load_segmenter(kind, model_path, recipe)
    data = _dataset(kind, hp)
    labels, images = data["train"]
    val = data["val"]
    optimiser = torch.optim.Adam(model.parameters(), lr=float(hp.get("learning_rate", 2e-3)) / 3)
    best = validation_score(kind, model, *val)
    best_state = {k: v.clone() for k, v in model.state_dict().items()}
    log = [{"epoch": 0, "val": round(best, 4)}]
    stale = 0
    for epoch in range(1, max_epochs + 1):
        _train_epoch(model, optimiser, labels, images, int(hp.get("batch_size", 16)), rng)
        score = validation_score(kind, model, *val)
        log.append({"epoch": epoch, "val": round(score, 4)})
        if score > best + min_delta:
            best, stale = score, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            stale += 1
            if stale >= patience:
                break
    return best_state, log


def fine_tune_from(
    kind: str,
    state: dict[str, torch.Tensor],
    recipe: str,
    images_set: tuple[np.ndarray, np.ndarray],
    epochs: int,
    seed: int,
) -> Segmenter:
    """A copy of the plateau model (``state``) trained ``epochs`` epochs on (labels, images), seeded."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    hp = dict(get_recipe(recipe).hyperparams)
    model = Segmenter(len(CLASSES[kind]), 64, 128, tuple(hp.get("widths", (16, 32, 64))))
    model.load_state_dict(state)
    optimiser = torch.optim.Adam(model.parameters(), lr=float(hp.get("learning_rate", 2e-3)) / 3)
    for _ in range(epochs):
        _train_epoch(model, optimiser, images_set[0], images_set[1], int(hp.get("batch_size", 16)), rng)
    return model


def fine_tune_to_plateau(
    kind: str,
    state: dict[str, torch.Tensor],
    recipe: str,
    sets: dict[str, tuple[np.ndarray, np.ndarray]],
    val: tuple[np.ndarray, np.ndarray],
    max_epochs: int,
    patience: int | None,
    seed: int,
    min_delta: float = 0.005,
) -> tuple[dict[str, Segmenter], dict[str, Any]]:
    """Copies of the plateau model (``state``) fine-tuned on each arm's (labels, images) set in lockstep.

    "The same number of steps, until validation plateaus" (issue 30): every arm trains one epoch per round on its
    own set (equal sizes, so equal steps per epoch); the rounds stop for all arms together once *every* arm has gone
    ``patience`` epochs without beating its best validation score so far (the plateau model's counts) by
    ``min_delta``, or after ``max_epochs``. So each arm has reached its plateau and all ran the same steps. Each arm
    keeps the weights of its best-validation epoch among those it trained (epoch >= 1: the approach's images must
    have been trained on). ``patience`` None: exactly ``max_epochs`` epochs, the last weights (the fixed protocol).
    """
    sizes = {len(labels) for labels, _ in sets.values()}
    if len(sizes) != 1 or max_epochs < 1:
        raise ValueError(f"sets must be of one size and max_epochs >= 1, got sizes {sorted(sizes)}, {max_epochs}")
    torch.manual_seed(seed)
    hp = dict(get_recipe(recipe).hyperparams)
    batch = int(hp.get("batch_size", 16))
    models, optimisers, rngs = {}, {}, {}
    for arm in sets:
        model = Segmenter(len(CLASSES[kind]), 64, 128, tuple(hp.get("widths", (16, 32, 64))))
        model.load_state_dict(state)
        models[arm] = model
        optimisers[arm] = torch.optim.Adam(model.parameters(), lr=float(hp.get("learning_rate", 2e-3)) / 3)
        rngs[arm] = np.random.default_rng(seed)  # the same shuffles for every arm: paired fine-tunings
    start = validation_score(kind, models[next(iter(sets))], *val)
    best = {arm: start for arm in sets}  # what an epoch must beat to count as progress
    best_trained: dict[str, float] = {arm: -np.inf for arm in sets}  # best among trained epochs (kept)
    best_epoch = {arm: 0 for arm in sets}
    kept: dict[str, dict[str, torch.Tensor]] = {}
    stale = {arm: 0 for arm in sets}
    log: dict[str, list[float]] = {arm: [round(start, 4)] for arm in sets}
    epochs = 0
    for epoch in range(1, max_epochs + 1):
        for arm, (labels, images) in sets.items():
            _train_epoch(models[arm], optimisers[arm], labels, images, batch, rngs[arm])
            score = validation_score(kind, models[arm], *val)
            log[arm].append(round(score, 4))
            if score > best[arm] + min_delta:
                best[arm], stale[arm] = score, 0
            else:
                stale[arm] += 1
            if patience is not None and score > best_trained[arm]:
                best_trained[arm], best_epoch[arm] = score, epoch
                kept[arm] = {k: v.clone() for k, v in models[arm].state_dict().items()}
        epochs = epoch
        if patience is not None and all(s >= patience for s in stale.values()):
            break
    for arm in sets:
        if patience is None:
            best_epoch[arm] = epochs
        else:
            models[arm].load_state_dict(kept[arm])
        models[arm].eval()
    steps = epochs * -(-sizes.pop() // batch)  # optimiser steps per arm
    return models, {"epochs": epochs, "steps": steps, "best_epoch": best_epoch, "val_log": log}


def real_splits(kind: str, recipe: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(labels, images) of every real split: train, val and test."""
    return _dataset(kind, dict(get_recipe(recipe).hyperparams))
