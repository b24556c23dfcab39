"""Validity rules across parameters (a subject's `validators:`), beyond each parameter's own domain.

A subject declares them in YAML, e.g. Taxi's "the passenger does not start at its destination":

    validators:
      - {kind: distinct, parameters: [passenger, destination]}

Each rule turns a test case into a list of violations, one sentence each (empty: valid). A rule
skips parameters the test case lacks: the domain check already names those.

A rule that governs a whole structured parameter (Donkey's track: a sequence of (command, value) records with
a grammar and a geometry) also brings ``ParameterOperators``: how to draw a valid value (rejection over the
generic uniform sample would almost never succeed), and the paper's own mutation and crossover for it. The
subject's sampling and the search strategies use those instead of the generic per-kind operators.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from common.space import ParamValue

Check = Callable[[Mapping[str, ParamValue]], list[str]]


@dataclass(frozen=True)
class ParameterOperators:
    """Valid-by-construction sampling, mutation and crossover of one parameter, owned by the rule that governs it.

    ``mutate`` may return an invalid value (callers retry, as the papers do); ``crossover`` returns two valid
    children or None when it gave up (the parents stay); ``directed`` (optional) turns a surrogate's gradient over
    the parameter's encoded features into candidate values, best first (saliency-guided mutation).
    """

    parameter: str
    sample: Callable[[np.random.Generator], ParamValue]
    mutate: Callable[[ParamValue, np.random.Generator], ParamValue]
    crossover: Callable[[ParamValue, ParamValue, np.random.Generator], tuple[ParamValue, ParamValue] | None]
    directed: Callable[[ParamValue, np.ndarray, np.random.Generator], Iterator[ParamValue]] | None = None


@dataclass(frozen=True)
class Validator:
    kind: str
    text: str  # the rule in one line, e.g. "passenger != destination" (also listed as a space constraint)
    check: Check
    operators: ParameterOperators | None = None

    def violations(self, values: Mapping[str, ParamValue]) -> list[str]:
        return self.check(values)


def _distinct(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """The named parameters take pairwise different values."""
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


def _donkey_track(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """Indago's Driving rules on a track parameter (simulator_service/donkey_track.py), with its operators.

    YAML: ``{kind: donkey_track, parameter: track, <TrackRules fields>, mutation_pairs, dy_delta, units_delta,
    crossover_tries}``; every threshold has the paper's value as default.
    """
    from simulator_service.donkey_track import TrackOperators, TrackRules, violations

    param = options.get("parameter", "track")
    if param not in names:
        raise ValueError(f"'donkey_track' names unknown parameter {param!r} (known: {', '.join(names)})")
    op_keys = {
        "mutation_pairs": "pairs",
        "dy_delta": "dy_delta",
        "units_delta": "units_delta",
        "crossover_tries": "crossover_tries",
    }
    rule_options = {k: v for k, v in options.items() if k not in ("kind", "parameter", *op_keys)}
    try:
        rules = TrackRules.from_options(rule_options)
        ops = TrackOperators(
            rules,
            **{
                op_keys[k]: (str(v) if k == "mutation_pairs" else float(v) if k == "dy_delta" else int(v))
                for k, v in options.items()
                if k in op_keys
            },
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"'donkey_track': {exc}") from None

    def check(values: Mapping[str, ParamValue]) -> list[str]:
        return [f"{param}: {v}" for v in violations(values[param], rules)] if param in values else []

    text = (
        f"{param}: starts and ends with S; DY followed by L or R; no self-intersection (road width "
        f"{rules.road_width:g} m); no turn over {rules.max_turn_deg:g} deg; at least {rules.min_curves} curves, "
        f"one of at least {rules.min_hardest_deg:g} deg"
    )
    return Validator(
        "donkey_track", text, check, ParameterOperators(param, ops.sample, ops.mutate, ops.crossover, ops.directed)
    )


def flag_names(prefix: str, names: Sequence[str]) -> list[str]:
    """The parameters prefix_0, prefix_1, ... that a `repeat:` entry declared, in index order."""
    flags: list[str] = []
    while f"{prefix}_{len(flags)}" in names:
        flags.append(f"{prefix}_{len(flags)}")
    return flags


def _spot_free(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """The spot an integer parameter names (1-based) has its 0/1 flag at 0, e.g. Parking's "the goal spot is free".

    YAML: ``{kind: spot_free, spot: goal_lane, flags: parked}``; flag ``parked_0`` is spot 1.
    """
    spot, prefix = options.get("spot"), options.get("flags")
    if not isinstance(spot, str) or spot not in names:
        raise ValueError(
            f"'spot_free' needs 'spot': the name of an integer parameter, got {spot!r} (known: {', '.join(names)})"
        )
    flags = flag_names(prefix, names) if isinstance(prefix, str) else []
    if not flags:
        raise ValueError(
            f"'spot_free' needs 'flags': the prefix of flag parameters <prefix>_0, <prefix>_1, ..., got {prefix!r}"
        )

    def check(values: Mapping[str, ParamValue]) -> list[str]:
        chosen = values.get(spot)
        if isinstance(chosen, bool) or not isinstance(chosen, int) or not 1 <= chosen <= len(flags):
            return []  # the domain check names a bad spot
        flag = flags[chosen - 1]
        if values.get(flag):
            return [
                f"{spot}={chosen} names an occupied spot ({flag}={values[flag]!r}); "
                f"the spot {spot} names must be free ({flag} = 0)"
            ]
        return []

    return Validator("spot_free", f"{prefix}_{{{spot}-1}} = 0 (the spot {spot} names is free)", check)


# kind -> factory(options from YAML, parameter names of the subject) -> Validator
VALIDATORS: dict[str, Callable[[Mapping[str, Any], Sequence[str]], Validator]] = {
    "distinct": _distinct,
    "spot_free": _spot_free,
    "donkey_track": _donkey_track,
}


def make_validator(spec: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """Builds one rule from its YAML mapping; ValueError names what is wrong."""
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"a validator must be a mapping with a 'kind', got {spec!r}")
    kind = spec["kind"]
    if kind not in VALIDATORS:
        raise ValueError(f"unknown validator kind {kind!r}; known: {', '.join(sorted(VALIDATORS))}")
    return VALIDATORS[kind](spec, names)
