"""Search operators a subject brings for one of its parameters, as plug-ins (entry-point group
``gauntlet.search_operators``).

A parameter with structure (Donkey's track: a sequence of (command, value) records with a grammar and a geometry)
cannot be searched with the generic per-kind operators: a uniform draw is almost never valid, and a generic
mutation breaks the grammar. Its subject therefore declares an operator kind for it; strategies that honour
operators (Indago) sample, mutate and cross over that parameter with it instead.

A plug-in is a factory ``factory(parameter, options, names) -> ParameterOperators``: ``parameter`` is the parameter
it owns, ``options`` the JSON-like options the subject declared (numbers may arrive as floats: they travel in a
protobuf Struct), ``names`` every parameter name of the subject. Gauntlet's own (``donkey_track``, donkey pack) is
declared in its pyproject.toml; another package declares its own under the same group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.plugins import SEARCH_OPERATORS, load_plugin, plugin_names
from common.space import ParamValue


@dataclass(frozen=True)
class OperatorSpec:
    """The declaration of one parameter's operators: which parameter, which plug-in, with which options."""

    parameter: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParameterOperators:
    """Valid-by-construction sampling, mutation and crossover of one parameter.

    ``mutate`` may return an invalid value (callers retry, as the papers do); ``crossover`` returns two valid
    children or None when it gave up (the parents stay); ``directed`` (optional) turns a surrogate's gradient over
    the parameter's encoded features into candidate values, best first (saliency-guided mutation).
    """

    parameter: str
    sample: Callable[[np.random.Generator], ParamValue]
    mutate: Callable[[ParamValue, np.random.Generator], ParamValue]
    crossover: Callable[[ParamValue, ParamValue, np.random.Generator], tuple[ParamValue, ParamValue] | None]
    directed: Callable[[ParamValue, np.ndarray, np.random.Generator], Iterator[ParamValue]] | None = None


class UnknownOperatorKind(ValueError):
    """No ``gauntlet.search_operators`` plug-in of this name is installed here."""


def make_operators(spec: OperatorSpec, names: Sequence[str]) -> ParameterOperators:
    """The operators ``spec`` declares, built by its plug-in; ValueError names what is wrong."""
    if spec.kind not in plugin_names(SEARCH_OPERATORS):
        installed = ", ".join(plugin_names(SEARCH_OPERATORS)) or "none"
        raise UnknownOperatorKind(
            f"unknown search operator kind {spec.kind!r} (parameter {spec.parameter!r}); installed: {installed}"
        )
    if spec.parameter not in names:
        raise ValueError(
            f"search operator {spec.kind!r} names unknown parameter {spec.parameter!r} (known: {', '.join(names)})"
        )
    built = load_plugin(SEARCH_OPERATORS, spec.kind)(spec.parameter, spec.options, names)
    if not isinstance(built, ParameterOperators) or built.parameter != spec.parameter:
        raise ValueError(
            f"search operator plug-in {spec.kind!r} must return ParameterOperators for {spec.parameter!r}, "
            f"got {built!r}"
        )
    return built
