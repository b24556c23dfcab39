"""The ask/tell interface every test-generation strategy implements, and the strategy registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from common.space import ParameterSpace, ParamValue

TestInput = dict[str, ParamValue]


@dataclass(frozen=True)
class Result:
    """What a strategy learns about one executed test case."""

    values: TestInput
    failed: bool
    margin: float
    descriptors: tuple[float, ...] = ()
    invalid: bool = False


class Strategy(Protocol):
    def ask(self, n: int) -> list[TestInput]:
        """Up to n new test inputs; an empty list means the strategy has nothing left to propose."""

    def tell(self, results: Sequence[Result]) -> None:
        """Results of the inputs of the last ask, in the same order."""


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    description: str
    source: str
    defaults: Mapping[str, Any]
    factory: Callable[..., Strategy]


class StrategyParamError(ValueError):
    """A strategy parameter that is unknown or out of range; the message names it."""


_REGISTRY: dict[str, StrategyInfo] = {}


def register_strategy(
    name: str, description: str, source: str = "", **defaults: Any
) -> Callable[[Callable[..., Strategy]], Callable[..., Strategy]]:
    """Class decorator: the class is built as cls(space, rng, **params) with params over `defaults`."""

    def wrap(factory: Callable[..., Strategy]) -> Callable[..., Strategy]:
        _REGISTRY[name] = StrategyInfo(name, description, source, dict(defaults), factory)
        return factory

    return wrap


def strategies() -> dict[str, StrategyInfo]:
    from generator_service.strategies import (  # noqa: F401 - registers on import
        fuzzing,
        indago,  # noqa: F401 - registers on import
        map_elites,
        novelty_search,
        prt,
        random_testing,
    )

    return dict(_REGISTRY)


def make_strategy(name: str, space: ParameterSpace, seed: int, params: Mapping[str, Any] | None = None) -> Strategy:
    known = strategies()
    if name not in known:
        raise KeyError(f"unknown strategy {name!r}; known strategies: {', '.join(sorted(known))}")
    info = known[name]
    params = dict(params or {})
    unknown = sorted(set(params) - set(info.defaults))
    if unknown:
        allowed = ", ".join(sorted(info.defaults)) or "none"
        raise StrategyParamError(
            f"strategy {name!r} has no parameter(s) {', '.join(unknown)}; its parameters: {allowed}"
        )
    return info.factory(space, np.random.default_rng(seed), **{**info.defaults, **params})
