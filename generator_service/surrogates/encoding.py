"""Test inputs <-> the feature vectors a surrogate reads, and feature attributions -> parameter moves.

Encoding, one block of features per parameter, in the order of the space:

* ``real`` / ``integer``: one feature, min-max scaled into [0, 1] by the parameter's domain (a parameter with
  low == high encodes as 0). Domain scaling, not data scaling: the surrogate then reads any valid input in
  the same units, whatever the training data covered.
* ``categorical`` / ``integer_set``: a one-hot block, one feature per choice in domain order (Indago encodes
  Parking's parked-car lanes this way).
* ``sequence`` of fixed length L (min_length == max_length) whose fields are numbers or categories: one
  feature per field and record, field-major (all records' first field, then all records' second field, ...).
  A number field is min-max scaled by its domain as above; a categorical field encodes its choice's id (index in
  the domain: Donkey's S, DY, R, L = 0..3) scaled the same way, id / (n_choices - 1). Donkey's track of 12
  (command, value) records is thus Indago's 24 dims: 12 command ids, then 12 values. Variable-length sequences
  and other field kinds are refused with a ValueError naming the parameter. ``parameter_moves`` skips sequence
  blocks (a record field is no parameter of its own): the subject's operator for the sequence turns the block's
  attribution into moves (search.Mutator.directed; Donkey: subjects/donkey/track.py).

``decode`` inverts ``encode`` (numbers are unscaled, clipped into the domain, integers rounded; a one-hot block
decodes to its largest entry), so ``decode(encode(v)) == v`` for every valid input up to float rounding.

``parameter_moves`` maps a feature attribution (the gradient of the failure score with respect to the
features, as captum's Saliency computes it) back to the parameters, which is what saliency mutation needs:

* a number's attribution is its feature's gradient g: score |g|, direction sign(g) (+1 = increase);
* a one-hot block's attribution is the first-order gain of switching from the current choice to another,
  g[c] - g[current]; the best c is the target and the gain (if positive) the score.

Moves that cannot be made (a number at the bound it would move past, a discrete parameter with no choice
that gains) are left out; the rest come sorted by score, largest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.space import Parameter, ParameterSpace, ParamValue

NUMERIC = ("real", "integer")
DISCRETE = ("categorical", "integer_set")


@dataclass(frozen=True)
class Block:
    """The features of one parameter: columns [start, stop) of the encoded vector."""

    param: Parameter
    start: int
    stop: int

    @property
    def domain(self) -> tuple[ParamValue, ...]:
        return self.param.choices if self.param.kind == "categorical" else self.param.values


@dataclass(frozen=True)
class Move:
    """One way to change a parameter that the attribution says raises the failure score."""

    name: str
    score: float
    direction: int = 0  # numbers: +1 increase, -1 decrease
    target: ParamValue | None = None  # discrete kinds: the value to switch to


class Encoder:
    def __init__(self, space: ParameterSpace) -> None:
        blocks: list[Block] = []
        start = 0
        for p in space.parameters:
            if p.kind in NUMERIC:
                width = 1
            elif p.kind in DISCRETE:
                width = len(p.choices if p.kind == "categorical" else p.values)
            elif p.kind == "sequence" and _encodable_sequence(p):
                width = p.max_length * len(p.fields)
            else:
                raise ValueError(
                    f"cannot encode parameter {p.name!r}: kind {p.kind!r} has no feature encoding "
                    "(surrogates support real, integer, categorical and integer_set parameters, and "
                    "fixed-length sequences of real, integer or categorical fields)"
                )
            blocks.append(Block(p, start, start + width))
            start += width
        self.space = space
        self.blocks = tuple(blocks)
        self.n_features = start

    # -- names -------------------------------------------------------------------------------------
    @property
    def feature_names(self) -> list[str]:
        names: list[str] = []
        for b in self.blocks:
            if b.param.kind in NUMERIC:
                names.append(b.param.name)
            elif b.param.kind == "sequence":
                names.extend(f"{b.param.name}[{i}].{f.name}" for f in b.param.fields for i in range(b.param.max_length))
            else:
                names.extend(f"{b.param.name}={v}" for v in b.domain)
        return names

    # -- encode / decode ---------------------------------------------------------------------------
    def encode(self, values: Mapping[str, ParamValue]) -> np.ndarray:
        out = np.zeros(self.n_features, dtype=np.float64)
        self._fill(out, values)
        return out

    def encode_many(self, rows: Sequence[Mapping[str, ParamValue]]) -> np.ndarray:
        out = np.zeros((len(rows), self.n_features), dtype=np.float64)
        for i, values in enumerate(rows):
            self._fill(out[i], values)
        return out

    def _fill(self, out: np.ndarray, values: Mapping[str, ParamValue]) -> None:
        for b in self.blocks:
            p = b.param
            try:
                v = values[p.name]
            except KeyError:
                raise ValueError(f"cannot encode: parameter {p.name!r} is missing from the test input") from None
            if p.kind in NUMERIC:
                low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
                out[b.start] = 0.0 if high == low else (float(v) - low) / (high - low)
            elif p.kind == "sequence":
                _fill_sequence(out[b.start : b.stop], p, v)
            else:
                try:
                    out[b.start + b.domain.index(v)] = 1.0
                except ValueError:
                    raise ValueError(f"cannot encode: {p.name}={v!r} is not one of {list(b.domain)}") from None

    def decode(self, vector: Sequence[float] | np.ndarray) -> dict[str, ParamValue]:
        vec = np.asarray(vector, dtype=np.float64)
        if vec.shape != (self.n_features,):
            raise ValueError(f"cannot decode: expected {self.n_features} features, got shape {vec.shape}")
        out: dict[str, ParamValue] = {}
        for b in self.blocks:
            p = b.param
            if p.kind in NUMERIC:
                low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
                x = low + float(np.clip(vec[b.start], 0.0, 1.0)) * (high - low)
                out[p.name] = int(min(max(round(x), int(low)), int(high))) if p.kind == "integer" else float(x)
            elif p.kind == "sequence":
                out[p.name] = _decode_sequence(vec[b.start : b.stop], p)
            else:
                v = b.domain[int(np.argmax(vec[b.start : b.stop]))]
                out[p.name] = int(v) if p.kind == "integer_set" else v
        return out

    # -- attributions -> parameters ----------------------------------------------------------------
    def parameter_moves(
        self, attribution: Sequence[float] | np.ndarray, values: Mapping[str, ParamValue]
    ) -> list[Move]:
        """The parameter moves an attribution of ``values``' encoding suggests, best first (module docstring)."""
        g = np.asarray(attribution, dtype=np.float64).reshape(-1)
        if g.shape != (self.n_features,):
            raise ValueError(f"attribution has {g.size} entries, the encoding has {self.n_features} features")
        moves: list[Move] = []
        for b in self.blocks:
            p = b.param
            if p.kind == "sequence":
                continue  # no single-parameter move for a record field (module docstring)
            if p.kind in NUMERIC:
                grad = float(g[b.start])
                if grad == 0.0 or not np.isfinite(grad) or p.low == p.high:
                    continue
                direction = 1 if grad > 0 else -1
                v = float(values[p.name])
                if (direction > 0 and v >= float(p.high)) or (direction < 0 and v <= float(p.low)):  # type: ignore[arg-type]
                    continue
                moves.append(Move(p.name, abs(grad), direction=direction))
            else:
                domain = b.domain
                if len(domain) < 2:
                    continue
                block = g[b.start : b.stop]
                current = domain.index(values[p.name])
                gains = block - block[current]
                gains[current] = -np.inf
                best = int(np.argmax(gains))
                if gains[best] > 0 and np.isfinite(gains[best]):
                    target = int(domain[best]) if p.kind == "integer_set" else domain[best]
                    moves.append(Move(p.name, float(gains[best]), target=target))
        moves.sort(key=lambda m: -m.score)  # stable: ties keep the space's order
        return moves

    # -- persistence -------------------------------------------------------------------------------
    def spec(self) -> list[dict[str, Any]]:
        """The space the encoder was built for, as JSON-able records (stored in surrogate.json)."""
        out = []
        for b in self.blocks:
            p = b.param
            entry: dict[str, Any] = {"name": p.name, "kind": p.kind}
            if p.kind in NUMERIC:
                entry.update(low=p.low, high=p.high)
            elif p.kind == "sequence":
                entry.update(length=p.max_length, fields=Encoder(ParameterSpace(p.fields)).spec())
            elif p.kind == "categorical":
                entry["choices"] = list(p.choices)
            else:
                entry["values"] = list(p.values)
            out.append(entry)
        return out

    @staticmethod
    def from_spec(spec: Sequence[Mapping[str, Any]]) -> Encoder:
        try:
            params = tuple(
                Parameter(
                    name=str(e["name"]),
                    kind=e["kind"],
                    low=e.get("low"),
                    high=e.get("high"),
                    choices=tuple(str(c) for c in e.get("choices", ())),
                    values=tuple(int(v) for v in e.get("values", ())),
                    fields=Encoder.from_spec(e["fields"]).space.parameters if e["kind"] == "sequence" else (),
                    min_length=int(e.get("length", 0)),
                    max_length=int(e.get("length", 0)),
                )
                for e in spec
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed encoding spec ({exc})") from None
        return Encoder(ParameterSpace(params))

    def differences(self, space: ParameterSpace) -> list[str]:
        """How ``space`` differs from the encoder's space (empty: the surrogate can read its inputs)."""
        mine = {e["name"]: e for e in self.spec()}
        try:
            theirs = {e["name"]: e for e in Encoder(space).spec()}
        except ValueError as exc:
            return [str(exc)]
        problems = [f"parameter {n!r} is missing" for n in mine if n not in theirs]
        problems += [f"unexpected parameter {n!r}" for n in theirs if n not in mine]
        for name in mine:
            if name in theirs and not _same(mine[name], theirs[name]):
                problems.append(
                    f"parameter {name!r} is {_describe(theirs[name])}, the surrogate expects {_describe(mine[name])}"
                )
        if not problems and list(mine) != list(theirs):
            problems.append(f"parameter order {list(theirs)} differs from {list(mine)}")
        return problems


def _encodable_sequence(p: Parameter) -> bool:
    return p.min_length == p.max_length and all(f.kind in NUMERIC or f.kind == "categorical" for f in p.fields)


def _scaled(f: Parameter, value: ParamValue) -> float:
    if f.kind == "categorical":
        n = len(f.choices)
        try:
            return f.choices.index(value) / (n - 1) if n > 1 else 0.0
        except ValueError:
            raise ValueError(f"cannot encode: {f.name}={value!r} is not one of {list(f.choices)}") from None
    low, high = float(f.low), float(f.high)  # type: ignore[arg-type]
    return 0.0 if high == low else (float(value) - low) / (high - low)


def _unscaled(f: Parameter, x: float) -> ParamValue:
    x = float(np.clip(x, 0.0, 1.0))
    if f.kind == "categorical":
        return f.choices[int(round(x * (len(f.choices) - 1)))]
    low, high = float(f.low), float(f.high)  # type: ignore[arg-type]
    v = low + x * (high - low)
    return int(min(max(round(v), int(low)), int(high))) if f.kind == "integer" else float(v)


def _fill_sequence(out: np.ndarray, p: Parameter, records: Any) -> None:
    length = p.max_length
    if not isinstance(records, (list, tuple)) or len(records) != length:
        n = len(records) if isinstance(records, (list, tuple)) else type(records).__name__
        raise ValueError(f"cannot encode: {p.name} must be a list of {length} records, got {n}")
    for j, f in enumerate(p.fields):
        for i, record in enumerate(records):
            try:
                out[j * length + i] = _scaled(f, record[f.name])
            except (KeyError, TypeError):
                raise ValueError(f"cannot encode: {p.name}[{i}] lacks field {f.name!r}") from None


def _decode_sequence(vec: np.ndarray, p: Parameter) -> list[dict[str, ParamValue]]:
    length = p.max_length
    return [{f.name: _unscaled(f, vec[j * length + i]) for j, f in enumerate(p.fields)} for i in range(length)]


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a["kind"] != b["kind"]:
        return False
    if a["kind"] in NUMERIC:
        return bool(np.isclose(a["low"], b["low"]) and np.isclose(a["high"], b["high"]))
    return a == b


def _describe(e: Mapping[str, Any]) -> str:
    if e["kind"] in NUMERIC:
        return f"{e['kind']} in [{e['low']:g}, {e['high']:g}]"
    return f"{e['kind']} of {e.get('choices') or e.get('values')}"
