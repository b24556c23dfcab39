"""Shrink: a stored failure reduced to a minimal failing input (ShrinkExecution), in the spirit of delta debugging
and Hypothesis's shrinking.

"Minimal" means close to a nominal point of the space (each real and integer parameter's nominal value, declared by
the subject with ``nominal:``, else the centre of its range) with as few parameters moved from it as possible, and
still failing under the original episode's seeds: every candidate runs as a test case whose ``seed_origin`` is the
stored execution's (common/seeding.py ``case_episode_seed``), judged by the campaign's oracle and majority vote.
Categorical, integer-set and sequence parameters are kept.

0. Action traces (search-based testing of RL): the shortest failing prefix of the trace's open-loop actions, by a
   batched binary search over the prefix length: each round runs up to 8 lengths spread over those not yet ruled
   out (shorter than the shortest failing one found, longer than the longest tried that passed) in one RunEpisodes
   call and keeps the shortest that fails. Shorter failing prefixes can hide between two tried lengths only where
   failing is not monotone in the length; the result always failed when it ran.
1. Fewest parameters moved: each moved parameter, farthest (relative to its range) first, is put back at its
   nominal value; the change is kept when the input still fails (one-at-a-time delta debugging, complement
   removal of single elements).
2. Closest to nominal: the whole moved part is pulled toward the nominal point along the segment between them (a
   batch of points at fractions 1/8 .. 7/8 in one RunEpisodes call; the nearest failing one is kept), then each
   parameter alone the same way.

Every accepted candidate failed when it ran, and each accepted step only shortens the trace or moves parameters
toward the nominal point, so the result still fails under its seed and is never farther from the nominal point (nor
longer) than the original.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from common.space import ParameterSpace, ParamValue
from common.test_case import ActionTrace, SeedOrigin, TestCase
from generator_service.config import CampaignConfig
from generator_service.replay import Replayer
from generator_service.store import CampaignStore, ExecutionRow, ShrinkRow

FRACTIONS = tuple(i / 8 for i in range(1, 8))
PREFIX_SPLITS = 8  # prefix lengths tried per round of the binary search over an action trace
DEFAULT_BUDGET = 60
MAX_BUDGET = 1000


def nominal(space: ParameterSpace) -> dict[str, float]:
    """The nominal value of each real and integer parameter: the subject's declared one (the parameter's `nominal`),
    else the centre of its range (rounded for integers)."""
    return {p.name: p.nominal_value for p in space.parameters if p.kind in ("real", "integer")}


def distance(space: ParameterSpace, values: Mapping[str, ParamValue]) -> float:
    """Euclidean distance from the nominal point over the real and integer parameters, each scaled by its range."""
    centre = nominal(space)
    total = 0.0
    for p in space.parameters:
        if p.name in centre and p.name in values:
            lo, hi = p.bounds
            width = (hi - lo) or 1.0
            total += ((float(values[p.name]) - centre[p.name]) / width) ** 2
    return math.sqrt(total)


def moved(space: ParameterSpace, values: Mapping[str, ParamValue]) -> list[str]:
    """The real and integer parameters not at their nominal value."""
    centre = nominal(space)
    return [n for n, c in centre.items() if n in values and float(values[n]) != c]


@dataclass
class Shrunk:
    original: ExecutionRow
    best: ExecutionRow
    executions: int
    original_distance: float
    shrunk_distance: float
    moved: list[str]


class Shrinker:
    """Shrinks one stored failure within a budget of executions."""

    def __init__(self, replayer: Replayer, campaign_id: str, config: CampaignConfig, space: ParameterSpace) -> None:
        self.replayer = replayer
        self.campaign_id = campaign_id
        self.config = config
        self.space = space
        self.centre = nominal(space)
        self.used = 0

    def shrink(self, stored: ExecutionRow, budget: int) -> Shrunk:
        case = TestCase.from_stored(stored.values)
        origin = case.seed_origin or SeedOrigin(self.config.seed, stored.test_case_id)
        best_case = replace(case, seed_origin=origin)
        best_row = stored
        self.used = 0
        kinds = {p.name: p.kind for p in self.space.parameters}

        def with_values(values: dict[str, ParamValue]) -> TestCase:
            return replace(best_case, values=values)

        def typed(name: str, value: float) -> ParamValue:
            return int(round(value)) if kinds[name] == "integer" else float(value)

        # 0. action traces: the shortest failing prefix (the start state the trace replays from is shrunk after it)
        if best_case.action_trace is not None and best_case.action_trace.actions:
            best_case, best_row = self._shortest_prefix(best_case, best_row, budget)

        # 1. fewest parameters moved: put each back at nominal, farthest first
        order = sorted(moved(self.space, best_case.values), key=lambda n: -self._scaled(n, best_case.values[n]))
        for name in order:
            if self.used >= budget:
                break
            values = dict(best_case.values)
            values[name] = typed(name, self.centre[name])
            found = self._first_failing([with_values(values)])
            if found is not None:
                best_case, best_row = found

        # 2. closest to nominal: the moved part jointly, then each parameter alone, toward the nominal point
        groups = [moved(self.space, best_case.values)]
        groups += [[n] for n in groups[0]] if len(groups[0]) > 1 else []
        for group in groups:
            if self.used + len(FRACTIONS) > budget or not group:
                continue
            candidates = []
            for t in FRACTIONS:  # nearest to nominal first
                values = dict(best_case.values)
                for name in group:
                    c = self.centre[name]
                    values[name] = typed(name, c + t * (float(best_case.values[name]) - c))
                candidates.append(with_values(values))
            found = self._first_failing(candidates)
            if found is not None:
                best_case, best_row = found
        return Shrunk(
            original=stored,
            best=best_row,
            executions=self.used,
            original_distance=distance(self.space, case.values),
            shrunk_distance=distance(self.space, best_case.values),
            moved=moved(self.space, best_case.values),
        )

    def _shortest_prefix(self, case: TestCase, row: ExecutionRow, budget: int) -> tuple[TestCase, ExecutionRow]:
        """The shortest failing prefix of the case's trace found by a batched binary search within the budget:
        `lo` is one past the longest length tried that passed, `hi` the shortest that failed (the whole trace)."""
        trace = case.action_trace
        assert trace is not None
        # an empty trace with no agent step is no episode at all: such a trace keeps at least one action
        lo, hi = (0 if trace.agent_steps > 0 else 1), len(trace.actions)
        while lo < hi and self.used < budget:
            lengths = sorted({lo + (hi - lo) * i // PREFIX_SPLITS for i in range(PREFIX_SPLITS)})[: budget - self.used]
            found = self._first_failing([replace(case, action_trace=_prefix(trace, n)) for n in lengths])
            if found is None:
                lo = lengths[-1] + 1
                continue
            case, row = found
            assert case.action_trace is not None
            hi = len(case.action_trace.actions)
            lo = max((n + 1 for n in lengths if n < hi), default=lo)
        return case, row

    def _scaled(self, name: str, value: ParamValue) -> float:
        lo, hi = self.space[name].bounds
        return abs(float(value) - self.centre[name]) / ((hi - lo) or 1.0)

    def _first_failing(self, candidates: list[TestCase]) -> tuple[TestCase, ExecutionRow] | None:
        """Runs the candidates in one call; the first (in the given order) that failed, with its judged row. A
        candidate no nearer than the current best is never offered, so any failing one is an improvement."""
        candidates = [c for c in candidates if not self.space.violations(c.values)]
        if not candidates:
            return None
        ids = [f"s{self.used + i + 1:07d}" for i in range(len(candidates))]
        rows = self.replayer.run_cases(self.campaign_id, self.config, list(zip(ids, candidates)), "shrink")
        self.used += len(candidates)
        for case, row in zip(candidates, rows):
            if row.verdict == "fail":
                return case, row
        return None


def _prefix(trace: ActionTrace, n: int) -> ActionTrace:
    """The trace with its first n actions (its provenance's prefix length capped at n)."""
    kept = None if trace.prefix_length is None else min(trace.prefix_length, n)
    return replace(trace, actions=trace.actions[:n], prefix_length=kept)


def distinct_failures(rows: Iterable[ExecutionRow], first: int) -> list[ExecutionRow]:
    """The first `first` failures in asking order, one per distinct input (as `gauntlet shrink --first` picks)."""
    seen: set[str] = set()
    out: list[ExecutionRow] = []
    for row in sorted((r for r in rows if r.verdict == "fail"), key=lambda r: r.index):
        key = json.dumps(row.values, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out[:first]


def shrink_and_store(
    store: CampaignStore,
    replayer: Replayer,
    campaign_id: str,
    config: CampaignConfig,
    space: ParameterSpace,
    stored: ExecutionRow,
    budget: int,
) -> ShrinkRow:
    """Shrinks one stored failure and stores the result (replacing an earlier shrink of it); the stored row."""
    shrunk = Shrinker(replayer, campaign_id, config, space).shrink(stored, budget)
    best = replace(shrunk.best, index=stored.index, batch=stored.batch)
    row = ShrinkRow(
        test_case_id=stored.test_case_id,
        shrunk=best,
        original_distance=shrunk.original_distance,
        shrunk_distance=shrunk.shrunk_distance,
        moved=tuple(shrunk.moved),
        nominal=nominal(space),
        executions=shrunk.executions,
        max_executions=budget,
    )
    store.add_shrink(campaign_id, row)
    return row
