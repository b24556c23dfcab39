"""Indago's cluster-based failure diversity: coverage (Eq. 2), entropy (Eqs. 3-5) and Gini purity (Sec. 6.2.2).

Source: "Testing of Deep Reinforcement Learning Agents with Surrogate Models" (Indago), Sec. 5.2.2 (metrics)
and 6.2.2 (Gini purity). The failures of several compared approaches (their failing inputs,
or their failing trajectories) are pooled and clustered *together*; each approach is then scored by the
clusters its own failures reach:

* **coverage** C_A = |{clusters holding a failure of A}| / k*, in % (Eq. 2);
* **entropy** H_A = -sum_i eta_i log2 eta_i over the clusters, eta_i = the share of A's failures in cluster i
  (Eqs. 3-4; the paper prints Eq. 4 without the minus sign), normalised by its maximum log2 k* and given in %
  (Eq. 5): 0 = all of A's failures in one cluster, 100 = spread evenly over all k* clusters;
* **Gini purity** of two approaches (Sec. 6.2.2): cluster their pooled failures, per cluster G = sum_c p_c^2
  over the two approaches (p_c = the cluster's share of approach c), the unweighted mean over clusters, in %.
  With two approaches G >= 50 % by construction; 100 % = no cluster mixes them (complementary failures); when
  only one of the two has failures every cluster is pure (100 %), when neither has any there is no value (None).
  The paper's average "67.71 %" for hc_sal+fail is not the mean of its own Table 5 cells (their mean is 67.55;
  the GA pair's 80.79 does match): we report each cell and plain means only.

Clustering (k*): k-means for k = 2, 3, ..., keeping the first k's silhouette as the best and moving k* to a
larger k only when its silhouette beats the best so far by at least ``gain`` (20 %) of the best's magnitude
(the paper's "at least 20 % greater"; for a positive best that is s >= 1.2 * best). The whole selection and the
scores are repeated ``clusterings`` (10) times with different k-means seeds and the scores averaged.

Choices where the paper is silent (the authors' replication package is followed where it answers):

* k runs up to n - 1 (the silhouette needs at least one cluster with two points) and at most the number of
  distinct points; ``max_k`` caps it further (None = no cap, the paper's "up to the number of items"). Since
  a silhouette is at most 1, the scan also stops once no later k could beat the best by ``gain``;
* fewer than 3 points, or fewer than 2 distinct ones: k* = 1; an approach with failures then has coverage 100 %
  and entropy 0 %;
* an approach with no failure: coverage 0 %, entropy 0 % (it is still compared, as the authors do);
* ``n_init`` = 1 k-means++ start per k (scikit-learn's "auto" for k-means++, what the authors' code ran);
  k-means and the silhouette are our numpy implementations (checked against scikit-learn in the tests);
* features are clustered as given: the caller scales them. The replication bench encodes inputs as the
  surrogate does (numbers min-max scaled into [0, 1] by their domain, one-hot choices) and leaves
  trajectories in the simulator's units;
* trajectories: ``pad_trajectories`` flattens each (steps x dims) trace step-major and zero-pads every one to
  the longest (the paper's padding); ``mean_trajectory`` averages the failing repetitions of one input
  (zero-padded to the longest of them), as the authors' code does for non-deterministic subjects;
* pooled vs per run: these functions score one pool; the bench calls them once per experimental run (the
  failures of all approaches in run r), as the authors do, and averages the runs.

scipy is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

SILHOUETTE_GAIN = 0.20
CLUSTERINGS = 10


@dataclass(frozen=True)
class Clustering:
    """One k-means partition of the pooled points."""

    labels: np.ndarray  # cluster index per point
    k: int  # k*, the number of non-empty clusters
    silhouette: float | None  # None when k* = 1 (no silhouette exists)


@dataclass(frozen=True)
class ClusterDiversity:
    """Per-approach coverage and entropy (%), averaged over the clusterings."""

    coverage: dict[str, float]
    entropy: dict[str, float]
    k: float  # mean k* over the clusterings
    points: int  # failures pooled
    per_clustering_k: list[int] = field(default_factory=list)


def _points(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a.reshape(-1, 1) if a.size else a.reshape(0, 1)
    if a.ndim != 2:
        raise ValueError(f"points must be a 2-D array (one row per failure), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("points must be finite numbers (NaN or infinity found)")
    return a


def kmeans(x: np.ndarray, k: int, rng: np.random.Generator, n_init: int = 1, max_iter: int = 100) -> np.ndarray:
    """Lloyd's k-means from k-means++ seeds; the labels of the lowest-inertia of ``n_init`` starts.

    Our own numpy version because the silhouette scan fits one model per k up to n - 1 (hundreds of fits per
    clustering, ten clusterings per pool): scikit-learn's per-fit overhead made that minutes per pool. An
    emptied cluster moves to the point farthest from its centre (as scikit-learn does).
    """
    x = _points(x)
    n = len(x)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] for {n} points, got {k}")
    sq = np.einsum("ij,ij->i", x, x)
    best_labels, best_inertia = None, np.inf
    for _ in range(n_init):
        centres = _plus_plus(x, sq, k, rng)
        labels = np.full(n, -1)
        for _ in range(max_iter):
            d = np.maximum(sq[:, None] - 2.0 * x @ centres.T + np.einsum("ij,ij->i", centres, centres)[None, :], 0.0)
            new = d.argmin(axis=1)
            counts = refill_empty_clusters(new, d, k)
            if np.array_equal(new, labels):
                break
            labels = new
            onehot = np.zeros((n, k))
            onehot[np.arange(n), labels] = 1.0
            centres = (onehot.T @ x) / counts[:, None]
        inertia = float(d[np.arange(n), labels].sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels, inertia
    return best_labels  # type: ignore[return-value]


def refill_empty_clusters(labels: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
    """Gives every empty cluster the point farthest from its centre (in place); returns the cluster sizes.

    Only a point that shares its cluster may move, or the move would empty that cluster instead (such a point
    exists whenever a cluster is empty, since k <= n). ``d`` holds squared distances to the centres.
    """
    n = len(labels)
    counts = np.bincount(labels, minlength=k)
    while (counts == 0).any():
        spread = np.where(counts[labels] > 1, d[np.arange(n), labels], -1.0)
        far = int(spread.argmax())
        empty = int(np.flatnonzero(counts == 0)[0])
        labels[far] = empty
        d[far, empty] = 0.0
        counts = np.bincount(labels, minlength=k)
    return counts


def _plus_plus(x: np.ndarray, sq: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii): each next centre drawn with probability ~ D(x)^2."""
    n = len(x)
    chosen = [int(rng.integers(n))]
    closest = np.maximum(sq - 2.0 * x @ x[chosen[0]] + sq[chosen[0]], 0.0)
    for _ in range(1, k):
        total = closest.sum()
        if total <= 0.0:  # fewer distinct points than k: the caller caps k, so this is a guard
            nxt = int(rng.integers(n))
        else:
            nxt = int(rng.choice(n, p=closest / total))
        chosen.append(nxt)
        closest = np.minimum(closest, np.maximum(sq - 2.0 * x @ x[nxt] + sq[nxt], 0.0))
    return x[chosen].copy()


def _reduce(x: np.ndarray) -> np.ndarray:
    """The points in coordinates of their own span (exact: every pairwise distance is kept).

    Padded trajectories have thousands of columns but only n points; k-means and the silhouette depend on
    distances alone, so n - 1 coordinates suffice.
    """
    n, d = x.shape
    if d <= n:
        return x
    centred = x - x.mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    return u * s


def silhouette(distances: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette (Rousseeuw 1987) from a distance matrix; points alone in their cluster score 0."""
    labels = np.asarray(labels)
    k = int(labels.max()) + 1
    onehot = np.zeros((len(labels), k))
    onehot[np.arange(len(labels)), labels] = 1.0
    counts = onehot.sum(axis=0)
    sums = distances @ onehot  # per point: summed distance to each cluster
    own = labels
    size_own = counts[own]
    a = np.where(size_own > 1, sums[np.arange(len(labels)), own] / np.maximum(size_own - 1, 1), 0.0)
    mean_other = sums / np.where(counts > 0, counts, np.inf)[None, :]
    mean_other[np.arange(len(labels)), own] = np.inf
    mean_other[:, counts == 0] = np.inf
    b = mean_other.min(axis=1)
    s = np.where(size_own > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-300), 0.0)
    return float(s.mean())


def select_clustering(
    x: np.ndarray, seed: int, gain: float = SILHOUETTE_GAIN, max_k: int | None = None, n_init: int = 1
) -> Clustering:
    """k-means with the silhouette rule of the module docstring; one seed, one partition."""
    from scipy.spatial.distance import pdist, squareform

    if gain < 0:
        raise ValueError(f"gain must be >= 0, got {gain}")
    if max_k is not None and max_k < 1:
        raise ValueError(f"max_k must be >= 1 (or None), got {max_k}")
    if n_init < 1:
        raise ValueError(f"n_init must be >= 1, got {n_init}")
    x = _points(x)
    n = len(x)
    distinct = len(np.unique(x, axis=0)) if n else 0
    top = min(n - 1, distinct, max_k if max_k is not None else n)
    if top < 2:
        return Clustering(np.zeros(n, dtype=np.int64), 1 if n else 0, None)
    x = _reduce(x)
    distances = squareform(pdist(x))
    rng = np.random.default_rng(seed)
    best: Clustering | None = None
    best_score = 0.0  # best's silhouette, kept apart from the Optional field
    for k in range(2, top + 1):
        labels = _compact(kmeans(x, k, rng, n_init=n_init))
        used = int(labels.max()) + 1
        if used < 2:
            continue
        score = silhouette(distances, labels)
        if best is None or score - best_score >= gain * abs(best_score):
            best, best_score = Clustering(labels, used, score), score
        if best_score + gain * abs(best_score) > 1.0:
            break  # a silhouette never exceeds 1: no larger k can win any more
    if best is None:
        return Clustering(np.zeros(n, dtype=np.int64), 1, None)
    return best


def _compact(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..k-1 in order of first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    return order[inverse].astype(np.int64)


def coverage_entropy(labels: np.ndarray, k: int) -> tuple[float, float]:
    """(coverage %, normalised entropy %) of one approach whose failures fall in clusters ``labels`` of k*."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0 or k < 1:
        return 0.0, 0.0
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    coverage = 100.0 * float(np.count_nonzero(counts)) / k
    if k == 1:
        return coverage, 0.0
    eta = counts[counts > 0] / counts.sum()
    entropy = float(-(eta * np.log2(eta)).sum())
    return coverage, max(0.0, 100.0 * entropy / float(np.log2(k)))


def _pool(groups: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, slice]]:
    arrays, spans, start, width = [], {}, 0, None
    for name, x in groups.items():
        a = _points(x)
        if len(a):
            if width is not None and a.shape[1] != width:
                raise ValueError(
                    f"approach {name!r} has {a.shape[1]} features, others {width}: pad or encode "
                    "every approach's failures the same way"
                )
            width = a.shape[1]
        arrays.append(a)
        spans[name] = slice(start, start + len(a))
        start += len(a)
    non_empty = [a for a in arrays if len(a)]
    pooled = np.concatenate(non_empty) if non_empty else np.zeros((0, 1))
    return pooled, spans


def cluster_diversity(
    groups: Mapping[str, np.ndarray],
    *,
    clusterings: int = CLUSTERINGS,
    seed: int = 0,
    gain: float = SILHOUETTE_GAIN,
    max_k: int | None = None,
    n_init: int = 1,
) -> ClusterDiversity:
    """Coverage and entropy of each approach's failures (rows of ``groups[name]``) in their pooled clustering."""
    if clusterings < 1:
        raise ValueError(f"clusterings must be >= 1, got {clusterings}")
    pooled, spans = _pool(groups)
    coverage = {name: 0.0 for name in groups}
    entropy = {name: 0.0 for name in groups}
    ks: list[int] = []
    if len(pooled) == 0:
        return ClusterDiversity(coverage, entropy, 0.0, 0, [])
    for j in range(clusterings):
        found = select_clustering(pooled, _seed(seed, j), gain=gain, max_k=max_k, n_init=n_init)
        ks.append(found.k)
        for name, span in spans.items():
            c, h = coverage_entropy(found.labels[span], found.k)
            coverage[name] += c / clusterings
            entropy[name] += h / clusterings
    return ClusterDiversity(coverage, entropy, float(np.mean(ks)), len(pooled), ks)


def gini_purity(
    a: np.ndarray,
    b: np.ndarray,
    *,
    clusterings: int = CLUSTERINGS,
    seed: int = 0,
    gain: float = SILHOUETTE_GAIN,
    max_k: int | None = None,
    n_init: int = 1,
) -> float | None:
    """Mean Gini purity (%) of the clusters of a's and b's pooled failures; None when both have none."""
    pooled, spans = _pool({"a": a, "b": b})
    if len(pooled) == 0:
        return None
    owner = np.zeros(len(pooled), dtype=np.int64)
    owner[spans["b"]] = 1
    total = 0.0
    for j in range(clusterings):
        found = select_clustering(pooled, _seed(seed, j), gain=gain, max_k=max_k, n_init=n_init)
        purities = []
        for c in range(found.k):
            members = owner[found.labels == c]
            if len(members):
                p = np.bincount(members, minlength=2) / len(members)
                purities.append(float((p**2).sum()))
        total += 100.0 * float(np.mean(purities)) / clusterings
    return total


def _seed(seed: int, j: int) -> int:
    return int(np.random.default_rng([seed, j, 0x1DA60]).integers(2**31 - 1))


# -- trajectories -----------------------------------------------------------------------------------------
def _trace(t: np.ndarray) -> np.ndarray:
    a = np.asarray(t, dtype=np.float64)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2:
        raise ValueError(f"a trajectory must be (steps,) or (steps, dims), got shape {a.shape}")
    return a


def mean_trajectory(repetitions: Sequence[np.ndarray]) -> np.ndarray:
    """The step-wise mean of several traces of one input, each zero-padded to the longest."""
    traces = [_trace(t) for t in repetitions]
    if not traces:
        raise ValueError("mean_trajectory needs at least one trace")
    dims = {t.shape[1] for t in traces}
    if len(dims) != 1:
        raise ValueError(f"traces of one input differ in width: {sorted(dims)}")
    longest = max(len(t) for t in traces)
    padded = np.zeros((len(traces), longest, dims.pop()))
    for i, t in enumerate(traces):
        padded[i, : len(t)] = t
    return padded.mean(axis=0)


def pad_trajectories(groups: Mapping[str, Sequence[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each trace flattened step-major and zero-padded to the longest of all groups: one row per trace."""
    traces = {name: [_trace(t) for t in ts] for name, ts in groups.items()}
    dims = {t.shape[1] for ts in traces.values() for t in ts}
    if len(dims) > 1:
        raise ValueError(f"traces differ in width (dims per step): {sorted(dims)}")
    width = dims.pop() if dims else 1
    longest = max((len(t) for ts in traces.values() for t in ts), default=0)
    out = {}
    for name, ts in traces.items():
        rows = np.zeros((len(ts), longest * width))
        for i, t in enumerate(ts):
            rows[i, : t.size] = t.reshape(-1)
        out[name] = rows
    return out


# -- campaigns without a parameter space (the analysis service's comparison) -----------------------------
def encode_inputs(rows: Sequence[Mapping[str, object]]) -> np.ndarray:
    """Test inputs as feature rows when the parameter space is not at hand: each number (not bool) min-max
    scaled over ``rows``, each bool 0/1, each string one-hot over the values seen; parameters missing from
    some row, and lists or objects, are left out. Close to the surrogate's encoding, which scales by the
    declared domain instead of the observed range."""
    if not rows:
        return np.zeros((0, 0))
    names = sorted(set.intersection(*(set(r) for r in rows)))
    columns: list[np.ndarray] = []
    for name in names:
        values = [r[name] for r in rows]
        if all(isinstance(v, bool) for v in values):
            columns.append(np.array(values, dtype=np.float64)[:, None])
        elif all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values):
            x = np.array(values, dtype=np.float64)
            span = x.max() - x.min()
            columns.append(((x - x.min()) / span if span > 0 else np.zeros_like(x))[:, None])
        elif all(isinstance(v, str) for v in values):
            choices = sorted(set(values))  # type: ignore[type-var]
            columns.append(np.array([[1.0 if v == c else 0.0 for c in choices] for v in values]))
    return np.hstack(columns) if columns else np.zeros((len(rows), 0))


def campaign_input_diversity(
    failing: Sequence[Sequence[Mapping[str, object]]],
    pools: Sequence[object],
    *,
    clusterings: int = CLUSTERINGS,
    max_k: int | None = 30,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """(input coverage %, input entropy %) per campaign: the failing inputs of the campaigns that share a pool
    key (an experimental run) are clustered together, each campaign scored on its own; features come from
    ``encode_inputs`` over every campaign's failing inputs (one scaling for all)."""
    if len(failing) != len(pools):
        raise ValueError(f"{len(failing)} campaigns but {len(pools)} pool keys")
    flat = [row for rows in failing for row in rows]
    features = encode_inputs(flat)
    starts = np.cumsum([0] + [len(rows) for rows in failing])
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(failing)
    for key in dict.fromkeys(pools):
        members = [i for i, p in enumerate(pools) if p == key]
        groups = {str(i): features[starts[i] : starts[i + 1]] for i in members}
        if features.shape[1] == 0:
            groups = {k: np.zeros((len(v), 1)) for k, v in groups.items()}
        result = cluster_diversity(groups, clusterings=clusterings, max_k=max_k, seed=seed)
        for i in members:
            out[i] = (result.coverage[str(i)], result.entropy[str(i)])
    return out
