"""Validity rules across parameters (a subject's `validators:`), beyond each parameter's own domain.

A subject declares them in YAML, e.g. Taxi's "the passenger does not start at its destination":

    validators:
      - {kind: distinct, parameters: [passenger, destination]}

Each rule turns a test case into a list of violations, one sentence each (empty: valid). A rule
skips parameters the test case lacks: the domain check already names those.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Callable, Mapping, Sequence

from common.space import ParamValue

Check = Callable[[Mapping[str, ParamValue]], list[str]]


@dataclass(frozen=True)
class Validator:
    kind: str
    text: str  # the rule in one line, e.g. "passenger != destination" (also listed as a space constraint)
    check: Check

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
        return [f"{a}={values[a]!r} and {b}={values[b]!r} must differ ({a} != {b})"
                for a, b in combinations(params, 2) if a in values and b in values and values[a] == values[b]]

    return Validator("distinct", " != ".join(params) if len(params) == 2 else f"all different: {', '.join(params)}",
                     check)


# kind -> factory(options from YAML, parameter names of the subject) -> Validator
VALIDATORS: dict[str, Callable[[Mapping[str, Any], Sequence[str]], Validator]] = {
    "distinct": _distinct,
}


def make_validator(spec: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """Builds one rule from its YAML mapping; ValueError names what is wrong."""
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"a validator must be a mapping with a 'kind', got {spec!r}")
    kind = spec["kind"]
    if kind not in VALIDATORS:
        raise ValueError(f"unknown validator kind {kind!r}; known: {', '.join(sorted(VALIDATORS))}")
    return VALIDATORS[kind](spec, names)
