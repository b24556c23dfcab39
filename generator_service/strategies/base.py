"""The ask/tell interface every test-generation strategy implements, and how installed strategies are made.

A strategy is a plug-in in the entry-point group ``gauntlet.strategies`` (common/plugins.py) that names a class
(or any callable) with:

* ``Params``: its parameter schema, a ``StrategyParams`` model (params.py): the one place its parameters'
  defaults, types and ranges are declared;
* ``source``: the paper it comes from, by title and section ("" for none);
* a docstring whose first paragraph describes it;
* a call ``Factory(space, rng, params, **context)`` returning an object with ``ask``/``tell`` (``Strategy``).

``ask`` returns typed test cases (common/test_case.py: values and an optional action trace). A strategy that only
proposes parameter values may return them as plain dicts (``TestInput``); the campaign reads such a dict as values
only (``as_test_case``), so no key of it is reserved.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from common.plugins import STRATEGIES, load_plugin, loadable, plugin_names, plugin_package
from common.space import ParameterSpace, ParamValue
from common.test_case import ActionTrace, TestCase
from generator_service.strategies.params import (
    ParameterDoc,
    StrategyParamError,
    StrategyParams,
    defaults,
    describe,
    validate,
)

__all__ = [
    "Asked",
    "Result",
    "Strategy",
    "StrategyInfo",
    "StrategyParamError",
    "TestCase",
    "TestInput",
    "as_test_case",
    "make_strategy",
    "strategies",
]

TestInput = dict[str, ParamValue]  # parameter values only
Asked = TestCase | Mapping[str, ParamValue]  # what ask() may return for one test: a test case, or values only


def require_numeric_box(space: ParameterSpace, strategy: str, why: str) -> None:
    """ValueError naming the first parameter that is not a real or integer range: the strategies that move points in
    a box (SBX, a diffusion model, frontier pairs, PRT's mapping) have no way to move a categorical one."""
    for p in space.parameters:
        if p.kind not in ("real", "integer"):
            raise ValueError(f"{strategy} {why}; parameter {p.name!r} is {p.kind} ({p.domain_text()})")


def as_test_case(asked: Asked) -> TestCase:
    """One asked test as a TestCase: a mapping is parameter values only (no key of it is reserved)."""
    return asked if isinstance(asked, TestCase) else TestCase(dict(asked))


@dataclass(frozen=True)
class Result:
    """What a strategy learns about one executed test case (``values`` and ``action_trace`` are the test case's)."""

    values: TestInput
    failed: bool
    margin: float
    descriptors: tuple[float, ...] = ()
    invalid: bool = False
    action_trace: ActionTrace | None = None

    @property
    def test_case(self) -> TestCase:
        return TestCase(self.values, self.action_trace)


class Strategy(Protocol):
    def ask(self, n: int) -> Sequence[Asked]:
        """Up to n new test cases; an empty list means the strategy has nothing left to propose."""

    def tell(self, results: Sequence[Result]) -> None:
        """Results of the inputs of the last ask, in the same order."""


@dataclass(frozen=True)
class StrategyInfo:
    """An installed strategy plug-in, as listed: what it is, where it comes from and its parameters."""

    name: str
    description: str
    source: str
    package: str
    schema: type[StrategyParams]
    factory: Callable[..., Strategy]

    @property
    def defaults(self) -> dict[str, Any]:
        return defaults(self.schema)

    @property
    def parameters(self) -> tuple[ParameterDoc, ...]:
        return describe(self.schema)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of this strategy's parameters, from the model that validates them."""
        return self.schema.model_json_schema()


def strategy_info(name: str) -> StrategyInfo:
    """The installed strategy ``name`` (entry-point group gauntlet.strategies); KeyError naming those installed."""
    try:
        factory = load_plugin(STRATEGIES, name)
    except KeyError:
        raise KeyError(
            f"unknown strategy {name!r}; installed strategies: {', '.join(plugin_names(STRATEGIES))}"
        ) from None
    doc = inspect.getdoc(factory) or ""
    return StrategyInfo(
        name=name,
        description=" ".join(doc.split("\n\n")[0].split()),  # the docstring's first paragraph, on one line
        source=str(getattr(factory, "source", "")),
        package=plugin_package(STRATEGIES, name),
        schema=getattr(factory, "Params", StrategyParams),  # no Params: no parameters
        factory=factory,
    )


def strategies() -> dict[str, StrategyInfo]:
    """Every installed strategy by name (this imports each plug-in's module, not the libraries it uses lazily)."""
    return loadable(STRATEGIES, strategy_info)


def make_strategy(
    name: str, space: ParameterSpace, seed: int, params: Mapping[str, Any] | None = None, **context: Any
) -> Strategy:
    """The strategy ``name`` over ``space``: ``factory(space, rng, validated_params, **context)``.

    ``params`` are the user's (a campaign's ``strategy_params``), checked against the strategy's schema. ``context``
    is what the caller knows beside them (e.g. the subject's validity rules); each factory receives only the
    context keywords its signature names, so a strategy that needs none is called without them.
    """
    info = strategy_info(name)
    checked = validate(name, info.schema, params or {})
    return info.factory(space, np.random.default_rng(seed), checked, **accepted_context(info.factory, context))


def accepted_context(factory: Callable[..., Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``context`` that ``factory`` takes as keywords (all of them if it takes ``**kwargs``)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a callable without an introspectable signature: give it no context
        return {}
    taken = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken):
        return dict(context)
    names = {
        p.name for p in taken if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    return {key: value for key, value in context.items() if key in names}
