"""Indago's cluster-based diversity (coverage, entropy, Gini purity), checked on hand-computable pools."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis_service.failure_clusters import (
    cluster_diversity,
    coverage_entropy,
    gini_purity,
    kmeans,
    mean_trajectory,
    pad_trajectories,
    refill_empty_clusters,
    select_clustering,
    silhouette,
)


def blob(centre: tuple[float, float], n: int, seed: int, spread: float = 0.2) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, spread, (n, 2)) + np.asarray(centre)


def test_coverage_and_entropy_follow_eqs_2_to_5() -> None:
    # 4 clusters; the approach hits 3 of them with shares 1/2, 1/4, 1/4: H = 1.5 bits, max log2(4) = 2
    assert coverage_entropy(np.array([0, 0, 1, 2]), 4) == pytest.approx((75.0, 75.0))
    assert coverage_entropy(np.array([1, 1, 1]), 3) == (100.0 / 3, 0.0)  # one cluster: no spread
    assert coverage_entropy(np.array([0, 1, 2]), 3) == pytest.approx((100.0, 100.0))  # uniform: the maximum
    assert coverage_entropy(np.array([], dtype=int), 3) == (0.0, 0.0)  # no failure


def test_two_blobs_one_per_approach_cover_half_each_and_are_pure() -> None:
    a, b = blob((0, 0), 15, 1), blob((5, 5), 15, 2)
    result = cluster_diversity({"a": a, "b": b}, clusterings=3)
    assert result.k == 2 and result.points == 30
    assert result.coverage == pytest.approx({"a": 50.0, "b": 50.0})
    assert result.entropy == pytest.approx({"a": 0.0, "b": 0.0})
    assert gini_purity(a, b, clusterings=3) == pytest.approx(100.0)


def test_approaches_spread_evenly_over_both_blobs_cover_all_and_mix() -> None:
    left, right = blob((0, 0), 20, 3), blob((5, 5), 20, 4)
    a = np.vstack([left[:10], right[:10]])
    b = np.vstack([left[10:], right[10:]])
    result = cluster_diversity({"a": a, "b": b, "none": np.zeros((0, 2))}, clusterings=2)
    assert result.coverage == pytest.approx({"a": 100.0, "b": 100.0, "none": 0.0})
    assert result.entropy == pytest.approx({"a": 100.0, "b": 100.0, "none": 0.0})
    assert gini_purity(a, b, clusterings=2) == pytest.approx(50.0)  # each cluster half a, half b


def test_three_blobs_give_three_clusters() -> None:
    x = np.vstack([blob((0, 0), 12, 5), blob((6, 0), 12, 6), blob((0, 6), 12, 7)])
    assert select_clustering(x, seed=0).k == 3


def test_k_grows_only_on_a_twenty_percent_better_silhouette() -> None:
    # one blob and one pair of close sub-blobs: k = 3 scores a little higher than k = 2, but not 20 % higher
    x = np.vstack([blob((0, 0), 20, 1, 0.3), blob((10, 0), 10, 2, 0.3), blob((10, 3), 10, 3, 0.3)])
    from scipy.spatial.distance import pdist, squareform

    d = squareform(pdist(x))
    s2 = silhouette(d, kmeans(x, 2, np.random.default_rng(0)))
    s3 = silhouette(d, kmeans(x, 3, np.random.default_rng(0)))
    assert s2 < s3 < 1.2 * s2
    assert select_clustering(x, seed=0).k == 2
    assert select_clustering(x, seed=0, gain=0.0, n_init=5).k == 3  # plain "highest silhouette" would pick 3


def test_tiny_pools_have_one_cluster() -> None:
    two = cluster_diversity({"a": np.array([[0.0, 0.0]]), "b": np.array([[1.0, 1.0]]), "c": np.zeros((0, 2))})
    assert two.k == 1
    assert two.coverage == {"a": 100.0, "b": 100.0, "c": 0.0} and two.entropy == {"a": 0.0, "b": 0.0, "c": 0.0}
    same = np.ones((5, 2))  # five identical failures: one distinct point
    assert select_clustering(same, seed=0).k == 1
    empty = cluster_diversity({"a": np.zeros((0, 3))})
    assert empty.k == 0 and empty.coverage == {"a": 0.0}
    assert gini_purity(np.zeros((0, 2)), np.zeros((0, 2))) is None
    assert gini_purity(blob((0, 0), 4, 1), np.zeros((0, 2)), clusterings=1) == pytest.approx(100.0)


def test_silhouette_and_kmeans_agree_with_scikit_learn() -> None:
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    x = np.random.default_rng(0).uniform(size=(60, 3))
    from scipy.spatial.distance import pdist, squareform

    d = squareform(pdist(x))
    for k in (2, 5, 17):
        ours = kmeans(x, k, np.random.default_rng(k), n_init=5)
        assert silhouette(d, ours) == pytest.approx(silhouette_score(x, ours), abs=1e-12)
        theirs = KMeans(n_clusters=k, n_init=5, random_state=0).fit(x)
        inertia = sum(float(((x[ours == c] - x[ours == c].mean(axis=0)) ** 2).sum()) for c in range(k))
        assert inertia <= 1.1 * theirs.inertia_  # a local optimum as good as scikit-learn's


def test_padded_trajectories_keep_distances_and_zero_fill() -> None:
    rows = pad_trajectories(
        {"a": [np.array([[1.0, 2.0], [3.0, 4.0]])], "b": [np.array([1.0, 2.0, 3.0])[:, None] * np.ones((1, 2))]}
    )
    assert rows["a"].tolist() == [[1.0, 2.0, 3.0, 4.0, 0.0, 0.0]]
    assert rows["b"].tolist() == [[1.0, 1.0, 2.0, 2.0, 3.0, 3.0]]
    assert mean_trajectory([np.array([1.0, 3.0]), np.array([3.0])]).ravel().tolist() == [2.0, 1.5]
    with pytest.raises(ValueError, match="differ in width"):
        pad_trajectories({"a": [np.zeros((2, 2))], "b": [np.zeros((2, 3))]})
    with pytest.raises(ValueError, match="features"):
        cluster_diversity({"a": np.zeros((2, 2)), "b": np.zeros((2, 3))})


def test_wide_points_cluster_like_their_low_dimensional_span() -> None:
    # 12 trajectories of 500 steps: distances are kept by the exact projection, so the blobs still split 50/50
    rng = np.random.default_rng(0)
    base = np.linspace(0, 1, 500)
    a = np.array([base + rng.normal(0, 0.01, 500) for _ in range(6)])
    b = np.array([-base + rng.normal(0, 0.01, 500) for _ in range(6)])
    result = cluster_diversity({"a": a, "b": b}, clusterings=2)
    assert result.k == 2 and result.coverage == pytest.approx({"a": 50.0, "b": 50.0})
    assert not math.isnan(result.entropy["a"])


def test_inputs_without_a_space_are_encoded_like_the_surrogate_does() -> None:
    from analysis_service.failure_clusters import encode_inputs

    rows = [
        {"x": 0.0, "mode": "a", "on": True, "n": 2},
        {"x": 5.0, "mode": "b", "on": False, "n": 2},
        {"x": 10.0, "mode": "a", "on": True, "n": 2, "extra": 1.0},
    ]
    # sorted names: mode (one-hot a, b), n (constant -> 0), on (0/1), x (scaled); "extra" is not in every row
    assert encode_inputs(rows).tolist() == [[1, 0, 0, 1, 0.0], [0, 1, 0, 0, 0.5], [1, 0, 0, 1, 1.0]]


def test_comparison_scores_each_campaign_within_its_run() -> None:
    from analysis_service.comparison import build_comparison
    from analysis_service.metrics import ExecutionRecord

    def campaign(strategy: str, seed: int, centre: float) -> tuple[dict, list[ExecutionRecord]]:
        pts = blob((centre, centre), 6, seed)
        records = [
            ExecutionRecord(i + 1, {"x": float(p[0]), "y": float(p[1])}, "fail", -1.0, 5, 0.0, 0.1)
            for i, p in enumerate(pts)
        ]
        return {"campaign_id": f"{strategy}-{seed}", "strategy": strategy, "seed": seed}, records

    runs = [campaign("left", s, 0.0) for s in (1, 2)] + [campaign("right", s, 5.0) for s in (1, 2)]
    report = build_comparison(runs, baseline="left")
    assert [c["cluster_coverage"] for c in report["campaigns"]] == pytest.approx([50.0] * 4)
    assert [c["cluster_entropy"] for c in report["campaigns"]] == pytest.approx([0.0] * 4)
    assert {m["key"] for m in report["metrics"]} >= {"cluster_coverage", "cluster_entropy"}


def test_an_emptied_cluster_takes_a_point_that_shares_its_cluster() -> None:
    # Point 3 is alone in cluster 1 and farthest from its centre: moving it to the empty cluster 2 would empty
    # cluster 1 instead (k-means once divided by that zero count, giving NaN centres). Point 2 moves instead.
    labels = np.array([0, 0, 0, 1])
    d = np.array([[0.1, 9.0, 9.0], [0.2, 9.0, 9.0], [0.5, 9.0, 9.0], [9.0, 4.0, 9.0]])
    counts = refill_empty_clusters(labels, d, 3)
    assert labels.tolist() == [0, 0, 2, 1] and counts.tolist() == [2, 1, 1]


def test_filmstrips_show_one_failure_per_cluster_first_then_the_next_distinct_ones() -> None:
    """The report's filmstrips (issue 32, See): the first failure of each cluster of the distinct failing inputs, in
    asking order, before a second failure of any cluster; a repeated input is never shown twice."""
    from analysis_service.filmstrips import distinct_failures

    rng = np.random.default_rng(3)
    near, far = rng.normal(0.0, 0.01, size=(6, 2)), rng.normal(1.0, 0.01, size=(3, 2))
    points = [near[0], near[1], near[1], near[2], far[0], near[3], far[1], near[4], far[2], near[5]]
    failures = [
        {"test_case_id": f"t{i + 1:07d}", "values": {"x": float(p[0]), "y": float(p[1])}} for i, p in enumerate(points)
    ]
    picked = distinct_failures(failures, 3)
    ids = [f["test_case_id"] for f, _ in picked]
    assert ids == ["t0000001", "t0000005", "t0000002"]  # near's first, far's first, then near's second in asking order
    clusters = [c for _, c in picked]
    assert clusters[0] != clusters[1] and clusters[2] == clusters[0]
    # the first n distinct inputs in plain asking order would have shown three of the near blob
    assert [f["test_case_id"] for f, _ in distinct_failures(failures, 20)][:2] == ["t0000001", "t0000005"]
    assert len(distinct_failures(failures, 20)) == 9  # t0000003 repeats t0000002's input
    assert distinct_failures(failures, 0) == [] and distinct_failures([], 3) == []
