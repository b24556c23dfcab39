"""An example plug-in package: a strategy that proposes a full grid, and an oracle on the cart's final position."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.params import Integer, StrategyParams
from oracle_service.oracles import Episode, Judgement, Oracle


class GridParams(StrategyParams):
    points: Integer = Field(3, ge=2, le=10, description="grid points per parameter, from low to high")


class GridStrategy:
    """Grid: every combination of `points` evenly spaced values per parameter, in order, then nothing."""

    source = "exhaustive grid (example plug-in)"
    Params = GridParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: GridParams) -> None:
        low, high = space.bounds()
        axes = [np.linspace(lo, hi, params.points).tolist() for lo, hi in zip(low, high)]
        self._grid = [dict(zip(space.names, point)) for point in itertools.product(*axes)]
        self._next = 0

    def ask(self, n: int) -> list[TestInput]:
        batch = self._grid[self._next : self._next + n]
        self._next += len(batch)
        return batch

    def tell(self, results: Sequence[Result]) -> None:
        """A grid does not learn."""


def _cart_right(episode: Episode) -> Judgement:
    x = float(np.asarray(episode.signals["final_observation"]).reshape(-1)[0])
    return Judgement(x > 0.0, -x, (x,), f"grid-plugin: the cart ended at x = {x:.4f}")


CART_RIGHT = Oracle(
    "cart_right",
    "Fails when CartPole's cart ends right of the centre (x > 0); margin -x.",
    ("final_observation",),
    ("final_x",),
    "minus the cart's final position",
    _cart_right,
)
