"""Indago surrogate training data: the held-out set, the train/validation split, the regression labels.

* Held-out set (paper Sec. 4.1): after a 5 % filter, 10 % of the remaining episodes drawn at random (fixed
  seed). They are removed from every training pool, so the held-out metrics are measured on unseen data.
* Train/validation split: 20 % validation, stratified by verdict so that both parts see failures.
* Regression labels (paper Sec. 4.1.2, "0 indicates a failure"): the oracle margin (negative = failure, lower =
  worse), min-max scaled into [0, 1] between its 1st and 99th percentiles and clipped. The margin 0 (the
  verdict boundary) lands on ``threshold``; a label below it means failure.

The log itself and the training-progress filter (which campaigns need too) are in
generator_service/surrogates/dataset.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generator_service.api import kept_indices

HELD_OUT_FILTER = 5.0
HELD_OUT_FRACTION = 0.1
VALIDATION_FRACTION = 0.2


# -- splits ----------------------------------------------------------------------------------------------
def held_out_indices(
    n: int, seed: int = 0, filter_percent: float = HELD_OUT_FILTER, fraction: float = HELD_OUT_FRACTION
) -> np.ndarray:
    """The held-out test episodes: ``fraction`` of those after a ``filter_percent`` filter, at random."""
    pool = kept_indices(n, filter_percent)
    k = int(round(fraction * len(pool)))
    rng = np.random.default_rng([seed, 0x4E1D])
    return np.sort(rng.choice(pool, size=k, replace=False)) if k else np.empty(0, dtype=np.int64)


def stratified_split(
    indices: np.ndarray, labels: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) indices: ``fraction`` of each class to validation (at least one of a class with
    two or more members, so validation sees failures whenever there are two)."""
    rng = np.random.default_rng([seed, 0x5B1])
    train, val = [], []
    for cls in (False, True):
        members = indices[labels[indices] == cls]
        members = members[rng.permutation(len(members))]
        k = int(round(fraction * len(members)))
        if len(members) >= 2:
            k = min(max(k, 1), len(members) - 1)
        val.append(members[:k])
        train.append(members[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


# -- regression labels -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarginScale:
    """Margin -> label in [0, 1] (0 = the worst failures); ``threshold`` is the label of margin 0."""

    low: float
    high: float

    @staticmethod
    def fit(margins: np.ndarray) -> MarginScale:
        low, high = (float(v) for v in np.percentile(margins, [1.0, 99.0]))
        if not high > low:
            low, high = float(np.min(margins)), float(np.max(margins))
        if not high > low:
            high = low + 1.0
        return MarginScale(low, high)

    def labels(self, margins: np.ndarray) -> np.ndarray:
        return np.clip((np.asarray(margins, dtype=np.float64) - self.low) / (self.high - self.low), 0.0, 1.0)

    @property
    def threshold(self) -> float:
        return float(np.clip((0.0 - self.low) / (self.high - self.low), 0.0, 1.0))
