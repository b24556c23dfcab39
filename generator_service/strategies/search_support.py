"""Helpers shared by the feedback-driven strategies (MAP-Elites, Novelty Search, the fuzzers).

* ``MutationParams``: the parameters every mutation-based strategy shares (params.py explains the schema);
* ``AskLedger``: matches told results to the inputs of the last ask. The campaign tells the results of the
  last ask in order, but after a stop mid-batch only those executed (any subset, not necessarily a prefix).
  Results are therefore matched by their values, not by position; an input asked twice in one batch is
  matched first-asked-first. Results for inputs that were never asked are ignored. Whatever is still
  unmatched when the next ask starts is reported as lost.
* ``BehaviourScale``: the behaviour vector of a result and its normalisation to [0, 1] per dimension.
  The behaviour is the oracle's descriptors (e.g. lunar_crash: (x, vy) at first contact). Oracles without
  descriptors (early_termination, goal_not_reached) get the test input itself, normalised by the space's
  bounds, as a stand-in (box spaces only). Bounds are the ``descriptor_bounds`` parameter when given,
  otherwise learned once from the initial random tests (per dimension min and max; a dimension that did not
  vary gets +-0.5 around its value). Values outside the bounds are not clipped here.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Annotated, Any, Generic, Literal, TypeVar

import numpy as np
from pydantic import AfterValidator, Field

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.params import Integer, Number, StrategyParamError, StrategyParams

# -- parameter schema shared by the mutation-based strategies ----------------------------------------------
IntegerMutation = Literal["shift", "nearby"]  # mutation.INTEGER_OPERATORS, as a type the schema can check


def _ordered_pairs(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if not pairs or any(low >= high for low, high in pairs):
        raise ValueError("one [low, high] pair with low < high per behaviour descriptor")
    return pairs


DescriptorBounds = Annotated[list[tuple[Number, Number]], AfterValidator(_ordered_pairs)]


class MutationParams(StrategyParams):
    """The parameters every mutation-based strategy shares: the random phase and mutation.py's operator."""

    initial_tests: Integer = Field(1000, ge=1, description="random tests before the search starts")
    mutation_scale: Number = Field(0.05, ge=0.0, le=1.0, description="mutation step, a fraction of each range")
    integer_mutation: IntegerMutation = Field("shift", description="operator for integer parameters")
    mutation_p: Number = Field(0.1, ge=0.0, le=1.0, description="probability that a parameter mutates")


def descriptor_bounds_field() -> Any:
    """The ``descriptor_bounds`` parameter's declaration (default None: learned from the initial tests)."""
    return Field(
        None,
        description="grid/normalisation bounds of the behaviour descriptors; learned from the initial tests if null",
        json_schema_extra={"allowed": "a list of [low, high] pairs with low < high, one per behaviour descriptor"},
    )


def bounds_array(bounds: list[tuple[float, float]] | None) -> np.ndarray | None:
    """The validated ``descriptor_bounds`` as a (d, 2) array, or None."""
    return None if bounds is None else np.asarray(bounds, dtype=float)


def check_mutable_space(strategy: str, space: ParameterSpace) -> None:
    """The strategies mutate inputs with mutation.py, which has no sequence operator yet."""
    for param in space.parameters:
        if param.kind == "sequence":
            raise ValueError(
                f"{strategy} mutates test inputs, and parameter {param.name!r} is a sequence, "
                "which mutation.py cannot mutate yet"
            )


# -- matching results to asks -----------------------------------------------------------------------------
def input_key(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=repr)


TagT = TypeVar("TagT", bound=Hashable)


class AskLedger(Generic[TagT]):
    """What each input of the last ask was for (a tag), looked up by the input's values."""

    def __init__(self) -> None:
        self._open: dict[str, deque[TagT]] = {}

    def record(self, values: TestInput, tag: TagT) -> None:
        self._open.setdefault(input_key(values), deque()).append(tag)

    def match(self, results: Sequence[Result]) -> list[tuple[TagT, Result]]:
        """(tag, result) for every result of an open input, in the order told; others are ignored."""
        out = []
        for r in results:
            tags = self._open.get(input_key(r.values))
            if tags:
                out.append((tags.popleft(), r))
        return out

    def close(self) -> list[TagT]:
        """Forgets the open inputs (called when the next ask starts) and returns their tags: results lost."""
        lost = [t for tags in self._open.values() for t in tags]
        self._open = {}
        return lost


def usable(result: Result) -> bool:
    """A result the search can learn from: executed (not refused as invalid) with a finite margin."""
    return not result.invalid and math.isfinite(float(result.margin))


# -- behaviour vectors --------------------------------------------------------------------------------------
class BehaviourScale:
    """Raw behaviour vectors of results and their normalisation by given or learned bounds."""

    def __init__(self, strategy: str, space: ParameterSpace, bounds: np.ndarray | None) -> None:
        self.strategy = strategy
        self.space = space
        self.given = bounds
        self.bounds = bounds  # (d, 2) once given or learned
        self.dims: int | None = None
        self.from_inputs = False  # True when the oracle gives no descriptors and the input stands in

    @property
    def ready(self) -> bool:
        return self.bounds is not None

    def learned_bounds(self) -> np.ndarray:
        """The (d, 2) bounds once given or learned; asking before ``learn`` is a bug in the strategy."""
        if self.bounds is None:
            raise RuntimeError(f"{self.strategy}: behaviour bounds used before they were learned")
        return self.bounds

    def raw(self, result: Result) -> np.ndarray | None:
        """The result's behaviour vector, or None when it has non-finite values."""
        if len(result.descriptors):
            vec = np.asarray(result.descriptors, dtype=float).reshape(-1)
            from_inputs = False
        else:
            vec = self._input_vector(result.values)
            from_inputs = True
        if self.dims is None:
            self.dims, self.from_inputs = vec.size, from_inputs
            if self.given is not None and not from_inputs and self.given.shape[0] != vec.size:
                raise StrategyParamError(
                    f"{self.strategy} parameter descriptor_bounds has {self.given.shape[0]} [low, high] pair(s), "
                    f"but the oracle's behaviour descriptors have {vec.size} value(s)"
                )
        elif vec.size != self.dims or from_inputs != self.from_inputs:
            what = "the test input (no descriptors)" if from_inputs else f"{vec.size} descriptor value(s)"
            raise ValueError(
                f"{self.strategy}: a result carries {what}, but earlier results had "
                f"{self.dims} {'input' if self.from_inputs else 'descriptor'} value(s)"
            )
        return vec if np.all(np.isfinite(vec)) else None

    def learn(self, raws: Sequence[np.ndarray]) -> None:
        """Fixes the bounds: the given ones, or per-dimension min/max of ``raws`` (non-empty)."""
        if self.bounds is not None:
            return
        if self.from_inputs:  # inputs are already normalised to [0, 1]
            self.bounds = np.tile([0.0, 1.0], (self.dims or 0, 1))
            return
        data = np.asarray(raws, dtype=float)
        low, high = data.min(axis=0), data.max(axis=0)
        flat = high <= low
        low, high = np.where(flat, low - 0.5, low), np.where(flat, high + 0.5, high)
        self.bounds = np.stack([low, high], axis=1)

    def normalise(self, raw: np.ndarray) -> np.ndarray:
        bounds = self.learned_bounds()
        lo, hi = bounds[:, 0], bounds[:, 1]
        return (np.asarray(raw, dtype=float) - lo) / (hi - lo)

    def _input_vector(self, values: Mapping[str, Any]) -> np.ndarray:
        if not self.space.is_box():
            raise ValueError(
                f"{self.strategy}: the oracle gives no behaviour descriptors, and the test input of a "
                "space with non-numeric parameters cannot stand in for them"
            )
        low, high = self.space.bounds()
        x = np.array([float(values[n]) for n in self.space.names])
        width = np.where(high > low, high - low, 1.0)
        return (x - low) / width
