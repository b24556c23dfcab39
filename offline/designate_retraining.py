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
    model = Segmenter(len(CLASSES[kind]), 64, 128, tuple(hp.get("widths", (16, 32, 64))))  # type: ignore[arg-type]
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
    batch = int(hp.get("batch_size", 16))
    for _ in range(epochs):
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
    return model


def test_split(kind: str, recipe: str) -> tuple[np.ndarray, np.ndarray]:
    hp = dict(get_recipe(recipe).hyperparams)
    return _dataset(kind, hp)["test"]
