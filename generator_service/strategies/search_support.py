"""Helpers shared by the feedback-driven strategies (MAP-Elites, Novelty Search, the fuzzers).

* parameter checks that raise ``StrategyParamError`` naming the strategy and the parameter;
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
from typing import Any

import numpy as np

from common.space import ParameterSpace
from generator_service.strategies.base import Result, StrategyParamError, TestInput

# no archive grid may have more cells than this (pyribs allocates every cell up front: ~50 bytes per cell)
MAX_GRID_CELLS = 1_000_000


# -- parameter checks -------------------------------------------------------------------------------------
def as_int(value: Any) -> int | None:
    """An integer, or an integral float (parameters sent as a protobuf Struct arrive as floats); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def check_int(strategy: str, name: str, value: Any, minimum: int) -> int:
    v = as_int(value)
    if v is None or v < minimum:
        raise StrategyParamError(f"{strategy} parameter {name} must be an integer >= {minimum}, got {value!r}")
    return v


def check_float(
    strategy: str, name: str, value: Any, low: float, high: float = math.inf, low_open: bool = False
) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.floating, np.integer))
    if ok:
        v = float(value)
        ok = math.isfinite(v) and (v > low if low_open else v >= low) and v <= high
    if not ok:
        where = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise StrategyParamError(f"{strategy} parameter {name} must be a finite number {where}, got {value!r}")
    return float(value)


def check_integer_mutation(strategy: str, operator: Any, p: Any) -> tuple[str, float]:
    """The integer operator of mutation.py ("shift" or "nearby") and the per-parameter probability p."""
    from generator_service.strategies.mutation import INTEGER_OPERATORS

    if operator not in INTEGER_OPERATORS:
        raise StrategyParamError(
            f"{strategy} parameter integer_mutation must be one of {', '.join(INTEGER_OPERATORS)}, got {operator!r}"
        )
    return str(operator), check_float(strategy, "mutation_p", p, 0.0, 1.0)


def check_bounds(strategy: str, value: Any, name: str = "descriptor_bounds") -> np.ndarray | None:
    """None, or a (d, 2) array of finite [low, high] pairs with low < high."""
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        arr = np.empty(0)
    if (
        arr.ndim != 2
        or arr.shape[0] < 1
        or arr.shape[1] != 2
        or not np.all(np.isfinite(arr))
        or not np.all(arr[:, 0] < arr[:, 1])
    ):
        raise StrategyParamError(
            f"{strategy} parameter {name} must be a list of [low, high] pairs with "
            f"low < high, one per behaviour descriptor, got {value!r}"
        )
    return arr


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


class AskLedger:
    """What each input of the last ask was for (a tag), looked up by the input's values."""

    def __init__(self) -> None:
        self._open: dict[str, deque[Hashable]] = {}

    def record(self, values: TestInput, tag: Hashable) -> None:
        self._open.setdefault(input_key(values), deque()).append(tag)

    def match(self, results: Sequence[Result]) -> list[tuple[Hashable, Result]]:
        """(tag, result) for every result of an open input, in the order told; others are ignored."""
        out = []
        for r in results:
            tags = self._open.get(input_key(r.values))
            if tags:
                out.append((tags.popleft(), r))
        return out

    def close(self) -> list[Hashable]:
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
        lo, hi = self.bounds[:, 0], self.bounds[:, 1]  # type: ignore[index]
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
