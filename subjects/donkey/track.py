"""The Donkey track model of Indago ("Testing of Deep Reinforcement Learning Agents with Surrogate Models"):
geometry, validity, generation, mutation, crossover.

A track is a list of 12 (command, value) pairs; as a test-case value it is a list of records
``[{"command": "S", "value": 5}, {"command": "DY", "value": 15.2}, {"command": "L", "value": 3}, ...]``.

Commands (the path-script language of Tawn Kramer's sdsandbox, which the Donkey simulator builds roads from):

* ``S n``:  n straight road units;
* ``DY d``: sets the turn rate to d degrees per road unit (draws no road);
* ``L n`` / ``R n``: n road units, each turning left / right by the last DY's d degrees, so a curve
  ``DY d, L n`` turns by n * d degrees in total.

Geometry (ours, in a plain x-y plane seen from above, not Unity's coordinates): the road starts at (0, 0) heading
north (+y); each road unit is ``UNIT_LENGTH`` = 2.0 m long (sdsandbox's node spacing); in a curve the heading
turns by d degrees *before* each unit is laid (as sdsandbox does), counter-clockwise for L, clockwise for R. The
centre line is the polyline through the 1 + (number of S/L/R units) node positions.

Validity (``TrackRules``), each violation one sentence naming the pair index and the rule:

0. values: S, L, R take a whole number of units in [1, 20]; DY a rate in [1, 50] degrees per unit (the authors'
   code bounds; the paper gives none);
1. the track starts and ends with S;
2. a DY is followed by L or R (and, conversely, every L or R follows a DY: without one its turn is undefined);
3. the road does not cross itself: no two non-adjacent centre-line segments meet, and no two segments that lie
   more than ``pi * road_width`` apart along the road come closer than ``road_width`` (5 m, the authors'
   TRACK_WIDTH) -- two road edges would overlap. The arc-length guard exists because neighbouring segments of
   any curve are close by construction; a single curve of at most 170 degrees never brings two of its
   segments that far apart (in arc length) within one road width again, so only returning roads are flagged;
4. no curve turns by more than ``max_turn_deg`` (170 degrees);
5. at least ``min_curves`` curves (3), the hardest turning by at least ``min_hardest_deg`` (120 degrees).

The RQ4 "simplified" variant is ``TrackRules(min_curves=2, max_turn_deg=130, min_hardest_deg=0)``: the paper
says "of which the hardest one must be <= 130 degrees instead of <= 170 degrees", which we read as the turn
limit replacing 170 and the 120-degree minimum no longer applying (notes section 7.2 q8 lists the conflict).
Rules 3-5 are checked only once rules 0-2 hold (the geometry of an ill-formed script is undefined).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.domain.operators import OperatorSpec, ParameterOperators
from common.domain.validators import Validator

COMMANDS = ("S", "DY", "R", "L")  # domain order = command ids 0..3 (the authors' COMMAND_NAME_VALUE_DICT)
CURVES = ("L", "R")
N_PAIRS = 12
UNIT_LENGTH = 2.0  # metres per road unit (sdsandbox's span between path nodes)
TRACK_SEPARATOR = "@"  # between pairs of the track string sent to the simulator (the authors' COMMAND_SEPARATOR)

Pair = tuple[str, float]


class TrackError(ValueError):
    """A track that cannot be read at all (not a list of (command, value) pairs); the message says where."""


@dataclass(frozen=True)
class TrackRules:
    """The thresholds of the validity rules (module docstring); defaults are the paper's main setting."""

    n_pairs: int = N_PAIRS
    min_units: int = 1
    max_units: int = 20
    min_dy: float = 1.0
    max_dy: float = 50.0
    road_width: float = 5.0
    max_turn_deg: float = 170.0
    min_curves: int = 3
    min_hardest_deg: float = 120.0

    def __post_init__(self) -> None:
        checks = [
            (self.n_pairs >= 2, "n_pairs must be >= 2"),
            (1 <= self.min_units <= self.max_units, "needs 1 <= min_units <= max_units"),
            (0 < self.min_dy <= self.max_dy, "needs 0 < min_dy <= max_dy"),
            (self.road_width >= 0, "road_width must be >= 0"),
            (0 < self.max_turn_deg, "max_turn_deg must be > 0"),
            (self.min_curves >= 0, "min_curves must be >= 0"),
            (0 <= self.min_hardest_deg <= self.max_turn_deg, "needs 0 <= min_hardest_deg <= max_turn_deg"),
        ]
        for ok, text in checks:
            if not ok:
                raise ValueError(f"track rules: {text}, got {self}")

    @staticmethod
    def from_options(options: Mapping[str, Any]) -> TrackRules:
        """Rules from a YAML mapping (unknown keys are refused, naming the allowed ones)."""
        allowed = set(TrackRules.__dataclass_fields__)
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(f"unknown track rule option(s) {unknown}; allowed: {sorted(allowed)}")
        # whole-number fields as ints (options may arrive as floats: they travel in a protobuf Struct)
        fields: dict[str, Any] = {
            k: (int(v) if k in ("n_pairs", "min_units", "max_units", "min_curves") else float(v))
            for k, v in options.items()
        }
        return TrackRules(**fields)


# -- reading ------------------------------------------------------------------------------------------------
def as_pairs(track: Any) -> list[Pair]:
    """The (command, value) pairs of a track given as records ({command, value}) or pairs; TrackError if unreadable."""
    if not isinstance(track, (list, tuple)):
        raise TrackError(f"a track must be a list of (command, value) pairs, got {type(track).__name__}")
    pairs: list[Pair] = []
    for i, item in enumerate(track):
        if isinstance(item, Mapping):
            if set(item) != {"command", "value"}:
                raise TrackError(f"track[{i}] must have exactly the fields command, value; got {sorted(item)}")
            command, value = item["command"], item["value"]
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            command, value = item
        else:
            raise TrackError(f"track[{i}] must be a (command, value) pair, got {item!r}")
        if command not in COMMANDS:
            raise TrackError(f"track[{i}]: command {command!r} is not one of {', '.join(COMMANDS)}")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.integer, np.floating))
            or not math.isfinite(float(value))
        ):
            raise TrackError(f"track[{i}]: value {value!r} of {command} is not a finite number")
        pairs.append((str(command), float(value)))
    return pairs


def as_records(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Pairs as test-case records; S/L/R values as ints, DY values as floats."""
    return [{"command": c, "value": float(v) if c == "DY" else int(round(v))} for c, v in pairs]


def track_string(track: Any) -> str:
    """The track as the authors' sim script string, e.g. "S 5@DY 15.2@L 3@...@S 4"."""
    parts = []
    for c, v in as_pairs(track):
        parts.append(f"{c} {v:g}" if c == "DY" else f"{c} {int(round(v))}")
    return TRACK_SEPARATOR.join(parts)


def parse_track_string(text: str) -> list[Pair]:
    """Inverse of ``track_string``; TrackError names the piece that does not parse."""
    pairs: list[Pair] = []
    for i, piece in enumerate(text.split(TRACK_SEPARATOR)):
        words = piece.split()
        if len(words) != 2 or words[0] not in COMMANDS:
            raise TrackError(
                f"track string piece {i} ({piece!r}) is not '<command> <value>' with a command in {', '.join(COMMANDS)}"
            )
        try:
            value = float(words[1])
        except ValueError:
            raise TrackError(f"track string piece {i} ({piece!r}): {words[1]!r} is not a number") from None
        pairs.append((words[0], value))
    return pairs


# -- geometry -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """The centre line: node positions (N+1, 2) in metres, and for each segment the index of the pair that laid it."""

    points: np.ndarray
    segment_pair: np.ndarray

    @property
    def length(self) -> float:
        return float(len(self.segment_pair) * UNIT_LENGTH)


def curves(pairs: Sequence[Pair]) -> list[tuple[int, float]]:
    """(index of the L/R pair, signed total turn in degrees; + = left) for every DY-then-L/R curve."""
    out = []
    for i in range(1, len(pairs)):
        (prev_c, prev_v), (c, v) = pairs[i - 1], pairs[i]
        if c in CURVES and prev_c == "DY":
            out.append((i, (1.0 if c == "L" else -1.0) * prev_v * v))
    return out


def centre_line(track: Any) -> Geometry:
    """The road centre line of a track (module docstring); an L/R without a DY before it turns by 0 degrees."""
    pairs = as_pairs(track)
    x, y, heading = 0.0, 0.0, 90.0
    points = [(x, y)]
    owner: list[int] = []
    rate = 0.0
    for i, (c, v) in enumerate(pairs):
        if c == "DY":
            rate = v
            continue
        turn = rate if c == "L" else -rate if c == "R" else 0.0
        for _ in range(max(int(round(v)), 0)):
            heading += turn
            x += UNIT_LENGTH * math.cos(math.radians(heading))
            y += UNIT_LENGTH * math.sin(math.radians(heading))
            points.append((x, y))
            owner.append(i)
        if c in CURVES:
            rate = 0.0  # a DY applies to the one curve that follows it
    return Geometry(np.asarray(points, dtype=np.float64), np.asarray(owner, dtype=np.int64))


def _orient(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return (b[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (b[..., 1] - a[..., 1]) * (c[..., 0] - a[..., 0])


def _point_segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ab = b - a
    denom = np.maximum((ab**2).sum(-1), 1e-12)
    t = np.clip(((p - a) * ab).sum(-1) / denom, 0.0, 1.0)
    return np.linalg.norm(p - (a + t[..., None] * ab), axis=-1)


def segment_conflicts(geometry: Geometry, road_width: float) -> tuple[np.ndarray, np.ndarray]:
    """Boolean matrices over segment pairs (i < j): (segments meet, segments closer than road_width while more
    than pi*road_width apart along the road).

    Vectorised over node-segment matrices computed once: segment i = nodes (i, i+1); two segments cross when each
    one's end nodes lie strictly on opposite sides of the other, and their distance (when they do not cross) is the
    smallest of the four node-to-segment distances.
    """
    p = geometry.points
    n = len(p) - 1
    if n < 2:
        empty = np.zeros((n, n), dtype=bool)
        return empty, empty
    a, b = p[:-1], p[1:]
    nodes = p[:, None, :]  # (n+1, 1, 2) against segments (1, n, 2)
    side = _orient(a[None, :, :], b[None, :, :], nodes)  # side[k, j]: node k relative to segment j
    dist = _point_segment_distance(nodes, a[None, :, :], b[None, :, :])  # (n+1, n)
    eps = 1e-9
    d1, d2 = side[:-1, :], side[1:, :]  # nodes i, i+1 against segment j
    d3, d4 = side[:-1, :].T, side[1:, :].T  # nodes j, j+1 against segment i
    crosses = (((d1 > eps) & (d2 < -eps)) | ((d1 < -eps) & (d2 > eps))) & (
        ((d3 > eps) & (d4 < -eps)) | ((d3 < -eps) & (d4 > eps))
    )
    distance = np.minimum.reduce([dist[:-1, :], dist[1:, :], dist[:-1, :].T, dist[1:, :].T])
    idx = np.arange(n)
    gap = idx[None, :] - idx[:, None]  # j - i
    non_adjacent = gap >= 2
    meets = non_adjacent & (crosses | (distance < 1e-6))
    far_along = (gap - 1) * UNIT_LENGTH > math.pi * road_width
    too_close = far_along & (distance < road_width) & ~meets
    return meets, too_close


# -- validity -----------------------------------------------------------------------------------------------
def violations(track: Any, rules: TrackRules = TrackRules()) -> list[str]:
    """Every broken rule as one sentence naming the pair index and the rule (module docstring); [] = valid."""
    try:
        pairs = as_pairs(track)
    except TrackError as exc:
        return [str(exc)]
    out = _grammar_violations(pairs, rules)
    if out:
        return out  # the geometry of an ill-formed script is undefined; rules 3-5 wait until 0-2 hold
    return _crossing_violations(pairs, rules) + _curve_violations(pairs, rules)


def is_valid(track: Any, rules: TrackRules = TrackRules()) -> bool:
    """``not violations(track, rules)``, with the cheap rules first (the generator and the operators call it often)."""
    try:
        pairs = as_pairs(track)
    except TrackError:
        return False
    return not (
        _grammar_violations(pairs, rules) or _curve_violations(pairs, rules) or _crossing_violations(pairs, rules)
    )


def _grammar_violations(pairs: Sequence[Pair], rules: TrackRules) -> list[str]:
    """Rules 0-2 (and the number of pairs)."""
    if len(pairs) != rules.n_pairs:
        return [f"a track has exactly {rules.n_pairs} (command, value) pairs, got {len(pairs)}"]
    out: list[str] = []
    for i, (c, v) in enumerate(pairs):
        if c == "DY":
            if not rules.min_dy <= v <= rules.max_dy:
                out.append(
                    f"track[{i}] (DY {v:g}): rule 0 (values): a DY rate lies in "
                    f"[{rules.min_dy:g}, {rules.max_dy:g}] degrees per unit"
                )
        elif v != int(v) or not rules.min_units <= v <= rules.max_units:
            out.append(
                f"track[{i}] ({c} {v:g}): rule 0 (values): {c} takes a whole number of road units in "
                f"[{rules.min_units}, {rules.max_units}]"
            )
    for i in (0, len(pairs) - 1):
        if pairs[i][0] != "S":
            where = "starts" if i == 0 else "ends"
            out.append(f"track[{i}] is {pairs[i][0]}: rule 1 (starts and ends with S): a track {where} with S")
    for i, (c, _) in enumerate(pairs):
        nxt = pairs[i + 1][0] if i + 1 < len(pairs) else None
        if c == "DY" and nxt not in CURVES:
            what = f"by {nxt} at track[{i + 1}]" if nxt else "by nothing"
            out.append(f"track[{i}] is DY followed {what}: rule 2 (DY followed by L or R)")
        if c in CURVES and (i == 0 or pairs[i - 1][0] != "DY"):
            out.append(f"track[{i}] is {c} without a DY before it: rule 2 (each curve is DY then L or R)")
    return out


def _crossing_violations(pairs: Sequence[Pair], rules: TrackRules) -> list[str]:
    """Rule 3, reported once (the first conflicting pair of segments)."""
    geometry = centre_line(pairs)
    meets, too_close = segment_conflicts(geometry, rules.road_width)
    for matrix, text in (
        (meets, "the centre line crosses itself"),
        (too_close, f"the road passes within {rules.road_width:g} m (one road width) of itself"),
    ):
        hits = np.argwhere(matrix)
        if len(hits):
            a, b = (int(geometry.segment_pair[k]) for k in hits[0])
            return [
                f"track[{b}] ({pairs[b][0]} {pairs[b][1]:g}): {text} near track[{a}] "
                f"({pairs[a][0]} {pairs[a][1]:g}): rule 3 (no self-intersection)"
            ]
    return []


def _curve_violations(pairs: Sequence[Pair], rules: TrackRules) -> list[str]:
    """Rules 4 and 5."""
    out: list[str] = []
    found = curves(pairs)
    for i, turn in found:
        if abs(turn) > rules.max_turn_deg:
            out.append(
                f"track[{i - 1}]..track[{i}] (DY {pairs[i - 1][1]:g}, {pairs[i][0]} {pairs[i][1]:g}): the "
                f"curve turns {abs(turn):.1f} deg: rule 4 (no turn over {rules.max_turn_deg:g} deg)"
            )
    if len(found) < rules.min_curves:
        out.append(f"the track has {len(found)} curve(s): rule 5 (at least {rules.min_curves} curves)")
    hardest = max((abs(t) for _, t in found), default=0.0)
    if hardest < rules.min_hardest_deg:
        at = next((f" (track[{i}])" for i, t in found if abs(t) == hardest), "")
        out.append(
            f"the hardest curve{at} turns {hardest:.1f} deg: rule 5 (at least one curve of "
            f">= {rules.min_hardest_deg:g} deg)"
        )
    return out


# -- generation ---------------------------------------------------------------------------------------------
def _draw_units(rng: np.random.Generator, rules: TrackRules, high: int | None = None) -> int:
    return int(rng.integers(rules.min_units, min(rules.max_units, high or rules.max_units) + 1))


def draw_candidate(rng: np.random.Generator, rules: TrackRules = TrackRules()) -> list[Pair]:
    """One grammatical track (rules 0-2 and 4 hold by construction; 3 and 5 may not).

    The authors' generator: S first and last; after DY comes L or R (equally likely); elsewhere S or DY (equally
    likely), except that a DY needs room for its curve before the final S. Values are uniform in their domains
    (DY rates uniform in [min_dy, max_dy], rounded to 0.1 as the authors do); a curve whose total turn would pass
    max_turn_deg gets its unit count redrawn below the limit, so rule 4 holds without rejection.
    """
    n = rules.n_pairs
    pairs: list[Pair] = [("S", float(_draw_units(rng, rules)))]
    while len(pairs) < n - 1:
        last = pairs[-1][0]
        if last == "DY":
            rate = pairs[-1][1]
            limit = max(rules.min_units, int(math.floor(rules.max_turn_deg / rate + 1e-9)))
            pairs.append((CURVES[int(rng.integers(2))], float(_draw_units(rng, rules, limit))))
        elif len(pairs) < n - 2 and rng.random() < 0.5:
            rate = round(float(rng.uniform(rules.min_dy, rules.max_dy)), 1)
            rate = min(max(rate, rules.min_dy), rules.max_dy, rules.max_turn_deg / rules.min_units)
            pairs.append(("DY", rate))
        else:
            pairs.append(("S", float(_draw_units(rng, rules))))
    pairs.append(("S", float(_draw_units(rng, rules))))
    return pairs


def random_track(
    rng: np.random.Generator, rules: TrackRules = TrackRules(), max_tries: int = 100_000
) -> list[dict[str, Any]]:
    """A uniformly drawn valid track (``draw_candidate`` redrawn until every rule holds), as records."""
    for _ in range(max_tries):
        pairs = draw_candidate(rng, rules)
        if is_valid(pairs, rules):
            return as_records(pairs)
    raise ValueError(f"no valid track in {max_tries} draws under {rules}; the rules may be unsatisfiable")


# -- Indago's search operators ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrackOperators:
    """Indago's Driving mutation and crossover (notes section 3.3), with the paper's magnitudes as defaults.

    Mutation, per mutated pair, with equal probability: change the command (L <-> R only; an S or DY pair has no
    other command and changes its value instead) or the value: DY +- U(0, ``dy_delta`` = 50), S/L/R +- an integer
    in [1, ``units_delta`` = 20]; the result is clipped into the value domain (rule 0), as the authors' code does.
    ``pairs``: "one" mutates one pair chosen uniformly (Indago's "one parameter, chosen with equal probability",
    the pairs being the parameters); "all" mutates every pair, as the authors' code does (the paper is silent).

    Crossover: single-point, cut in [1, n_pairs - 1] so each child holds pairs of both parents; retried with a
    fresh cut until both children are valid or ``crossover_tries`` (20, the authors' NUM_TRIALS_CROSSOVER_MUTATION)
    is reached, after which it gives up (None: the parents stay).

    Saliency-guided mutation (``directed``): the surrogate's gradient over the 24 encoded features (12 command
    ids in the order S, DY, R, L = 0..3, then 12 values) picks the feature with the largest magnitude; its sign
    gives the direction. A command feature can only flip R (id 2) up to L (3) or L down to R; a value feature
    moves the value by the same random magnitude as above, in the gradient's direction. Features that allow no
    move in their direction are skipped for the next largest.
    """

    rules: TrackRules = TrackRules()
    pairs: str = "one"
    dy_delta: float = 50.0
    units_delta: int = 20
    crossover_tries: int = 20

    def __post_init__(self) -> None:
        if self.pairs not in ("one", "all"):
            raise ValueError(f"track mutation 'pairs' must be 'one' or 'all', got {self.pairs!r}")
        if not (self.dy_delta >= 0 and self.units_delta >= 1 and self.crossover_tries >= 1):
            raise ValueError("track operators need dy_delta >= 0, units_delta >= 1 and crossover_tries >= 1")

    def mutate(self, track: Any, rng: np.random.Generator) -> list[dict[str, Any]]:
        """A mutant (possibly invalid under rules 1-5: callers retry, as Indago does)."""
        pairs = as_pairs(track)
        chosen = range(len(pairs)) if self.pairs == "all" else [int(rng.integers(len(pairs)))]
        for i in chosen:
            c, v = pairs[i]
            if c in CURVES and rng.random() < 0.5:
                pairs[i] = ("R" if c == "L" else "L", v)
                continue
            pairs[i] = (c, self._shifted(c, v, 1 if rng.random() < 0.5 else -1, rng))
        return as_records(pairs)

    def _shifted(self, command: str, value: float, sign: int, rng: np.random.Generator) -> float:
        """The value moved by the paper's random magnitude in direction ``sign``, clipped into its domain."""
        r = self.rules
        if command == "DY":
            return float(min(max(value + sign * rng.uniform(0.0, self.dy_delta), r.min_dy), r.max_dy))
        step = int(rng.integers(1, self.units_delta + 1))
        return float(min(max(int(value) + sign * step, r.min_units), r.max_units))

    def directed(
        self, track: Any, gradient: Any, rng: np.random.Generator, tries: int = 20
    ) -> Iterator[list[dict[str, Any]]]:
        """Candidate mutants along the gradient (class docstring), best feature first; ``tries`` draws per value
        feature. Callers keep the first valid one."""
        pairs = as_pairs(track)
        n = len(pairs)
        g = np.asarray(gradient, dtype=np.float64).reshape(-1)
        if g.shape != (2 * n,):
            raise ValueError(f"a gradient over a track of {n} pairs has {2 * n} entries, got {g.size}")
        for k in np.argsort(-np.abs(g), kind="stable"):
            if not np.isfinite(g[k]) or g[k] == 0.0:
                break
            i, sign = int(k % n), (1 if g[k] > 0 else -1)
            command, value = pairs[i]
            if k < n:
                target = {"R": "L", "L": "R"}.get(command)
                if target is not None and (COMMANDS.index(target) - COMMANDS.index(command)) * sign > 0:
                    yield as_records([*pairs[:i], (target, value), *pairs[i + 1 :]])
                continue
            for _ in range(tries):
                moved = self._shifted(command, value, sign, rng)
                if moved == value:
                    break  # at the bound in this direction
                yield as_records([*pairs[:i], (command, moved), *pairs[i + 1 :]])

    def mutate_valid(self, track: Any, rng: np.random.Generator, tries: int = 20) -> list[dict[str, Any]] | None:
        """The first valid mutant in ``tries`` attempts, or None."""
        for _ in range(tries):
            child = self.mutate(track, rng)
            if is_valid(child, self.rules):
                return child
        return None

    def crossover(
        self, a: Any, b: Any, rng: np.random.Generator
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        pa, pb = as_pairs(a), as_pairs(b)
        if len(pa) != len(pb) or len(pa) < 2:
            raise TrackError(f"crossover needs two tracks of the same length >= 2, got {len(pa)} and {len(pb)}")
        for _ in range(self.crossover_tries):
            cut = int(rng.integers(1, len(pa)))
            c1, c2 = pa[:cut] + pb[cut:], pb[:cut] + pa[cut:]
            if is_valid(c1, self.rules) and is_valid(c2, self.rules):
                return as_records(c1), as_records(c2)
        return None

    def sample(self, rng: np.random.Generator) -> list[dict[str, Any]]:
        return random_track(rng, self.rules)


# -- plug-ins: the donkey_track rule and search operators (entry points in pyproject.toml) -----------------------
# the operator options of a donkey_track entry -> (TrackOperators field, type); the rest are TrackRules fields
_OPERATOR_OPTIONS: dict[str, tuple[str, type]] = {
    "mutation_pairs": ("pairs", str),
    "dy_delta": ("dy_delta", float),
    "units_delta": ("units_delta", int),
    "crossover_tries": ("crossover_tries", int),
}


def _rules_and_operators(options: Mapping[str, Any]) -> tuple[TrackRules, TrackOperators]:
    """TrackRules and TrackOperators from a donkey_track entry's options (``parameter`` aside)."""
    rule_options = {k: v for k, v in options.items() if k != "parameter" and k not in _OPERATOR_OPTIONS}
    try:
        rules = TrackRules.from_options(rule_options)
        ops = TrackOperators(
            rules,
            **{
                _OPERATOR_OPTIONS[k][0]: _OPERATOR_OPTIONS[k][1](v)
                for k, v in options.items()
                if k in _OPERATOR_OPTIONS
            },
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"'donkey_track': {exc}") from None
    return rules, ops


def _track_parameter(options: Mapping[str, Any], names: Sequence[str]) -> str:
    param = str(options.get("parameter", "track"))
    if param not in names:
        raise ValueError(f"'donkey_track' names unknown parameter {param!r} (known: {', '.join(names)})")
    return param


def track_validator(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """Indago's Driving rules on a track parameter, declaring the ``donkey_track`` operators for it.

    YAML: ``{kind: donkey_track, parameter: track, <TrackRules fields>, mutation_pairs, dy_delta, units_delta,
    crossover_tries}``; every threshold has the paper's value as default.
    """
    param = _track_parameter(options, names)
    rules, _ = _rules_and_operators(options)

    def check(values: Mapping[str, Any]) -> list[str]:
        return [f"{param}: {v}" for v in violations(values[param], rules)] if param in values else []

    text = (
        f"{param}: starts and ends with S; DY followed by L or R; no self-intersection (road width "
        f"{rules.road_width:g} m); no turn over {rules.max_turn_deg:g} deg; at least {rules.min_curves} curves, "
        f"one of at least {rules.min_hardest_deg:g} deg"
    )
    operator_options = {k: v for k, v in options.items() if k != "parameter"}
    return Validator("donkey_track", text, check, operator=OperatorSpec(param, "donkey_track", operator_options))


def track_operators(parameter: str, options: Mapping[str, Any], names: Sequence[str]) -> ParameterOperators:
    """Indago's track sampling, mutation, crossover and saliency moves (``TrackOperators``) for ``parameter``;
    options as ``track_validator``'s (without ``parameter``)."""
    _, ops = _rules_and_operators(options)
    return ParameterOperators(parameter, ops.sample, ops.mutate, ops.crossover, ops.directed)
