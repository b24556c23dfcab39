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
from collections.abc import Mapping, Sequence
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


# One side's units of one stratum (e.g. one agent's boundary clusters): unit id -> (failing runs summed over the
# unit's tests' fail frequencies, number of tests). A unit id names the same unit in every stratum (the same
# boundary cluster or random state tested by several agents), so resampling it draws it for all strata at once.
Units = Mapping[str, tuple[float, int]]


@dataclass(frozen=True)
class ClusterComparison:
    ratio: float  # mean over strata of side A's fail frequency / mean over strata of side B's (test-weighted)
    difference: float  # mean over strata of (side A's fail frequency - side B's)
    ratio_ci95: tuple[float, float]  # cluster bootstrap percentile interval
    difference_ci95: tuple[float, float]
    p_value: float  # two-sided studentized permutation test over unit means
    units: tuple[int, int]  # distinct units of side A and of side B over all strata
    resamples: int
    permutations: int


def _unit_matrix(strata: Sequence[Units]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Units (sorted ids over all strata) and (strata x units) matrices of fail sums and test counts (0 where a
    stratum lacks the unit)."""
    ids = sorted({u for units in strata for u in units})
    index = {u: j for j, u in enumerate(ids)}
    sums, counts = np.zeros((len(strata), len(ids))), np.zeros((len(strata), len(ids)))
    for a, units in enumerate(strata):
        for u, (fails, tests) in units.items():
            sums[a, index[u]], counts[a, index[u]] = float(fails), float(tests)
    return ids, sums, counts


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = numerator / denominator
    return np.where(denominator > 0, out, np.where(numerator > 0, np.inf, np.nan))


def _side_means(weights: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(resamples x strata) test-weighted fail frequencies under unit weights (resamples x units)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (weights @ sums.T) / (weights @ counts.T)


def _welch(values: np.ndarray, present: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Welch t of unit means, label True against False, per row of `labels` (rows x units), over the units `present`;
    0 where both groups are constant and equal (a stratum that never fails carries no information), ±inf where
    both are constant and differ, NaN where a group has no unit."""
    out = []
    for side in (labels & present, ~labels & present):
        k = side.sum(axis=1)
        total = np.where(side, values, 0.0).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = total / k
            var = np.where(side, (values - mean[:, None]) ** 2, 0.0).sum(axis=1) / (k - 1)
        out.append((k, mean, np.where(k > 1, var, 0.0)))
    (ka, ma, va), (kb, mb, vb) = out
    diff = ma - mb
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(va / ka + vb / kb)
        t = diff / se
    t = np.where(se > 0, t, np.where(diff == 0, 0.0, np.copysign(np.inf, diff)))
    return np.where((ka > 0) & (kb > 0), t, np.nan)


def cluster_comparison(
    side_a: Sequence[Units],
    side_b: Sequence[Units],
    resamples: int = 10_000,
    permutations: int = 20_000,
    seed: int = 0,
) -> ClusterComparison:
    """Is side A's fail frequency higher than side B's when tests come in clusters (units), per stratum (agent)?

    Point estimates weigh tests equally, as a test-level comparison does: per stratum, A's fail frequency is its
    units' summed fail frequencies over their tests; ratio = mean over strata of A's / mean over strata of B's,
    difference = mean over strata of (A - B). The interval resamples units, never tests: each bootstrap draw takes as
    many units as each side has, with replacement, and a drawn unit id is drawn for every stratum that has it (the
    same state tested by several agents is one draw, not independent ones); percentile 95 % interval (outward order
    statistics, no interpolation). The p value is a two-sided permutation test whose unit is the unit: each shuffle
    reassigns the A/B labels among all units (the same relabelling in every stratum), and the statistic is the mean
    over strata of Welch's t between unit mean fail frequencies (studentized, so that A's few large units and B's
    many single tests may differ in spread).
    Seeded: the same input gives the same figures. NaN where a side is empty."""
    a_ids, a_sums, a_counts = _unit_matrix(side_a)
    b_ids, b_sums, b_counts = _unit_matrix(side_b)
    if len(side_a) != len(side_b):
        raise ValueError(f"both sides need the same strata, got {len(side_a)} and {len(side_b)}")
    nan = float("nan")
    if not a_ids or not b_ids:
        return ClusterComparison(nan, nan, (nan, nan), (nan, nan), nan, (len(a_ids), len(b_ids)), 0, 0)
    rng = np.random.default_rng(seed)

    def estimates(wa: np.ndarray, wb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ma, mb = _side_means(wa, a_sums, a_counts), _side_means(wb, b_sums, b_counts)
        # a stratum with no unit on a side in this draw drops out of that draw's figures
        both = ~(np.isnan(ma) | np.isnan(mb))
        strata = both.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_a = np.where(both, ma, 0.0).sum(axis=1) / strata
            mean_b = np.where(both, mb, 0.0).sum(axis=1) / strata
        return _ratio(mean_a, mean_b), mean_a - mean_b

    ratio, difference = estimates(np.ones((1, len(a_ids))), np.ones((1, len(b_ids))))
    wa = rng.multinomial(len(a_ids), np.full(len(a_ids), 1 / len(a_ids)), size=resamples).astype(float)
    wb = rng.multinomial(len(b_ids), np.full(len(b_ids), 1 / len(b_ids)), size=resamples).astype(float)
    boot_ratio, boot_difference = estimates(wa, wb)

    def interval(values: np.ndarray) -> tuple[float, float]:
        finite = values[~np.isnan(values)]
        if finite.size == 0:
            return nan, nan
        # no interpolation (the outward order statistics): a draw with no failing random unit has an infinite ratio
        low, high = np.percentile(finite, 2.5, method="lower"), np.percentile(finite, 97.5, method="higher")
        return float(low), float(high)

    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.concatenate([a_sums / a_counts, b_sums / b_counts], axis=1)  # unit means, NaN where absent
    present = np.concatenate([a_counts > 0, b_counts > 0], axis=1)
    base = np.arange(len(a_ids) + len(b_ids)) < len(a_ids)
    labels = np.vstack([base, rng.permuted(np.tile(base, (permutations, 1)), axis=1)])
    t = np.zeros(permutations + 1)
    informative = 0
    for s in range(len(side_a)):
        ts = _welch(values[s][None, :], present[s][None, :], labels)
        if np.all(np.isnan(ts)):
            continue
        with np.errstate(invalid="ignore"):
            t += np.where(np.isnan(ts), 0.0, ts)
        informative += 1
    observed, shuffled = t[0], t[1:]
    p = nan
    if informative:
        extreme = int(np.sum(np.abs(shuffled) >= abs(observed) - 1e-12))
        p = (1 + extreme) / (1 + permutations)
    return ClusterComparison(
        float(ratio[0]),
        float(difference[0]),
        interval(boot_ratio),
        interval(boot_difference),
        p,
        (len(a_ids), len(b_ids)),
        resamples,
        permutations,
    )


def pooled_median_ratio_interval(
    runs_a: Sequence[Sequence[float]],
    runs_b: Sequence[Sequence[float]],
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """95 % interval of median(pooled A) / median(pooled B) when each side's values come in runs (clusters).

    The images of one campaign run are not independent draws (one search, one archive), so the bootstrap resamples
    whole runs: each draw takes as many runs as each side has, with replacement, pools their values and takes the
    ratio of the pooled medians; percentile interval (outward order statistics, no interpolation). Empty runs count
    as runs that add nothing. Seeded: the same input gives the same interval. NaN when a side has no value at all."""
    a = [np.asarray(r, dtype=float) for r in runs_a]
    b = [np.asarray(r, dtype=float) for r in runs_b]
    if not any(r.size for r in a) or not any(r.size for r in b):
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    ratios = np.empty(resamples)
    for i in range(resamples):
        pooled_a = np.concatenate([a[j] for j in rng.integers(0, len(a), len(a))])
        pooled_b = np.concatenate([b[j] for j in rng.integers(0, len(b), len(b))])
        # a draw of only empty runs has no median: it drops out (NaN), as a stratum with no unit does above
        ratios[i] = np.median(pooled_a) / np.median(pooled_b) if pooled_a.size and pooled_b.size else np.nan
    drawn = ratios[~np.isnan(ratios)]  # a median of 0 on B's side gives an infinite ratio: kept, as an upper end
    if drawn.size == 0:
        return float("nan"), float("nan")
    return float(np.percentile(drawn, 2.5, method="lower")), float(np.percentile(drawn, 97.5, method="higher"))
