"""Per-parameter-kind mutation operators: the one place every mutating strategy takes them from.

The fuzzers (MDPFuzz, CureFuzz) and MAP-Elites mutate a parent test input into a nearby child. The seed
papers' shared operator (the baseline code of "Failure-Based Testing for Deep Reinforcement Learning Agents",
whose Section 4.1 lists the baselines) is, per real dimension,
a uniform shift delta in +-0.1*(high-low)/2 = +-5 % of the range, then a clip into the domain. Here:

* ``real``:        delta ~ U(-scale*(high-low), +scale*(high-low)), then clipped into [low, high];
* ``integer``:     the same shift on the integer, then rounded to the nearest integer and clipped
                   (with a narrow range the shift can round to 0, so the value may stay the same);
* ``categorical`` / ``integer_set``: with probability ``p`` another value, drawn uniformly among the
                   other choices (a single-choice domain never changes);
* ``sequence``:    not supported yet; raises NotImplementedError naming the parameter.

Integer parameters have a second operator, ``integer="nearby"`` (the QD fault-diversity authors' integer
mutation in the code published with "Testing for Fault Diversity in Reinforcement Learning"; the shift above
often rounds back to the same integer on a narrow range,
e.g. Taxi's 0..10 never moves): the integer parameters are mutated TOGETHER, each chosen with probability ``p``
and at least one (one drawn uniformly when none was; ``p=0`` mutates exactly one, as the authors' Taxi), and
each chosen value is redrawn from the rest of its range with weight 1/|v - current| (near values likelier,
the current value excluded). The authors' BipedalWalker operator (each of the 15 codes with p = 0.1, at least
one, +1 cyclically within 1..3) is the same selection with a deterministic step; with three values
"nearby" moves to either neighbour (2/3 the near one from an end). Reals and discrete kinds are unchanged.

``scale=0.05`` reproduces the papers' +-5 %. ``p`` has no counterpart in the papers (their subjects are all
real-valued); 0.1 is this project's choice, and a strategy can pass its own.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from common.space import Parameter, ParameterSpace, ParamValue

DEFAULT_SCALE = 0.05
DEFAULT_P = 0.1
INTEGER_OPERATORS = ("shift", "nearby")


def mutate(
    space: ParameterSpace,
    values: Mapping[str, ParamValue],
    rng: np.random.Generator,
    scale: float = DEFAULT_SCALE,
    p: float = DEFAULT_P,
    integer: str = "shift",
) -> dict[str, ParamValue]:
    """A mutated copy of ``values`` (a complete test input of ``space``); ``values`` itself is left as is.

    Every parameter is mutated independently with its kind's operator (see the module docstring), in the
    order of ``space.parameters``, so the result depends only on ``values``, ``scale``, ``p``, ``integer`` and
    the state of ``rng``. With ``integer="nearby"`` the integer parameters are mutated jointly by
    ``mutate_integers_nearby`` first. Raises ValueError for a missing parameter, a negative ``scale``, a ``p``
    outside [0, 1] or an unknown ``integer`` operator, and NotImplementedError for a sequence parameter.
    """
    if not (scale >= 0.0 and np.isfinite(scale)):
        raise ValueError(f"mutation scale must be a finite number >= 0, got {scale!r}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"mutation probability p must lie in [0, 1], got {p!r}")
    if integer not in INTEGER_OPERATORS:
        raise ValueError(f"integer mutation operator must be one of {', '.join(INTEGER_OPERATORS)}, got {integer!r}")
    missing = [param.name for param in space.parameters if param.name not in values]
    if missing:
        raise ValueError(f"cannot mutate: parameter {missing[0]!r} is missing from the test input")
    out: dict[str, ParamValue] = dict(values)
    if integer == "nearby":
        out = mutate_integers_nearby(space, out, rng, p=p)
    for param in space.parameters:
        if integer == "nearby" and param.kind == "integer":
            continue
        out[param.name] = mutate_value(param, values[param.name], rng, scale=scale, p=p)
    return out


def mutate_integers_nearby(
    space: ParameterSpace, values: Mapping[str, ParamValue], rng: np.random.Generator, p: float = DEFAULT_P
) -> dict[str, ParamValue]:
    """The "nearby" integer operator (module docstring): each integer parameter with another value is chosen
    with probability ``p``, at least one; each chosen one moves to another value of its range drawn with
    weight 1/distance. Other parameters are copied unchanged."""
    out: dict[str, ParamValue] = dict(values)
    movable = [
        param for param in space.parameters if param.kind == "integer" and int(param.bounds[1]) > int(param.bounds[0])
    ]
    if not movable:
        return out
    chosen = [param for param in movable if rng.random() < p]
    if not chosen:
        chosen = [movable[int(rng.integers(len(movable)))]]
    for param in chosen:
        current = int(values[param.name])
        low, high = param.bounds
        others = np.array([v for v in range(int(low), int(high) + 1) if v != current])
        weights = 1.0 / np.abs(others - current)
        out[param.name] = int(others[int(rng.choice(len(others), p=weights / weights.sum()))])
    return out


def mutate_value(
    param: Parameter, value: ParamValue, rng: np.random.Generator, scale: float = DEFAULT_SCALE, p: float = DEFAULT_P
) -> ParamValue:
    """One parameter's mutated value (see ``mutate``); the result always lies in the parameter's domain."""
    if param.kind in ("real", "integer"):
        low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
        width = scale * (high - low)
        shifted = float(value) + float(rng.uniform(-width, width))
        if param.kind == "real":
            return float(min(max(shifted, low), high))
        return int(min(max(round(shifted), int(low)), int(high)))
    if param.kind in ("categorical", "integer_set"):
        domain: tuple[ParamValue, ...] = param.choices if param.kind == "categorical" else param.values
        if len(domain) < 2 or rng.random() >= p:
            return value
        others = [v for v in domain if v != value]
        picked = others[int(rng.integers(len(others)))]
        return int(picked) if param.kind == "integer_set" else picked
    raise NotImplementedError(
        f"mutation of parameter {param.name!r} (kind {param.kind!r}) is not implemented yet: "
        "sequence operators (insert/delete/change a record) are still to come"
    )


def mutate_one(
    space: ParameterSpace, values: Mapping[str, ParamValue], rng: np.random.Generator, scale: float = DEFAULT_SCALE
) -> dict[str, ParamValue]:
    """A copy of ``values`` with ONE parameter, chosen uniformly, mutated by its kind's operator.

    Indago's random mutation ("choosing among all parameters with equal probability"). A discrete parameter
    always changes (p = 1) when it has another value; a real moves as in ``mutate_value``; an integer moves by at
    least one step, up or down with equal probability where both are possible (Indago's integer operators add
    or subtract a random integer >= 1; the plain shift would never move a 0/1 flag such as Parking's parked
    cars, whose mutation is then Indago's "add or remove a parked car").
    """
    if not space.parameters:
        return dict(values)
    param = space.parameters[int(rng.integers(len(space.parameters)))]
    if param.name not in values:
        raise ValueError(f"cannot mutate: parameter {param.name!r} is missing from the test input")
    out = dict(values)
    value = values[param.name]
    if param.kind == "integer" and param.low != param.high:
        low, high = param.bounds
        up = [d for d in (-1, 1) if (d > 0 and value < high) or (d < 0 and value > low)]
        out[param.name] = mutate_towards(param, value, rng, up[int(rng.integers(len(up)))], scale=scale)
    else:
        out[param.name] = mutate_value(param, value, rng, scale=scale, p=1.0)
    return out


def mutate_towards(
    param: Parameter, value: ParamValue, rng: np.random.Generator, direction: int, scale: float = DEFAULT_SCALE
) -> ParamValue:
    """A directed mutation of a number: a shift of U(0, scale*(high-low)) in ``direction`` (+1 up, -1 down),
    clipped into the domain. An integer moves by at least one step (unless at the bound).

    Used by saliency-guided mutation (Indago), where a gradient's sign gives the direction. Discrete kinds have
    no direction: ValueError names the parameter.
    """
    if param.kind not in ("real", "integer"):
        raise ValueError(f"parameter {param.name!r} (kind {param.kind!r}) has no direction to mutate towards")
    if direction not in (-1, 1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    if not (scale >= 0.0 and np.isfinite(scale)):
        raise ValueError(f"mutation scale must be a finite number >= 0, got {scale!r}")
    low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
    step = float(rng.uniform(0.0, scale * (high - low)))
    if param.kind == "real":
        return float(min(max(float(value) + direction * step, low), high))
    steps = max(1, int(round(step)))
    return int(min(max(int(value) + direction * steps, int(low)), int(high)))
