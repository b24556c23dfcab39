"""Tests for analysis_service.metrics and analysis_service.report."""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np
import pytest

from analysis_service.metrics import (
    ExecutionRecord,
    compute_metrics,
    cumulative_failures,
    distinct_failing_inputs,
    wilson_interval,
)
from analysis_service.report import build_report, render_html, write_report

Z95 = 1.959963984540054  # two-sided 95% normal quantile, hard-coded on purpose


def wilson_reference(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Closed-form Wilson score interval, written independently of the module."""
    p = k / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return max(0.0, centre - half), min(1.0, centre + half)


def rec(
    index: int,
    verdict: str = "pass",
    values: dict | None = None,
    margin: float = 1.0,
    steps: int = 10,
    elapsed: float | None = None,
) -> ExecutionRecord:
    return ExecutionRecord(
        index=index,
        values=values if values is not None else {"x": float(index), "y": 0.5 * index},
        verdict=verdict,
        margin=margin,
        steps=steps,
        total_reward=float(index),
        elapsed_seconds=float(index) * 2.0 if elapsed is None else elapsed,
    )


# --------------------------------------------------------------------------- Wilson


@pytest.mark.parametrize("k,n", [(0, 10), (5, 10), (1, 1000), (10, 10), (3, 7)])
def test_wilson_matches_closed_formula(k: int, n: int) -> None:
    low, high = wilson_interval(k, n)
    ref_low, ref_high = wilson_reference(k, n)
    assert low == pytest.approx(ref_low, abs=1e-12)
    assert high == pytest.approx(ref_high, abs=1e-12)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_wilson_known_literal_values() -> None:
    # Published values (e.g. Newcombe 1998 / any stats table), 4 decimals.
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(1, 1000) == pytest.approx((0.000177, 0.005643), abs=1e-5)


def test_wilson_edges_and_confidence() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow = wilson_interval(5, 10, confidence=0.80)
    wide = wilson_interval(5, 10, confidence=0.99)
    assert wide[0] < narrow[0] and wide[1] > narrow[1]
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


# --------------------------------------------------------------------------- distinct failures


def test_distinct_failures_counts_reruns_once() -> None:
    records = [
        rec(1, "fail", {"x": 0.1, "y": 2.0}),
        rec(2, "fail", {"y": 2.0, "x": 0.1 + 1e-9}),  # same input after rounding, other key order
        rec(3, "fail", {"x": 0.1, "y": 2.0}),  # exact re-run
        rec(4, "fail", {"x": 0.2, "y": 2.0}),
        rec(5, "pass", {"x": 0.3, "y": 2.0}),  # passes never count
    ]
    assert distinct_failing_inputs(records) == 2
    # With more decimals the 1e-9 perturbation becomes a different input.
    assert distinct_failing_inputs(records, decimals=12) == 3


def test_distinct_failures_nested_list_values() -> None:
    cars = [{"lane": 1, "speed": 20.0}, {"lane": 2, "speed": 25.0}]
    same_cars = [{"speed": 20.0000001, "lane": 1}, {"speed": 25.0, "lane": 2}]
    other_order = list(reversed(cars))
    records = [
        rec(1, "fail", {"cars": cars, "mode": "dense"}),
        rec(2, "fail", {"cars": same_cars, "mode": "dense"}),
        rec(3, "fail", {"cars": other_order, "mode": "dense"}),  # list order matters
        rec(4, "fail", {"cars": cars, "mode": "sparse"}),
    ]
    assert distinct_failing_inputs(records) == 3


# --------------------------------------------------------------------------- compute_metrics


def test_first_failure_with_unsorted_records() -> None:
    records = [
        rec(7, "fail", elapsed=30.0),
        rec(2, "pass", elapsed=5.0),
        rec(4, "fail", elapsed=12.5),
        rec(1, "pass", elapsed=2.0),
        rec(3, "pass", elapsed=8.0),
    ]
    m = compute_metrics("c1", records)
    assert m.campaign_id == "c1"
    assert m.tests_to_first_failure == 4
    assert m.seconds_to_first_failure == 12.5
    assert m.failures == 2
    assert m.executions == 5
    assert m.wall_seconds == 30.0
    assert m.steps == 50


def test_no_failures_gives_zeroes() -> None:
    m = compute_metrics("c", [rec(1), rec(2)])
    assert (m.failures, m.tests_to_first_failure, m.seconds_to_first_failure) == (0, 0, 0.0)
    assert m.failure_rate == 0.0 and m.failure_rate_low == 0.0 and m.failure_rate_high > 0.0


def test_invalid_excluded_from_rate() -> None:
    records = [rec(1, "fail"), rec(2, "pass"), rec(3, "pass"), rec(4, "pass")]
    records += [rec(i, "invalid") for i in range(5, 11)]
    m = compute_metrics("c", records)
    assert m.executions == 4  # refused inputs are no executions
    assert m.invalid == 6
    assert m.failure_rate == pytest.approx(1 / 4)
    ref = wilson_reference(1, 4)
    assert (m.failure_rate_low, m.failure_rate_high) == pytest.approx(ref)


def test_only_invalid_gives_uninformative_interval() -> None:
    m = compute_metrics("c", [rec(1, "invalid"), rec(2, "invalid")])
    assert m.failure_rate == 0.0
    assert (m.failure_rate_low, m.failure_rate_high) == (0.0, 1.0)


def test_empty_campaign() -> None:
    m = compute_metrics("c", [])
    assert m.executions == 0 and m.wall_seconds == 0.0 and m.steps == 0


def test_unknown_verdict_rejected() -> None:
    with pytest.raises(ValueError):
        rec(1, "error")


def test_cumulative_failures_sorted() -> None:
    records = [rec(3, "fail"), rec(1, "pass"), rec(5, "fail"), rec(2, "fail"), rec(4, "invalid")]
    x, y = cumulative_failures(records)
    np.testing.assert_array_equal(x, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(y, [0, 1, 2, 2, 3])


# --------------------------------------------------------------------------- report


EVIL_NAME = "<script>alert('x')</script> & co"


def _info(cid: str, name: str) -> dict:
    return {
        "campaign_id": cid,
        "name": name,
        "subject": "CartPole-v1",
        "model": "ppo-cartpole",
        "strategy": "random",
        "seed": 3,
        "state": "finished",
        "stop_reason": "budget",
        "budget": {"executions": 100},
    }


def _campaigns() -> list[tuple[dict, list[ExecutionRecord]]]:
    a = [rec(i, "fail" if i % 3 == 0 else "pass", margin=1.0 - i / 10) for i in range(1, 21)]
    a.append(rec(21, "invalid", values={"x": 1.0, "y": float("nan")}, margin=float("nan")))
    b = [rec(i, "pass", values={"mode": "a", "n": i}) for i in range(1, 6)]
    return [(_info("camp-a", EVIL_NAME), a), (_info("camp-b", "clean"), b)]


def test_report_json_round_trip() -> None:
    campaigns = _campaigns()
    report = build_report(campaigns)
    text = json.dumps(report, allow_nan=False)  # strict JSON: no NaN/Infinity sneaks through
    assert json.loads(text) == report
    assert report["gauntlet_report_version"] == "1"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$", report["generated_at"])
    first, second = report["campaigns"]
    assert first["info"]["name"] == EVIL_NAME
    assert first["metrics"]["failures"] == 6
    assert [f["index"] for f in first["failures"]] == [3, 6, 9, 12, 15, 18]
    assert second["failures"] == []
    # the first failure: a position and a time where there is one; null (not 0) and found_failure false where not
    assert first["metrics"]["found_failure"] is True and first["metrics"]["tests_to_first_failure"] == 3
    assert second["metrics"]["found_failure"] is False
    assert second["metrics"]["tests_to_first_failure"] is None and second["metrics"]["seconds_to_first_failure"] is None


def test_report_lists_at_most_50_failures_sorted() -> None:
    records = [rec(i, "fail") for i in range(80, 0, -1)]
    report = build_report([(_info("c", "many"), records)])
    listed = report["campaigns"][0]["failures"]
    assert [f["index"] for f in listed] == list(range(1, 51))
    assert report["campaigns"][0]["failures_truncated"] is True
    assert report["campaigns"][0]["metrics"]["failures"] == 80


def test_html_has_png_and_escaped_name(tmp_path) -> None:
    campaigns = _campaigns()
    report = build_report(campaigns)
    page = render_html(report, {info["campaign_id"]: recs for info, recs in campaigns})
    # the name's script never runs; the page's one script is its own (the tables' sort and filter)
    assert "<script>alert" not in page and page.count("<script") == 1
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in page
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    # cumulative + margin(a) + scatter(a) + margin(b); b has only one real parameter.
    assert len(images) == 4
    for b64 in images:
        assert base64.b64decode(b64).startswith(b"\x89PNG\r\n\x1a\n")
    assert "95%" in page and "no failures found" in page  # campaign b has none

    json_path, html_path = write_report(report, page, tmp_path / "out", "rep")
    assert json.loads(json_path.read_text()) == report
    assert html_path.read_text(encoding="utf-8") == page
    with pytest.raises(ValueError):
        write_report(report, page, tmp_path, "../escape")


def test_html_no_failures_banner() -> None:
    campaigns = [(_info("c", "quiet"), [rec(i) for i in range(1, 4)])]
    page = render_html(build_report(campaigns), {"c": campaigns[0][1]})
    assert '<div class="nofail">no failures found</div>' in page
    assert page.count("data:image/png;base64,") == 3


def test_report_of_variable_length_descriptors_has_no_behaviour_grid_and_draws_performance_curves() -> None:
    import dataclasses

    from analysis_service.report import diversity

    # trace strategies record the states a trace covered: descriptors of different lengths share no grid
    records = [dataclasses.replace(rec(i), descriptors=tuple(float(k) for k in range(i))) for i in range(1, 9)]
    assert diversity(records)["behaviour_cells"] is None
    labelled = [
        dataclasses.replace(rec(1), trace_labels={"role": "agent", "pl": "0"}),
        dataclasses.replace(rec(2), trace_labels={"role": "trace", "pl": "0"}),
        dataclasses.replace(rec(3), trace_labels={"role": "agent", "pl": "20"}),
        dataclasses.replace(rec(5), trace_labels={"role": "trace", "pl": "20"}),
        dataclasses.replace(rec(7), trace_labels={"role": "agent", "pl": "40"}),
        dataclasses.replace(rec(6), trace_labels={"role": "trace", "pl": "40"}),
    ]
    report = build_report([({"campaign_id": "perf", "name": "perf"}, labelled)])
    html = render_html(report, {"perf": labelled})
    assert "R_a = 1.00, the fittest fuzz traces' R_t = 2.00" in html  # total_reward = index
    assert "at 1 of 2 prefix lengths" in html and 'alt="robust performance, perf"' in html
    assert "<tr><td>20</td><td>3.00</td><td>5.00</td><td>-2.00</td></tr>" in html
    plain = render_html(build_report([({"campaign_id": "p", "name": "p"}, [rec(1)])]), {"p": [rec(1)]})
    assert "Performance testing" not in plain
