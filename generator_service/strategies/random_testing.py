"""Random testing: uniform draws over the parameter space (the baseline of every seed paper)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.params import StrategyParams


class RandomTesting:
    """Uniform random test inputs over the parameter space (RT baseline)."""

    source = "baseline in all five seed papers"
    Params = StrategyParams  # no parameters

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: StrategyParams) -> None:
        self.space = space
        self.rng = rng

    def ask(self, n: int) -> list[TestInput]:
        return [self.space.sample(self.rng) for _ in range(n)]

    def tell(self, results: Sequence[Result]) -> None:
        """Random testing does not learn."""
