"""The surrogate network, its loss weights, and one training run (torch is imported inside the functions).

Architecture (paper Sec. 4.1): an MLP with 1-4 hidden layers of 32 units. Each hidden layer is
Linear -> BatchNorm -> ReLU -> Dropout(0.5); with a single hidden layer there is no dropout (the paper's
"except when the network has only one hidden layer"; we read it as the authors' code does: batch norm stays,
dropout goes).

* classifier: 2 logits, softmax; the failure score is the failure class's probability. Loss: cross-entropy
  weighted per class by W = N / (|C| * hist(Y)) (paper Eq. 1, scikit-learn's "balanced").
* regressor: 1 output through a sigmoid (the labels lie in [0, 1], 0 = failure); the failure score is
  1 - output, so that "maximise the score" is the paper's "minimise the prediction" for both kinds. Loss:
  MSE weighted by label-distribution smoothing (LDS, Yang et al. 2021): the labels' histogram (50 bins on
  [0, 1]) convolved with a Gaussian kernel (size 5, sigma 2, the LDS authors' defaults; the paper gives none),
  each sample weighted by the inverse of the smoothed density at its label, weights scaled to mean 1.

Training (values the paper leaves open, taken from the authors' training CLI defaults): Adam, learning rate
3e-4, batch size 256, at most ``max_epochs`` epochs (the CLI's 2000 is cut to 300 here: with patience 10 no
run on the zoo's logs gets near it) with early stopping after 10 epochs without a better validation loss;
the weights of the best validation epoch are kept ("a validation set ... used to save the best model").
On small logs the batch shrinks so that an epoch has at least 10 steps (batch >= 16): with the zoo's
cartpole log (~250 training rows) a 256-row batch makes one step per epoch, and early stopping then ends
training after ~10 updates, before the network has learnt anything. A batch of a single row is skipped
(batch norm cannot train on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("classifier", "regressor")
HIDDEN_UNITS = 32
DROPOUT = 0.5
MAX_LAYERS = 4
LDS_BINS = 50
LDS_KERNEL_SIZE = 5
LDS_SIGMA = 2.0
MIN_STEPS_PER_EPOCH = 10
MIN_BATCH_SIZE = 16


@dataclass(frozen=True)
class TrainSettings:
    learning_rate: float = 3e-4
    batch_size: int = 256
    max_epochs: int = 300
    patience: int = 10


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"surrogate kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def build_network(n_features: int, layers: int, kind: str) -> Any:
    """The MLP as an ``nn.Sequential`` (its state dict is what ``model.pt`` stores)."""
    import torch.nn as nn

    check_kind(kind)
    if not 1 <= layers <= MAX_LAYERS:
        raise ValueError(f"hidden layers must be between 1 and {MAX_LAYERS}, got {layers}")
    modules: list[Any] = []
    width = n_features
    for _ in range(layers):
        modules += [nn.Linear(width, HIDDEN_UNITS), nn.BatchNorm1d(HIDDEN_UNITS), nn.ReLU()]
        if layers > 1:
            modules.append(nn.Dropout(DROPOUT))
        width = HIDDEN_UNITS
    if kind == "classifier":
        modules.append(nn.Linear(width, 2))
    else:
        modules += [nn.Linear(width, 1), nn.Sigmoid()]
    return nn.Sequential(*modules)


def score_module(network: Any, kind: str) -> Any:
    """A module mapping a (batch, features) tensor to the (batch,) failure scores in [0, 1]."""
    import torch
    import torch.nn as nn

    class FailureScore(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.network(x)
            if kind == "classifier":
                return torch.softmax(out, dim=1)[:, 1]
            return 1.0 - out[:, 0]

    return FailureScore()


# -- loss weights -----------------------------------------------------------------------------------------
def class_weights(failed: np.ndarray) -> np.ndarray:
    """W = N / (|C| * hist(Y)) for the classes (pass, fail); both classes must occur."""
    counts = np.bincount(np.asarray(failed, dtype=np.int64), minlength=2).astype(np.float64)
    if np.any(counts == 0):
        raise ValueError("class weights need both passing and failing episodes")
    return counts.sum() / (2.0 * counts)


class LdsDensity:
    """The smoothed label density of LDS, fitted on training labels in [0, 1]."""

    def __init__(
        self, labels: np.ndarray, bins: int = LDS_BINS, kernel_size: int = LDS_KERNEL_SIZE, sigma: float = LDS_SIGMA
    ) -> None:
        self.bins = bins
        hist = np.bincount(self._bin(labels), minlength=bins).astype(np.float64)
        half = kernel_size // 2
        offsets = np.arange(-half, half + 1, dtype=np.float64)
        kernel = np.exp(-(offsets**2) / (2.0 * sigma**2))
        kernel /= kernel.max()
        self.density = np.convolve(np.pad(hist, half, mode="constant"), kernel, mode="valid")

    def _bin(self, labels: np.ndarray) -> np.ndarray:
        return np.clip((np.asarray(labels, dtype=np.float64) * self.bins).astype(np.int64), 0, self.bins - 1)

    def weights(self, labels: np.ndarray, normalise_by: np.ndarray | None = None) -> np.ndarray:
        """Inverse smoothed density at each label, scaled so the training labels' weights average 1."""
        inv = 1.0 / np.maximum(self.density, 1e-12)
        ref = inv[self._bin(normalise_by if normalise_by is not None else labels)].mean()
        return inv[self._bin(labels)] / ref


# -- one training run -------------------------------------------------------------------------------------
@dataclass
class FitResult:
    state_dict: dict[str, Any]
    epochs: int
    best_epoch: int
    best_validation_loss: float


def fit(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    *,
    kind: str,
    layers: int,
    seed: int,
    settings: TrainSettings = TrainSettings(),
    sample_weights: tuple[np.ndarray, np.ndarray] | None = None,
    class_weight: np.ndarray | None = None,
) -> FitResult:
    """Trains one network; ``y`` are 0/1 classes (classifier) or labels in [0, 1] (regressor).

    The classifier takes ``class_weight`` (pass, fail); the regressor ``sample_weights`` (train, validation).
    """
    import torch
    import torch.nn.functional as F

    check_kind(kind)
    if len(x_train) < 2 or len(x_val) < 1:
        raise ValueError(f"too little data to train: {len(x_train)} training and {len(x_val)} validation rows")
    torch.manual_seed(seed)
    network = build_network(x_train.shape[1], layers, kind)
    optimiser = torch.optim.Adam(network.parameters(), lr=settings.learning_rate)
    xt = torch.as_tensor(x_train, dtype=torch.float32)
    xv = torch.as_tensor(x_val, dtype=torch.float32)
    if kind == "classifier":
        yt = torch.as_tensor(y_train, dtype=torch.int64)
        yv = torch.as_tensor(y_val, dtype=torch.int64)
        cw = torch.as_tensor(class_weight if class_weight is not None else np.ones(2), dtype=torch.float32)
        wt = wv = None
    else:
        yt = torch.as_tensor(y_train, dtype=torch.float32)
        yv = torch.as_tensor(y_val, dtype=torch.float32)
        if sample_weights is None:
            sample_weights = (np.ones(len(y_train)), np.ones(len(y_val)))
        wt = torch.as_tensor(sample_weights[0], dtype=torch.float32)
        wv = torch.as_tensor(sample_weights[1], dtype=torch.float32)

    def loss(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
        out = network(x)
        if kind == "classifier":
            return F.cross_entropy(out, y, weight=cw)
        return torch.mean(w * (out[:, 0] - y) ** 2)

    batch_size = effective_batch_size(len(xt), settings.batch_size)
    shuffler = torch.Generator().manual_seed(seed)
    best_loss, best_epoch, best_state = float("inf"), 0, None
    epoch = 0
    for epoch in range(1, settings.max_epochs + 1):
        network.train()
        order = torch.randperm(len(xt), generator=shuffler)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            if len(idx) < 2:
                continue
            optimiser.zero_grad()
            loss(xt[idx], yt[idx], None if wt is None else wt[idx]).backward()
            optimiser.step()
        network.eval()
        with torch.no_grad():
            val_loss = float(loss(xv, yv, wv))
        if val_loss < best_loss - 1e-7:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: v.detach().clone() for k, v in network.state_dict().items()}
        elif epoch - best_epoch >= settings.patience:
            break
    if best_state is None:  # the validation loss was never finite: keep the last weights
        best_state = {k: v.detach().clone() for k, v in network.state_dict().items()}
    return FitResult(best_state, epoch, best_epoch, best_loss)


def effective_batch_size(rows: int, batch_size: int) -> int:
    """``batch_size``, made smaller on small data so that an epoch has at least MIN_STEPS_PER_EPOCH steps
    (but never below MIN_BATCH_SIZE): early stopping counts epochs, and an epoch of one or two steps gives
    a patience of a handful of updates."""
    return max(min(batch_size, MIN_BATCH_SIZE), min(batch_size, math.ceil(rows / MIN_STEPS_PER_EPOCH)))


def load_network(state_dict: dict[str, Any], n_features: int, layers: int, kind: str) -> Any:
    network = build_network(n_features, layers, kind)
    network.load_state_dict(state_dict)
    network.eval()
    return network


def predict_scores(scorer: Any, x: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Failure scores of the rows of ``x`` (numpy in, numpy out), in eval mode and without gradients."""
    import torch

    scorer.eval()
    out = np.empty(len(x), dtype=np.float64)
    with torch.no_grad():
        for start in range(0, len(x), chunk):
            out[start : start + chunk] = scorer(torch.as_tensor(x[start : start + chunk], dtype=torch.float32)).numpy()
    return out
