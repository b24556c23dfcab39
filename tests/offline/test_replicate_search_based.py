"""The search-based replication's boundary-versus-random statistics (replications/replicate_search_based.py)."""

from __future__ import annotations

import math

import pytest

from replications.replicate_search_based import boundary_vs_random, boundary_vs_random_p


def suite(tests: int, invalid: int, failing: int) -> dict:
    valid = tests - invalid
    return {"tests": tests, "invalid": invalid, "failing_tests": failing, "mean_fail_frequency": failing / valid}


def test_the_fisher_test_counts_failing_tests_of_st_against_rs_pooled_over_agents() -> None:
    # the one-agent Mario run: 8 of 22 ST tests failed, 6 of 20 RS tests (two-sided Fisher p about 0.75)
    one = {"agents": {"a": {"suites": {"ST": suite(22, 0, 8), "RS": suite(20, 0, 6)}}}}
    assert boundary_vs_random_p(one) == pytest.approx(0.7499, abs=1e-3)
    assert boundary_vs_random(one) == pytest.approx((8 / 22) / 0.3)
    # pooled: invalid tests are left out of both counts, and a clear difference is significant
    two = {
        "agents": {
            "a": {"suites": {"ST": suite(22, 2, 15), "RS": suite(22, 0, 2)}},
            "b": {"suites": {"ST": suite(22, 0, 14), "RS": suite(22, 0, 3)}},
        }
    }
    assert boundary_vs_random_p(two) < 1e-5
    # a report without the RS suite (or from before failing_tests was recorded) has no test
    assert math.isnan(boundary_vs_random_p({"agents": {"a": {"suites": {"ST": suite(22, 0, 8)}}}}))
    assert math.isnan(boundary_vs_random_p({"agents": {"a": {"suites": {"ST": {"tests": 1}, "RS": {"tests": 1}}}}}))
