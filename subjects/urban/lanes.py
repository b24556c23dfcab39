"""The `road_lanes` validity rule: the ego's position lies inside one of the road lanes mapped by hand.

DESIGNATE ("Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section IV) keeps the ego
car "within the road lanes, whose coordinates we mapped manually". A subject declares its lanes as axis-aligned
rectangles in metres, e.g. the urban subject's two streets:

    validators:
      - {kind: road_lanes, x: x, y: y, lanes: [[0, 80, -3.5, 3.5], [36.5, 43.5, -12, 12]]}

``x`` and ``y`` name the subject's position parameters; each lane is ``[x_min, x_max, y_min, y_max]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.domain.validators import Validator
from common.space import ParamValue

Lane = tuple[float, float, float, float]


def parse_lanes(raw: Any) -> list[Lane]:
    """The lanes option as rectangles; ValueError names what is wrong."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"'road_lanes' needs 'lanes': a non-empty list of [x_min, x_max, y_min, y_max], got {raw!r}")
    lanes: list[Lane] = []
    for i, lane in enumerate(raw):
        if not (isinstance(lane, list) and len(lane) == 4 and all(isinstance(v, (int, float)) for v in lane)):
            raise ValueError(f"'road_lanes' lanes[{i}] must be [x_min, x_max, y_min, y_max] (numbers), got {lane!r}")
        x0, x1, y0, y1 = (float(v) for v in lane)
        if x0 >= x1 or y0 >= y1:
            raise ValueError(f"'road_lanes' lanes[{i}] must have x_min < x_max and y_min < y_max, got {lane!r}")
        lanes.append((x0, x1, y0, y1))
    return lanes


def inside_lanes(lanes: Sequence[Lane], x: float, y: float) -> bool:
    return any(x0 <= x <= x1 and y0 <= y <= y1 for x0, x1, y0, y1 in lanes)


def road_lanes(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """The ego position (parameters ``x``, ``y``) is inside one of ``lanes``."""
    x_name, y_name = options.get("x", "x"), options.get("y", "y")
    for role, name in (("x", x_name), ("y", y_name)):
        if not isinstance(name, str) or name not in names:
            raise ValueError(f"'road_lanes' option {role!r} must name a parameter (known: {', '.join(names)})")
    lanes = parse_lanes(options.get("lanes"))

    def check(values: Mapping[str, ParamValue]) -> list[str]:
        x, y = values.get(x_name), values.get(y_name)
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            return []  # the domain check names a missing or mistyped position
        if inside_lanes(lanes, float(x), float(y)):
            return []
        listed = "; ".join(f"x in [{a:g}, {b:g}], y in [{c:g}, {d:g}]" for a, b, c, d in lanes)
        return [
            f"({x_name}, {y_name}) = ({float(x):g}, {float(y):g}) is off the road: it must lie in a lane ({listed})"
        ]

    return Validator("road_lanes", f"({x_name}, {y_name}) inside a road lane", check)
