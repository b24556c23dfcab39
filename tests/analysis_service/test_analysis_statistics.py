"""Comparison statistics and diversity measures, checked against closed forms and known values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis_service.statistics import (
    behaviour_coverage,
    compare,
    effect_band,
    kl_entropy,
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
