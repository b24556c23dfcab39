"""Comparison statistics and diversity measures used by the seed papers (pure functions, numpy/scipy only).

- one-sided Mann–Whitney U and Vargha–Delaney Â12 with its effect-size bands (PRT, QD);
- Kozachenko–Leonenko differential entropy of test inputs, PRT authors' convention: data
  min–max scaled to [0, 1]^d, ε = distance to the k-th neighbour (not twice it), natural log,
  unit-ball volume V_d; a uniform density on [0, 1]^d then has entropy ≈ 0;
- sparsity: per point the mean distance to its k nearest neighbours, median over points (QD's FS/FFS);
- behaviour coverage on a grid: #BS (distinct cells) and #FBS (distinct cells of failing tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Comparison:
    p_value: float  # one-sided Mann–Whitney U
    a12: float  # Vargha–Delaney: P(a > b) + ½ P(a = b)
    effect: str  # negligible | small | medium | large


def vargha_delaney_a12(a: Sequence[float], b: Sequence[float]) -> float:
    """P(X > Y) + ½ P(X = Y) for X from a and Y from b, over all pairs."""
    x, y = np.asarray(a, dtype=float)[:, None], np.asarray(b, dtype=float)[None, :]
    if x.size == 0 or y.size == 0:
        raise ValueError("Â12 needs two non-empty samples")
    return float(np.mean((x > y) + 0.5 * (x == y)))


def effect_band(a12: float) -> str:
    """Vargha & Delaney (2000) bands on |Â12 − 0.5|: < 0.06 negligible, < 0.14 small, < 0.21 medium, else large."""
    d = abs(a12 - 0.5)
    return "negligible" if d < 0.06 else "small" if d < 0.14 else "medium" if d < 0.21 else "large"


def compare(a: Sequence[float], b: Sequence[float], alternative: str = "greater") -> Comparison:
    """Is a greater than b? (PRT's use: a = a baseline's cost, b = PRT's cost; small p favours PRT)."""
    from scipy.stats import mannwhitneyu

    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    p = float(mannwhitneyu(a, b, alternative=alternative).pvalue)
    a12 = vargha_delaney_a12(a, b)
    return Comparison(p, a12, effect_band(a12))


def minmax_scale(points: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None) -> np.ndarray:
    """Scales each column to [0, 1] by the given bounds (the parameter space) or the data's own range."""
    x = np.asarray(points, dtype=float)
    lo = x.min(axis=0) if low is None else np.asarray(low, dtype=float)
    hi = x.max(axis=0) if high is None else np.asarray(high, dtype=float)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (x - lo) / span


def kl_entropy(points: np.ndarray, k: int = 10, low: np.ndarray | None = None, high: np.ndarray | None = None) -> float:
    """Kozachenko–Leonenko entropy estimate (nats) of min–max scaled points, k-th neighbour distances."""
    from scipy.spatial import cKDTree
    from scipy.special import digamma, gammaln

    x = minmax_scale(points, low, high)
    n, d = x.shape
    if n <= k:
        raise ValueError(f"entropy with k={k} needs more than {k} points, got {n}")
    distances, _ = cKDTree(x).query(x, k=k + 1)  # the first neighbour is the point itself
    eps = distances[:, k]
    log_unit_ball = (d / 2) * math.log(math.pi) - gammaln(d / 2 + 1)
    return float(digamma(n) - digamma(k) + log_unit_ball + d * np.mean(np.log(eps + 1e-12)))


def sparsity(points: np.ndarray, k: int = 3) -> float:
    """Median over points of the mean distance to their k nearest other points (QD's FS/FFS measure)."""
    from scipy.spatial import cKDTree

    x = np.unique(np.asarray(points, dtype=float), axis=0)  # duplicates would count as distance 0
    if len(x) <= k:
        return float("nan")
    distances, _ = cKDTree(x).query(x, k=k + 1)
    return float(np.median(distances[:, 1:].mean(axis=1)))


def grid_cells(
    descriptors: np.ndarray, low: Sequence[float], high: Sequence[float], cells: Sequence[int]
) -> set[tuple[int, ...]]:
    """Grid cells hit by behaviour descriptors; values outside [low, high] fall in the edge cells."""
    x = np.asarray(descriptors, dtype=float)
    lo, hi, n = np.asarray(low, float), np.asarray(high, float), np.asarray(cells, int)
    idx = np.floor((x - lo) / np.where(hi > lo, hi - lo, 1.0) * n).astype(int)
    idx = np.clip(idx, 0, n - 1)
    return {tuple(int(v) for v in row) for row in idx}


def behaviour_coverage(
    descriptors: np.ndarray, failed: Sequence[bool], low: Sequence[float], high: Sequence[float], cells: Sequence[int]
) -> tuple[int, int]:
    """(#BS, #FBS): distinct grid cells of all tests and of failing tests."""
    x = np.asarray(descriptors, dtype=float)
    mask = np.asarray(failed, dtype=bool)
    all_cells = grid_cells(x, low, high, cells) if len(x) else set()
    fail_cells = grid_cells(x[mask], low, high, cells) if mask.any() else set()
    return len(all_cells), len(fail_cells)
