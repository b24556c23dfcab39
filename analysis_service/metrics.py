"""Campaign metrics computed from stored test executions.

Pure Python + numpy on purpose: the analysis service must start fast, so this
module imports nothing heavy (no scipy, torch, grpc or other project packages).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

VERDICTS: frozenset[str] = frozenset({"pass", "fail", "invalid"})


@dataclass(frozen=True)
class ExecutionRecord:
    """One executed test, as stored by the campaign.

    index: 1-based position of the execution in the campaign.
    values: the test input, parameter name -> float/int/str/list (lists may hold dicts).
    verdict: "pass", "fail" or "invalid" (invalid = the input could not be judged).
    margin: oracle margin (how far from the failure threshold).
    steps: simulation steps used by the execution.
    total_reward: episode return.
    elapsed_seconds: seconds since campaign start when the record was stored.
    descriptors: optional behaviour descriptors (e.g. for quality-diversity search).
    final_observation: the episode's last observation, flattened; empty unless the campaign kept it.
    trace_labels: an action-trace test case's labels (e.g. performance testing's role and prefix length `pl`).
    test_case_id: the stored id (t0000079), the one id the CLI, the reports and `gauntlet replay` use.
    reason: the oracle's sentence for the verdict (e.g. "pole angle left its limit at step 22").
    episode_seed: the reset seed of the first repetition's episode (None when unknown).
    """

    index: int
    values: dict[str, object]
    verdict: str
    margin: float
    steps: int
    total_reward: float
    elapsed_seconds: float
    descriptors: tuple[float, ...] = ()
    final_observation: tuple[float, ...] = ()
    trace_labels: Mapping[str, str] = field(default_factory=dict)
    test_case_id: str = ""
    reason: str = ""
    episode_seed: int | None = None

    def __post_init__(self) -> None:
        # Fail loudly on a typo'd verdict: silently treating it as "pass" would skew every rate.
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {sorted(VERDICTS)}, got {self.verdict!r}")
        if self.index < 1:
            raise ValueError(f"index is 1-based, got {self.index}")

    def real(self, name: str) -> float:
        """The input parameter `name` as a float; a parameter that is not a number is a caller's mistake."""
        value = self.values[name]
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
            raise TypeError(f"parameter {name!r} of execution {self.index} is not a number: {value!r}")
        return float(value)


@dataclass(frozen=True)
class CampaignMetrics:
    """Summary of one campaign; every field is a plain JSON-friendly scalar."""

    campaign_id: str
    executions: int  # judged executions: invalid ones (inputs the subject refused) are counted in `invalid`
    failures: int
    distinct_failures: int
    tests_to_first_failure: int  # 1-based index of the first failure, 0 if none
    seconds_to_first_failure: float  # earliest elapsed_seconds of any failure, 0.0 if none
    failure_rate: float  # failures / judged executions (invalid ones excluded)
    failure_rate_low: float  # 95% Wilson score interval, lower bound
    failure_rate_high: float  # 95% Wilson score interval, upper bound
    invalid: int
    steps: int
    wall_seconds: float


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Preferred over the normal (Wald) interval because campaigns often see 0 or
    very few failures, where Wald collapses to a zero-width interval.
    n = 0 gives the uninformative (0.0, 1.0).
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if n == 0:
        return 0.0, 1.0
    # stdlib normal quantile: avoids importing scipy.stats just for one number.
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    # Clamp: rounding can push the bounds a hair outside [0, 1] at p = 0 or 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def _canonical(value: object, decimals: int) -> Hashable:
    """Hashable, order-independent form of a test-input value.

    Reals are rounded so that re-running the same input (or a float that went
    through a serialisation round-trip) is recognised as the same input.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if math.isnan(x):
            return "nan"  # NaN != NaN would otherwise make every NaN input "distinct"
        if math.isinf(x):
            return x
        rounded = round(x, decimals)
        return 0.0 if rounded == 0.0 else rounded  # fold -0.0 into 0.0
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _canonical(v, decimals)) for k, v in value.items())))
    if isinstance(value, (list, tuple, np.ndarray)):
        return ("list", tuple(_canonical(v, decimals) for v in value))
    # Unknown type: fall back to its repr so counting never crashes.
    return ("repr", repr(value))


def canonical_input(values: dict[str, object], decimals: int = 6) -> Hashable:
    """Canonical hashable key of a whole test input (parameter order does not matter)."""
    return _canonical(values, decimals)


def distinct_failing_inputs(records: Iterable[ExecutionRecord], decimals: int = 6) -> int:
    """Number of distinct failing inputs, after rounding reals to `decimals` decimals."""
    return len({canonical_input(r.values, decimals) for r in records if r.verdict == "fail"})


def _sorted_by_index(records: Iterable[ExecutionRecord]) -> list[ExecutionRecord]:
    # Records may come from the store in arbitrary order (e.g. parallel workers).
    return sorted(records, key=lambda r: r.index)


def compute_metrics(campaign_id: str, records: Sequence[ExecutionRecord]) -> CampaignMetrics:
    """Summarise a campaign's executions (records may arrive unsorted)."""
    ordered = _sorted_by_index(records)
    failures = [r for r in ordered if r.verdict == "fail"]
    invalid = sum(1 for r in ordered if r.verdict == "invalid")
    judged = len(ordered) - invalid
    low, high = wilson_interval(len(failures), judged)
    first = failures[0] if failures else None
    return CampaignMetrics(
        campaign_id=campaign_id,
        executions=judged,  # an input the subject refused (verdict invalid) is no execution
        failures=len(failures),
        distinct_failures=distinct_failing_inputs(failures),
        tests_to_first_failure=first.index if first else 0,
        # index = asking order; a batch may finish a later-asked failure first, so time is the earliest seen
        seconds_to_first_failure=float(min(r.elapsed_seconds for r in failures)) if failures else 0.0,
        failure_rate=len(failures) / judged if judged else 0.0,
        failure_rate_low=low,
        failure_rate_high=high,
        invalid=invalid,
        steps=int(sum(r.steps for r in ordered)),
        wall_seconds=float(max((r.elapsed_seconds for r in ordered), default=0.0)),
    )


def cumulative_failures(records: Iterable[ExecutionRecord]) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): x = execution index (sorted), y = number of failures up to and including x."""
    ordered = _sorted_by_index(records)
    x = np.fromiter((r.index for r in ordered), dtype=np.int64, count=len(ordered))
    fails = np.fromiter((r.verdict == "fail" for r in ordered), dtype=np.int64, count=len(ordered))
    return x, np.cumsum(fails)
