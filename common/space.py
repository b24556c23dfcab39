"""Typed parameter spaces: the domain a subject's test cases are drawn from.

A space is declared in data (a subject's YAML) and travels as
gauntlet.v1.ParameterSpace. Values are plain Python: float for real, int for
integer / integer_set, str for categorical, list of dicts for sequences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from common.generated.gauntlet.v1 import common_pb2

Kind = Literal["real", "integer", "categorical", "integer_set", "sequence"]
HintKindName = Literal["boundary", "centre", "value"]
KINDS: tuple[str, ...] = ("real", "integer", "categorical", "integer_set", "sequence")
ParamValue = Any  # float | int | str | list[dict[str, ParamValue]]

_HINT_TO_PROTO: dict[HintKindName, common_pb2.HintKind.ValueType] = {
    "boundary": common_pb2.HINT_KIND_BOUNDARY,
    "centre": common_pb2.HINT_KIND_CENTRE,
    "value": common_pb2.HINT_KIND_VALUE,
}
_HINT_FROM_PROTO = {v: k for k, v in _HINT_TO_PROTO.items()}
# The hints a subject's YAML names by a bare word; a value hint is a mapping {value: <number>}.
_WORD_HINTS: dict[str, HintKindName] = {"boundary": "boundary", "centre": "centre"}


class SpaceError(ValueError):
    """A parameter-space declaration or a value that does not fit it; the message names the field."""


@dataclass(frozen=True)
class FailureHint:
    """Where the task is expected to be hardest (PRT's task-induced failure insight)."""

    kind: HintKindName
    value: float | None = None


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: Kind
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    values: tuple[int, ...] = ()
    fields: tuple[Parameter, ...] = ()
    min_length: int = 0
    max_length: int = 0
    description: str = ""
    unit: str = ""
    hints: tuple[FailureHint, ...] = ()
    nominal: float | None = None  # the subject's nominal value (real and integer only); None: the range's centre

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpaceError(f"parameter {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind in ("real", "integer"):
            if self.low is None or self.high is None or not self.low <= self.high:
                raise SpaceError(f"parameter {self.name!r}: needs low <= high, got low={self.low} high={self.high}")
        if self.nominal is not None:
            self._check_nominal(self.nominal)
        if self.kind == "categorical" and not self.choices:
            raise SpaceError(f"parameter {self.name!r}: a categorical parameter needs at least one choice")
        if self.kind == "integer_set" and not self.values:
            raise SpaceError(f"parameter {self.name!r}: an integer_set parameter needs at least one value")
        if self.kind == "sequence" and (not self.fields or self.max_length < max(self.min_length, 1)):
            raise SpaceError(f"parameter {self.name!r}: a sequence needs fields and 1 <= max_length >= min_length")

    def _check_nominal(self, value: float) -> None:
        where = f"parameter {self.name!r}: nominal"
        if self.kind not in ("real", "integer"):
            raise SpaceError(f"{where} is only for real and integer parameters, not {self.kind}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpaceError(f"{where} must be a finite number, got {value!r}")
        low, high = self.bounds
        if not low <= value <= high or (self.kind == "integer" and value != int(value)):
            raise SpaceError(f"{where}={value!r} must lie in its domain {self.domain_text()}")

    @property
    def nominal_value(self) -> float:
        """The nominal value of a real or integer parameter: the declared one, else the centre of its range
        (rounded for an integer range)."""
        if self.nominal is not None:
            return float(self.nominal)
        low, high = self.bounds
        centre = (low + high) / 2
        return float(round(centre)) if self.kind == "integer" else centre

    # -- domain ------------------------------------------------------------------------------
    @property
    def bounds(self) -> tuple[float, float]:
        """(low, high) of a real or integer parameter (__post_init__ guarantees both for those kinds)."""
        if self.low is None or self.high is None:
            raise SpaceError(f"parameter {self.name!r}: a {self.kind} parameter has no low/high bounds")
        return self.low, self.high

    def domain_text(self) -> str:
        if self.kind == "real":
            return f"[{self.low:g}, {self.high:g}]"
        if self.kind == "integer":
            low, high = self.bounds
            return f"integers in [{int(low)}, {int(high)}]"
        if self.kind == "categorical":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "integer_set":
            return "one of " + ", ".join(str(v) for v in self.values)
        return f"{self.min_length} to {self.max_length} records of ({', '.join(f.name for f in self.fields)})"

    def violation(self, value: ParamValue, where: str = "") -> str | None:
        """None when `value` lies in the domain, else one sentence naming the parameter and its domain."""
        label = f"{where}{self.name}"
        if self.kind == "real":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"{label} must be a finite number in {self.domain_text()}, got {value!r}"
            low, high = self.bounds
            if not low <= value <= high:
                return f"{label}={value:g} is outside its domain {self.domain_text()}"
            return None
        if self.kind in ("integer", "integer_set"):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                return f"{label} must be an integer ({self.domain_text()}), got {value!r}"
            if self.kind == "integer":
                low, high = self.bounds
                ok = low <= value <= high
            else:
                ok = int(value) in self.values
            return None if ok else f"{label}={value} is outside its domain {self.domain_text()}"
        if self.kind == "categorical":
            return None if value in self.choices else f"{label}={value!r} is not {self.domain_text()}"
        if not isinstance(value, list) or not self.min_length <= len(value) <= self.max_length:
            n = len(value) if isinstance(value, list) else type(value).__name__
            return f"{label} must be a list of {self.domain_text()}, got {n}"
        for i, record in enumerate(value):
            if not isinstance(record, Mapping) or set(record) != {f.name for f in self.fields}:
                return f"{label}[{i}] must have exactly the fields {', '.join(f.name for f in self.fields)}"
            for f in self.fields:
                problem = f.violation(record[f.name], where=f"{label}[{i}].")
                if problem:
                    return problem
        return None

    def sample(self, rng: np.random.Generator) -> ParamValue:
        """A uniform draw from the domain."""
        if self.kind == "real":
            return float(rng.uniform(*self.bounds))
        if self.kind == "integer":
            low, high = self.bounds
            return int(rng.integers(int(low), int(high) + 1))
        if self.kind == "integer_set":
            return int(self.values[int(rng.integers(len(self.values)))])
        if self.kind == "categorical":
            return self.choices[int(rng.integers(len(self.choices)))]
        length = int(rng.integers(self.min_length, self.max_length + 1))
        return [{f.name: f.sample(rng) for f in self.fields} for _ in range(length)]

    # -- wire --------------------------------------------------------------------------------
    def to_proto(self) -> common_pb2.Parameter:
        msg = common_pb2.Parameter(name=self.name, description=self.description, unit=self.unit)
        if self.kind == "real":
            low, high = self.bounds
            msg.real.CopyFrom(common_pb2.RealRange(low=low, high=high))
        elif self.kind == "integer":
            low, high = self.bounds
            msg.integer.CopyFrom(common_pb2.IntegerRange(low=int(low), high=int(high)))
        elif self.kind == "categorical":
            msg.categorical.CopyFrom(common_pb2.Categorical(choices=list(self.choices)))
        elif self.kind == "integer_set":
            msg.integer_set.CopyFrom(common_pb2.IntegerSet(values=list(self.values)))
        else:
            msg.sequence.CopyFrom(
                common_pb2.RecordSequence(
                    fields=[f.to_proto() for f in self.fields], min_length=self.min_length, max_length=self.max_length
                )
            )
        for hint in self.hints:
            msg.failure_hints.add(kind=_HINT_TO_PROTO[hint.kind], value=hint.value or 0.0)
        if self.nominal is not None:
            msg.nominal = float(self.nominal)
        return msg

    @staticmethod
    def from_proto(msg: common_pb2.Parameter) -> Parameter:
        which = msg.WhichOneof("domain")
        common: dict[str, Any] = dict(
            name=msg.name,
            description=msg.description,
            unit=msg.unit,
            hints=tuple(
                FailureHint(_HINT_FROM_PROTO[h.kind], h.value if h.kind == common_pb2.HINT_KIND_VALUE else None)
                for h in msg.failure_hints
            ),
            nominal=msg.nominal if msg.HasField("nominal") else None,
        )
        if which == "real":
            return Parameter(kind="real", low=msg.real.low, high=msg.real.high, **common)
        if which == "integer":
            return Parameter(kind="integer", low=msg.integer.low, high=msg.integer.high, **common)
        if which == "categorical":
            return Parameter(kind="categorical", choices=tuple(msg.categorical.choices), **common)
        if which == "integer_set":
            return Parameter(kind="integer_set", values=tuple(msg.integer_set.values), **common)
        if which == "sequence":
            seq = msg.sequence
            return Parameter(
                kind="sequence",
                fields=tuple(Parameter.from_proto(f) for f in seq.fields),
                min_length=seq.min_length,
                max_length=seq.max_length,
                **common,
            )
        raise SpaceError(f"parameter {msg.name!r} has no domain")

    def value_to_proto(self, value: ParamValue) -> common_pb2.Value:
        if self.kind == "real":
            return common_pb2.Value(real=float(value))
        if self.kind in ("integer", "integer_set"):
            return common_pb2.Value(integer=int(value))
        if self.kind == "categorical":
            return common_pb2.Value(category=str(value))
        records = common_pb2.RecordList()
        for record in value:
            rec = records.records.add()
            for f in self.fields:
                rec.fields[f.name].CopyFrom(f.value_to_proto(record[f.name]))
        return common_pb2.Value(records=records)


def value_from_proto(msg: common_pb2.Value) -> ParamValue:
    """Plain Python value of a Value message (the parameter kind is implied by the set field)."""
    which = msg.WhichOneof("kind")
    if which == "real":
        return float(msg.real)
    if which == "integer":
        return int(msg.integer)
    if which == "category":
        return str(msg.category)
    if which == "records":
        return [{k: value_from_proto(v) for k, v in r.fields.items()} for r in msg.records.records]
    return None


@dataclass(frozen=True)
class ParameterSpace:
    parameters: tuple[Parameter, ...]
    constraints: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise SpaceError(f"parameter names must be unique, got {names}")

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def __getitem__(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def violations(self, values: Mapping[str, ParamValue]) -> list[str]:
        """Per-parameter domain violations; an empty list means the values fit the space."""
        known = {p.name for p in self.parameters}  # once: this runs for every candidate of a search
        problems = [f"unknown parameter {k!r} (known: {', '.join(self.names)})" for k in values if k not in known]
        for p in self.parameters:
            if p.name not in values:
                problems.append(f"missing parameter {p.name!r} ({p.domain_text()})")
            else:
                problem = p.violation(values[p.name])
                if problem:
                    problems.append(problem)
        return problems

    def sample(self, rng: np.random.Generator) -> dict[str, ParamValue]:
        return {p.name: p.sample(rng) for p in self.parameters}

    def is_box(self) -> bool:
        """True when every parameter is a real or integer range (a hypercube, as PRT needs)."""
        return all(p.kind in ("real", "integer") for p in self.parameters)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.is_box():
            raise SpaceError("bounds() needs a space of real/integer ranges only")
        return (
            np.array([p.low for p in self.parameters], dtype=float),
            np.array([p.high for p in self.parameters], dtype=float),
        )

    # -- wire --------------------------------------------------------------------------------
    def to_proto(self) -> common_pb2.ParameterSpace:
        return common_pb2.ParameterSpace(
            parameters=[p.to_proto() for p in self.parameters], constraints=list(self.constraints)
        )

    @staticmethod
    def from_proto(msg: common_pb2.ParameterSpace) -> ParameterSpace:
        return ParameterSpace(tuple(Parameter.from_proto(p) for p in msg.parameters), tuple(msg.constraints))

    def test_case_to_proto(self, case_id: str, values: Mapping[str, ParamValue]) -> common_pb2.TestCase:
        msg = common_pb2.TestCase(id=case_id)
        for p in self.parameters:
            msg.values[p.name].CopyFrom(p.value_to_proto(values[p.name]))
        return msg

    # -- data --------------------------------------------------------------------------------
    @staticmethod
    def from_config(entries: Sequence[Mapping[str, Any]], constraints: Sequence[str] = ()) -> ParameterSpace:
        """Builds a space from YAML-style entries, e.g. {name: x, kind: real, low: -1, high: 1, hints: [boundary]}."""
        params: list[Parameter] = []
        for entry in entries:
            count = int(entry.get("repeat", 1))
            if count == 1:
                params.append(_parameter_from_config(entry))
                continue
            # `repeat: N` declares N identical parameters name_0 .. name_{N-1} (e.g. Humanoid's 47 offsets)
            for i in range(count):
                params.append(_parameter_from_config({**entry, "name": f"{entry['name']}_{i}", "repeat": 1}))
        return ParameterSpace(tuple(params), tuple(constraints))


def case_values(msg: common_pb2.TestCase) -> dict[str, ParamValue]:
    return {k: value_from_proto(v) for k, v in msg.values.items()}


def _parameter_from_config(entry: Mapping[str, Any]) -> Parameter:
    allowed = {
        "name",
        "kind",
        "low",
        "high",
        "choices",
        "values",
        "fields",
        "min_length",
        "max_length",
        "description",
        "unit",
        "hints",
        "repeat",
        "nominal",
    }
    unknown = set(entry) - allowed
    name = entry.get("name", "?")
    if unknown:
        raise SpaceError(f"parameter {name!r}: unknown keys {sorted(unknown)} (allowed: {sorted(allowed)})")
    hints = []
    for h in entry.get("hints", []) or []:
        if isinstance(h, str) and h in _WORD_HINTS:
            hints.append(FailureHint(_WORD_HINTS[h]))
        elif isinstance(h, Mapping) and "value" in h:
            hints.append(FailureHint("value", float(h["value"])))
        else:
            raise SpaceError(f"parameter {name!r}: hint {h!r} must be 'boundary', 'centre' or {{value: <number>}}")
    try:
        return Parameter(
            name=str(entry["name"]),
            kind=entry.get("kind", "real"),
            low=_number(entry.get("low")),
            high=_number(entry.get("high")),
            choices=tuple(str(c) for c in entry.get("choices", ())),
            values=tuple(int(v) for v in entry.get("values", ())),
            fields=tuple(_parameter_from_config(f) for f in entry.get("fields", ())),
            min_length=int(entry.get("min_length", 0)),
            max_length=int(entry.get("max_length", 0)),
            description=str(entry.get("description", "")),
            unit=str(entry.get("unit", "")),
            hints=tuple(hints),
            nominal=_nominal(entry.get("nominal"), name),
        )
    except KeyError as exc:
        raise SpaceError(f"a parameter entry lacks {exc.args[0]!r}: {dict(entry)}") from None


def _nominal(value: Any, name: str) -> float | None:
    """A declared nominal value: a number (or an expression with pi, as low/high take), else refused naming it."""
    if value is None:
        return None
    try:
        number = _number(value)
    except (SpaceError, ArithmeticError, NameError, SyntaxError, TypeError, ValueError):
        number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise SpaceError(f"parameter {name!r}: nominal must be a number, got {value!r}")
    return float(number)


def _number(value: Any) -> float | None:
    """Accepts numbers and simple expressions with pi (e.g. 'pi/60') so YAML can state the papers' domains exactly."""
    if value is None or isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    if not set(text) <= set("0123456789.+-*/e pi()"):
        raise SpaceError(f"bound {value!r} is not a number or an expression of pi")
    # eval is safe here: the characters were checked above and no builtins are reachable.
    return float(eval(text, {"__builtins__": {}}, {"pi": math.pi}))
