"""Validity rules across parameters (a subject's `validators:`), beyond each parameter's own domain, as plug-ins
(entry-point group ``gauntlet.validators``).

A subject declares them in YAML, e.g. Taxi's "the passenger does not start at its destination":

    validators:
      - {kind: distinct, parameters: [passenger, destination]}

``kind`` names the plug-in; everything else in the entry is its options. A plug-in is a factory
``factory(options, names) -> Validator``: ``options`` are JSON-like (they travel to the generator in a protobuf
Struct, so numbers may arrive as floats: ``3`` as ``3.0``), ``names`` are the subject's parameter names. The
simulator builds its rules from its YAML with ``make_validator``; the generator builds the very same ones from
DescribeEnvironment (common/domain/rules.py). Gauntlet's generic kind (distinct) and its packs' (spot_free,
donkey_track, road_lanes) are declared in its pyproject.toml; another package adds one by declaring its own entry
point.

Each rule turns a test case into a list of violations, one sentence each (empty: valid). A rule skips parameters
the test case lacks: the domain check already names those.

A rule that governs a whole structured parameter (Donkey's track) may also declare search operators for it
(``Validator.operator``, an ``OperatorSpec`` naming a ``gauntlet.search_operators`` plug-in,
common/domain/operators.py): how to draw a valid value (rejection over the generic uniform sample would almost
never succeed), and the paper's own mutation and crossover for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from google.protobuf import json_format, struct_pb2

from common.domain.operators import OperatorSpec
from common.plugins import VALIDATORS, load_plugin, plugin_names
from common.space import ParamValue

Check = Callable[[Mapping[str, ParamValue]], list[str]]


@dataclass(frozen=True)
class Validator:
    """One built rule: its kind, its text (one line, e.g. "passenger != destination"; also listed as a space
    constraint), the check, the options it was built from, and the operators it declares for its parameter."""

    kind: str
    text: str
    check: Check
    options: Mapping[str, Any] = field(default_factory=dict)
    operator: OperatorSpec | None = None

    def violations(self, values: Mapping[str, ParamValue]) -> list[str]:
        return self.check(values)


class UnknownRuleKind(ValueError):
    """No ``gauntlet.validators`` plug-in of this name is installed here."""


def plain_options(options: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``options`` as they come out of a protobuf Struct (JSON-like; whole numbers as the protobuf runtime gives
    them back). The simulator builds its rules from this form, so both sides build from identical input."""
    struct = struct_pb2.Struct()
    try:
        struct.update(dict(options))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{what}: options must be JSON-like (strings, numbers, booleans, lists, mappings): {exc}"
        ) from None
    return json_format.MessageToDict(struct)


def make_validator(spec: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """Builds one rule from its YAML mapping ({kind, options...}); ValueError names what is wrong."""
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"a validator must be a mapping with a 'kind', got {spec!r}")
    kind = str(spec["kind"])
    options = plain_options({k: v for k, v in spec.items() if k != "kind"}, f"validator {kind!r}")
    return build_validator(kind, options, names)


def build_validator(kind: str, options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """The rule ``kind`` with ``options`` over parameters ``names``, built by its plug-in."""
    if kind not in plugin_names(VALIDATORS):
        installed = ", ".join(plugin_names(VALIDATORS)) or "none"
        raise UnknownRuleKind(f"unknown validator kind {kind!r}; installed: {installed}")
    built = load_plugin(VALIDATORS, kind)(options, names)
    if not isinstance(built, Validator):
        raise ValueError(f"validator plug-in {kind!r} must return a Validator, got {built!r}")
    return dataclasses.replace(built, kind=kind, options=dict(options))


# -- Gauntlet's own rule kinds (entry points in pyproject.toml) --------------------------------------------------
def distinct(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """The named parameters take pairwise different values. YAML: ``{kind: distinct, parameters: [a, b, ...]}``."""
    params = options.get("parameters")
    if not isinstance(params, list) or len(params) < 2 or not all(isinstance(p, str) for p in params):
        raise ValueError(f"'distinct' needs 'parameters': a list of at least two parameter names, got {params!r}")
    unknown = [p for p in params if p not in names]
    if unknown:
        raise ValueError(f"'distinct' names unknown parameter(s) {', '.join(unknown)} (known: {', '.join(names)})")

    def check(values: Mapping[str, ParamValue]) -> list[str]:
        return [
            f"{a}={values[a]!r} and {b}={values[b]!r} must differ ({a} != {b})"
            for a, b in combinations(params, 2)
            if a in values and b in values and values[a] == values[b]
        ]

    return Validator(
        "distinct", " != ".join(params) if len(params) == 2 else f"all different: {', '.join(params)}", check
    )


def flag_names(prefix: str, names: Sequence[str]) -> list[str]:
    """The parameters prefix_0, prefix_1, ... that a `repeat:` entry declared, in index order."""
    flags: list[str] = []
    while f"{prefix}_{len(flags)}" in names:
        flags.append(f"{prefix}_{len(flags)}")
    return flags
