"""Step 2's measurements from a suite campaign's executions ("Search-Based Testing of Reinforcement Learning",
IJCAI-ECAI 2022, Section 4 and its figures' metrics).

* per test case: the fail frequency, failed runs / runs (n repetitions; a run whose prefix ended the episode counts
  as not failing; a test whose every run did so is INVALID and left out — "consistently reaches a terminal state"
  means: in all n runs);
* per boundary state: the mean fail frequency of its valid test cases (normalised to [0, 1] however many tests a
  suite has per state);
* per suite: the mean fail frequency over all valid test cases.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2


@dataclass
class SuiteMeasurement:
    tests: int = 0
    invalid: int = 0
    fail_frequency: dict[str, float] = field(default_factory=dict)  # test-case id -> fail frequency
    per_boundary: dict[int, float] = field(default_factory=dict)  # boundary index -> normalised fail frequency
    mean: float = 0.0
    # the mean accumulated reward over the valid tests (each execution's total_reward): the performance side of
    # the paper's safety-vs-performance correlation (Section 7), which is measured while testing with the suites
    mean_reward: float = 0.0


def measure_suite(executions: Iterable[generator_pb2.Execution]) -> SuiteMeasurement:
    out = SuiteMeasurement()
    by_boundary: dict[int, list[float]] = defaultdict(list)
    rewards: list[float] = []
    for e in executions:
        out.tests += 1
        if e.verdict == oracle_pb2.VERDICT_KIND_INVALID:
            out.invalid += 1
            continue
        frequency = e.failed_repetitions / e.repetitions if e.repetitions else 0.0
        out.fail_frequency[e.test_case.id] = frequency
        rewards.append(float(e.total_reward))
        by_boundary[int(e.test_case.action_trace.labels.get("boundary", "-1"))].append(frequency)
    out.per_boundary = {b: sum(v) / len(v) for b, v in sorted(by_boundary.items())}
    values = list(out.fail_frequency.values())
    out.mean = sum(values) / len(values) if values else 0.0
    out.mean_reward = sum(rewards) / len(rewards) if rewards else 0.0
    return out
