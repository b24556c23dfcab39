"""The `replay` strategy: a regression campaign over fixed inputs, each rerun with the episode seeds it had in the
campaign it was found in (`gauntlet export CAMPAIGN --failures` writes one).

Each listed case is asked once, in the listed order, with its ``seed_origin`` (its original campaign's seed and
test case id), so the simulator resets every repetition as the original episode was reset (common/seeding.py
``case_episode_seed``); then the strategy is exhausted. A case that fails again is a failure of the campaign;
`gauntlet run` of such a campaign exits 1 naming the original ids that still fail.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

import annotated_types
import numpy as np
from pydantic import Field, model_validator

from common.seeding import episode_seed
from common.space import ParameterSpace
from common.test_case import ActionTrace, SeedOrigin, TestCase
from generator_service.strategies.base import Result
from generator_service.strategies.params import Integer, StrategyParams

MAX_CASES = 100_000
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ReplayCase(StrategyParams):
    """One fixed input and the episode it reproduces (the base's rules: unknown fields refused, standard bounds)."""

    id: str = Field(description="its test case id in the campaign it comes from, e.g. t0000079")
    campaign_seed: Annotated[Integer, annotated_types.Ge(0)] = Field(
        description="the seed of the campaign it comes from (its episode seeds derive from it and the id)"
    )
    values: dict[str, Any] = Field(description="the parameter values, as stored")
    action_trace: dict[str, Any] | None = Field(default=None, description="its action trace, as stored, if any")
    episode_seed: Annotated[Integer, annotated_types.Ge(0)] | None = Field(
        default=None,
        description="informational: its first episode's seed; when given it must be the one campaign_seed and id give",
    )
    campaign: str = Field(default="", description="informational: the campaign it comes from")
    reason: str = Field(default="", description="informational: why it failed there")

    @model_validator(mode="after")
    def _consistent(self) -> ReplayCase:
        if not ID_PATTERN.fullmatch(self.id):
            raise ValueError(f"id {self.id!r} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
        derived = episode_seed(self.campaign_seed, self.id, 0)
        pinned = (self.action_trace or {}).get("reset_seed")
        expected = int(pinned) if pinned is not None else derived
        if self.episode_seed is not None and self.episode_seed != expected:
            raise ValueError(
                f"case {self.id}: episode_seed {self.episode_seed} is not the seed campaign_seed {self.campaign_seed} "
                f"gives it ({expected})"
            )
        return self


class ReplayParams(StrategyParams):
    cases: Annotated[list[ReplayCase], annotated_types.MaxLen(MAX_CASES)] = Field(
        default_factory=list,
        description="the inputs to run again, in order (at most 100,000), each with its original seed; none: the "
        "campaign runs nothing",
    )


def _whole_numbers_as_integers(space: ParameterSpace, values: dict[str, Any]) -> dict[str, Any]:
    """Strategy parameters travel as a protobuf Struct, whose numbers are doubles: an integer parameter's value
    (Taxi's taxi_row: 8) arrives as 8.0 and is an integer again here; a fractional one stays and is refused."""
    integers = {p.name for p in space.parameters if p.kind in ("integer", "integer_set")}
    return {k: int(v) if k in integers and isinstance(v, float) and v.is_integer() else v for k, v in values.items()}


class Replay:
    """Runs fixed inputs again, each with the episode seeds of the campaign it was found in (a regression campaign:
    `gauntlet export CAMPAIGN --failures` writes one)."""

    source = ""
    Params = ReplayParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: ReplayParams) -> None:
        self.cases: list[TestCase] = []
        for i, case in enumerate(params.cases):
            values = _whole_numbers_as_integers(space, case.values)
            problems = space.violations(values)
            if problems:
                raise ValueError(f"strategy_params.cases[{i}] ({case.id}): {'; '.join(problems)}")
            trace = ActionTrace.from_stored(case.action_trace) if case.action_trace is not None else None
            self.cases.append(TestCase(values, trace, SeedOrigin(case.campaign_seed, case.id)))
        self._next = 0

    def ask(self, n: int) -> Sequence[TestCase]:
        batch = self.cases[self._next : self._next + n]
        self._next += len(batch)
        return batch

    def tell(self, results: Sequence[Result]) -> None:
        """A regression campaign does not learn."""
