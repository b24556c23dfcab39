"""bench/campaign_overhead.py's CPU windows: CPU per execution between two progress samples, never across none."""

from __future__ import annotations

import pytest

from bench.campaign_overhead import cpu_us


def test_cpu_per_execution_is_the_cpu_between_two_samples_over_the_executions_between_them() -> None:
    # (executions then, suite CPU s, generator CPU s) at the first progress event past each mark
    samples = {1_000: (1_024, 10.0, 2.0), 2_000: (2_048, 12.048, 2.512), 9_000: (9_000, 30.0, 6.0)}
    assert cpu_us(samples, 1_000, 2_000, 1) == pytest.approx(2_000.0)  # 2.048 s over 1,024 executions
    assert cpu_us(samples, 1_000, 2_000, 2) == pytest.approx(500.0)
    assert cpu_us(samples, 2_000, 9_000, 2) == pytest.approx((6.0 - 2.512) / 6_952 * 1e6)


def test_a_window_without_a_progress_event_inside_is_refused() -> None:
    samples = {1_000: (1_500, 10.0, 2.0), 2_000: (1_500, 10.0, 2.0)}  # one event answered both marks
    with pytest.raises(SystemExit, match="no progress event between executions 1000 and 2000"):
        cpu_us(samples, 1_000, 2_000, 1)
