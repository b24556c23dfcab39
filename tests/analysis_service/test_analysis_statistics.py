"""Comparison statistics and diversity measures, checked against closed forms and known values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from analysis_service.statistics import (
    behaviour_coverage,
    cluster_comparison,
    compare,
    effect_band,
    kl_entropy,
    pooled_median_ratio_interval,
    sparsity,
    vargha_delaney_a12,
)


def test_a12_counts_ties_as_half() -> None:
    assert vargha_delaney_a12([3, 3], [3, 3]) == 0.5
    assert vargha_delaney_a12([2, 4], [1, 3]) == 0.75
    assert vargha_delaney_a12([1], [2]) == 0.0


def test_effect_bands_follow_vargha_delaney() -> None:
    assert [effect_band(a) for a in (0.5, 0.57, 0.65, 0.72, 0.2)] == ["negligible", "small", "medium", "large", "large"]


def test_one_sided_mann_whitney_direction() -> None:
    rng = np.random.default_rng(0)
    costly = rng.normal(500, 50, 20)  # a baseline needing more tests to fail
    cheap = rng.normal(60, 10, 20)  # PRT-like
    result = compare(costly, cheap, alternative="greater")
    assert result.p_value < 1e-6 and result.a12 == 1.0 and result.effect == "large"
    assert compare(cheap, costly, alternative="greater").p_value > 0.99


@pytest.mark.parametrize("k, paper", [(5, 0.1765), (10, 0.2142), (20, 0.2589)])
def test_kl_entropy_reproduces_prt_table4_random_testing_row(k: int, paper: float) -> None:
    # PRT Table 4, RT on CartPole (4-D), 10,000 uniform tests: 0.1765 / 0.2142 / 0.2589 (std <= 0.0071)
    values = [kl_entropy(np.random.default_rng(seed).uniform(size=(10_000, 4)), k=k) for seed in range(3)]
    assert float(np.mean(values)) == pytest.approx(paper, abs=0.02)


def test_kl_entropy_of_a_gaussian_matches_the_closed_form() -> None:
    rng = np.random.default_rng(2)
    sigma = 0.05
    points = np.clip(rng.normal(0.5, sigma, size=(5000, 2)), 0, 1)
    expected = 2 * 0.5 * math.log(2 * math.pi * math.e * sigma**2)  # scaled by bounds [0,1]: unchanged
    assert kl_entropy(points, k=10, low=np.zeros(2), high=np.ones(2)) == pytest.approx(expected, abs=0.1)


def test_clustered_inputs_have_lower_entropy_and_sparsity() -> None:
    rng = np.random.default_rng(3)
    spread = rng.uniform(size=(1000, 2))
    clustered = rng.uniform(0.4, 0.5, size=(1000, 2))
    assert kl_entropy(clustered, low=np.zeros(2), high=np.ones(2)) < kl_entropy(
        spread, low=np.zeros(2), high=np.ones(2)
    )
    assert sparsity(clustered) < sparsity(spread)
    assert math.isnan(sparsity(np.zeros((3, 2))))


def test_behaviour_coverage_counts_distinct_cells() -> None:
    descriptors = np.array([[0.1, 0.1], [0.12, 0.11], [0.9, 0.9], [5.0, -3.0]])
    bs, fbs = behaviour_coverage(descriptors, [False, True, True, False], [0, 0], [1, 1], [10, 10])
    assert (bs, fbs) == (3, 2)  # the out-of-range point lands in an edge cell


def test_report_carries_diversity_measures() -> None:
    from analysis_service.metrics import ExecutionRecord
    from analysis_service.report import build_report, render_html

    rng = np.random.default_rng(4)
    records = [
        ExecutionRecord(
            index=i + 1,
            values={"x": float(rng.uniform()), "y": float(rng.uniform())},
            verdict="fail" if i % 10 == 0 else "pass",
            margin=0.0,
            steps=10,
            total_reward=0.0,
            elapsed_seconds=float(i),
            descriptors=(float(i % 7), float(i % 5)),
        )
        for i in range(200)
    ]
    report = build_report([({"campaign_id": "c1", "name": "d"}, records)])
    d = report["campaigns"][0]["diversity"]
    assert abs(d["input_entropy"]) < 0.5 and d["failure_sparsity"] > 0
    assert d["behaviour_cells"] == 35 and 1 <= d["failing_behaviour_cells"] <= 35  # 7 x 5 distinct descriptors
    assert "input entropy" in render_html(report, {"c1": records})


def test_report_gives_final_state_sparsity_only_for_campaigns_that_kept_final_states() -> None:
    from analysis_service.metrics import ExecutionRecord
    from analysis_service.report import build_report, render_html

    def record(i: int, final: tuple[float, ...]) -> ExecutionRecord:
        return ExecutionRecord(
            index=i + 1,
            values={"x": i / 200},
            verdict="fail" if i % 10 == 0 else "pass",
            margin=0.0,
            steps=10,
            total_reward=0.0,
            elapsed_seconds=float(i),
            final_observation=final,
        )

    # final states 0, 1, ..., 199 on a line: an inner point's 3 nearest are at 1, 1, 2 (mean 4/3); the failing
    # ones (every 10th) at 10, 10, 20 (mean 40/3); medians over points
    kept = [record(i, (float(i), 0.0)) for i in range(200)]
    report = build_report(
        [({"campaign_id": "kept"}, kept), ({"campaign_id": "plain"}, [record(i, ()) for i in range(200)])]
    )
    d_kept, d_plain = (c["diversity"] for c in report["campaigns"])
    assert d_kept["final_state_sparsity"] == pytest.approx(4 / 3) and d_kept["failure_state_sparsity"] == pytest.approx(
        40 / 3
    )
    assert d_plain["final_state_sparsity"] is None and d_plain["failure_state_sparsity"] is None
    html = render_html(report, {"kept": kept, "plain": []})
    assert "1.333 / 13.333" in html and "final-state sparsity" in html


def _exact_cluster_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of the Welch-t permutation test over every relabelling (the reference the sampled test meets)."""
    values = a + b

    def welch(x: list[float], y: list[float]) -> float:
        mx, my = sum(x) / len(x), sum(y) / len(y)
        vx = sum((v - mx) ** 2 for v in x) / (len(x) - 1)
        vy = sum((v - my) ** 2 for v in y) / (len(y) - 1)
        se = math.sqrt(vx / len(x) + vy / len(y))
        return (mx - my) / se if se else 0.0 if mx == my else math.copysign(math.inf, mx - my)

    observed = welch(a, b)
    stats = []
    for chosen in itertools.combinations(range(len(values)), len(a)):
        x = [values[i] for i in chosen]
        y = [values[i] for i in range(len(values)) if i not in chosen]
        stats.append(welch(x, y))
    return sum(1 for s in stats if abs(s) >= abs(observed) - 1e-12) / len(stats)


def test_cluster_comparison_by_hand() -> None:
    # one agent; boundary clusters of 4 and 2 tests (3 of 4 and 1 of 2 fail), random states 0, 0, 1, 0
    boundary = {"c1": (3.0, 4), "c2": (1.0, 2)}
    random = {"r1": (0.0, 1), "r2": (0.0, 1), "r3": (1.0, 1), "r4": (0.0, 1)}
    c = cluster_comparison([boundary], [random], resamples=4000, permutations=20_000)
    # tests weigh equally: 4/6 against 1/4
    assert c.ratio == pytest.approx((4 / 6) / (1 / 4))
    assert c.difference == pytest.approx(4 / 6 - 1 / 4)
    assert c.units == (2, 4)
    # unit means 0.75, 0.5 against 0, 0, 1, 0 over all 15 relabellings
    assert c.p_value == pytest.approx(_exact_cluster_p([0.75, 0.5], [0.0, 0.0, 1.0, 0.0]), abs=0.01)
    # the bootstrap's boundary side can only be 0.5, 4/6 or 0.75 and the random side 0..1 in quarters
    low, high = c.difference_ci95
    assert 0.5 - 1.0 <= low <= c.difference <= high <= 0.75 - 0.0
    # one unit a side: every draw is the data itself
    single = cluster_comparison([{"c": (3.0, 4)}], [{"r": (1.0, 4)}], resamples=100, permutations=10)
    assert single.ratio_ci95 == pytest.approx((3.0, 3.0)) and single.difference_ci95 == pytest.approx((0.5, 0.5))


def test_clustering_turns_an_apparently_significant_difference_into_none() -> None:
    # four boundary states, each with 25 tests that share its outcome (two fail throughout, two pass), against 100
    # independent random states of which 30 fail: per test, 50 of 100 against 30 of 100
    boundary = {f"c{i}": (25.0 if i < 2 else 0.0, 25) for i in range(4)}
    random = {f"r{i}": (1.0 if i < 30 else 0.0, 1) for i in range(100)}
    per_test = {f"t{i}": (1.0 if i < 50 else 0.0, 1) for i in range(100)}  # the same tests as independent units
    naive = cluster_comparison([per_test], [random], resamples=2000, permutations=5000)
    clustered = cluster_comparison([boundary], [random], resamples=2000, permutations=5000)
    assert naive.difference == pytest.approx(clustered.difference) == pytest.approx(0.2)
    assert naive.p_value < 0.01 and naive.difference_ci95[0] > 0
    assert clustered.p_value > 0.2 and clustered.difference_ci95[0] < 0 < clustered.difference_ci95[1]


def test_cluster_comparison_draws_a_unit_for_every_agent_at_once() -> None:
    # two agents that fail at the same boundary cluster: drawn together, the pooled difference moves as one
    boundary = {"hard": (4.0, 4), "easy": (0.0, 4)}
    random = {"r1": (0.0, 1), "r2": (1.0, 1)}
    pooled = cluster_comparison([boundary, boundary], [random, random], resamples=3000, permutations=2000)
    alone = cluster_comparison([boundary], [random], resamples=3000, permutations=2000)
    assert pooled.difference_ci95 == pytest.approx(alone.difference_ci95)
    assert pooled.p_value == pytest.approx(alone.p_value, abs=0.02)
    empty = cluster_comparison([], [])
    assert math.isnan(empty.ratio) and math.isnan(empty.p_value)


def test_pooled_median_ratio_interval_resamples_runs_not_values() -> None:
    # identical runs: every draw pools the same values, so the interval is the point ratio itself
    assert pooled_median_ratio_interval([[0.4, 0.6]] * 5, [[0.8, 1.0]] * 4) == pytest.approx((0.5 / 0.9, 0.5 / 0.9))
    # one of two A runs low, one high: a draw can take the low run twice (ratio 0.2 / 1) or the high one twice (1)
    low, high = pooled_median_ratio_interval([[0.2] * 50, [1.0] * 50], [[1.0]] * 3, resamples=2000)
    assert (low, high) == (pytest.approx(0.2), pytest.approx(1.0))
    # the same values as independent single-image runs give a much narrower interval: runs are the unit
    levels = np.linspace(0.3, 0.7, 10)
    runs = [[x] * 20 for x in levels]
    by_run = pooled_median_ratio_interval(runs, [[1.0]] * 3, resamples=2000)
    singles = pooled_median_ratio_interval([[x] for x in levels for _ in range(20)], [[1.0]] * 3, resamples=2000)
    assert singles[1] - singles[0] < 0.5 * (by_run[1] - by_run[0])
    # seeded, and NaN when a side has nothing to take a median of
    assert pooled_median_ratio_interval([[0.1, 0.5], [0.3]], [[0.6], [0.9]], seed=3) == pooled_median_ratio_interval(
        [[0.1, 0.5], [0.3]], [[0.6], [0.9]], seed=3
    )
    assert all(math.isnan(x) for x in pooled_median_ratio_interval([[], []], [[0.5]]))
