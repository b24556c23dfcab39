"""Step 4 of search-based testing of RL measured from stored executions: R_a and R_t per prefix length.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Section 6. The generator's `trace_performance`
strategy labels every action-trace test case with its role ("agent": the agent takes over after the prefix;
"trace": the fuzz trace replayed whole) and prefix length `pl` (0 for simple testing); each execution's
total_reward is already the mean over its n_ep runs. The analysis service's report is the one service that reads a
campaign's executions this way; the replication (replications/replicate_search_based.py) reaches it through
analysis_service/api.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class PerformanceMeasurement:
    agent: dict[int, float] = field(default_factory=dict)  # pl -> R_a^pl (pl 0: simple R_a)
    traces: dict[int, float] = field(default_factory=dict)  # pl -> R_t^pl (pl 0: simple R_t)

    def robust_lengths(self) -> list[int]:
        """The prefix lengths with both curves measured (robust testing; 0, simple testing, excluded)."""
        return sorted(pl for pl in self.agent if pl > 0 and pl in self.traces)


def measure_performance(executions: Iterable[tuple[Mapping[str, str], float]]) -> PerformanceMeasurement:
    """R_a and R_t per prefix length from (action-trace labels, total_reward) of a performance campaign's
    executions; the robust means are over the n_test tests of a length. Executions without a role are ignored."""
    rewards: dict[tuple[str, int], list[float]] = defaultdict(list)
    for labels, total_reward in executions:
        rewards[(labels.get("role", ""), int(labels.get("pl", "0")))].append(float(total_reward))
    out = PerformanceMeasurement()
    for (role, pl), values in sorted(rewards.items(), key=lambda kv: kv[0][1]):
        target = out.agent if role == "agent" else out.traces if role == "trace" else None
        if target is not None:
            target[pl] = sum(values) / len(values)
    return out


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Pearson's r of paired values; NaN when either side is constant or there are fewer than 3 pairs."""
    if len(xs) != len(ys):
        raise ValueError("pearson needs paired values")
    if len(xs) < 3:
        return float("nan")
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])
