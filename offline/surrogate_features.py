"""The geometry a ``scene`` surrogate needs (generator_service/surrogates/features.py), read from a subject's env.

``feature_spec(kind, subject)`` is the ``features`` spec `gauntlet surrogate train --features KIND` trains with:
``config`` for every subject; ``scene`` for the subjects listed in SCENES. Parking's comes from the environment's
own road (subjects/parking/env.py: the goal landmark of spot s sits at its lane's middle with the lane's
heading), so nothing about the lot is written twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Lot:
    """Parking's spots, 1..2 * per_row in the pack's numbering (index s - 1)."""

    centres: np.ndarray  # (spots, 2): goal landmark positions
    headings: np.ndarray  # (spots,): lane headings (the goal's heading), radians
    cars: np.ndarray  # (spots, 2): where a parked car stands
    per_row: int

    def neighbours(self, spot: int) -> list[str | None]:
        """Flag names of spot ``spot``'s left and right neighbours in its row and the spot across the aisle."""
        row, col = divmod(spot - 1, self.per_row)
        left = f"parked_{spot - 2}" if col > 0 else None
        right = f"parked_{spot}" if col < self.per_row - 1 else None
        return [left, right, f"parked_{(1 - row) * self.per_row + col}"]


def read_lot() -> Lot:
    from subjects.parking.env import GauntletParkingEnv, spot_lane

    env = GauntletParkingEnv()
    env.reset(seed=0)
    per_row = int(env.config["spots_per_row"])
    lanes = [env.road.network.get_lane(spot_lane(s, per_row)) for s in range(1, 2 * per_row + 1)]
    lot = Lot(
        centres=np.array([lane.position(lane.length / 2, 0) for lane in lanes], dtype=np.float64),
        headings=np.array([float(lane.heading) for lane in lanes]),
        cars=np.array([lane.position(4.0, 0) for lane in lanes], dtype=np.float64),
        per_row=per_row,
    )
    env.close()
    return lot


def parking_scene() -> dict[str, Any]:
    lot = read_lot()
    spots = range(1, 2 * lot.per_row + 1)
    return {
        "kind": "scene",
        "goal": "goal_lane",
        "x": "x",
        "y": "y",
        "heading": "head_ego",
        "targets": [[*map(float, lot.centres[s - 1]), float(lot.headings[s - 1])] for s in spots],
        "neighbours": [lot.neighbours(s) for s in spots],
    }


SCENES = {"parking": parking_scene}
FEATURES = ("config", "scene")


def feature_spec(kind: str, subject: str) -> dict[str, Any]:
    if kind == "config":
        return {"kind": "config"}
    if kind != "scene":
        raise ValueError(f"unknown surrogate features {kind!r}; known: {', '.join(FEATURES)}")
    if subject not in SCENES:
        raise ValueError(
            f"surrogate features 'scene' need the scene geometry of subject {subject!r}, which is not known; "
            f"known for: {', '.join(sorted(SCENES))}"
        )
    return SCENES[subject]()
