"""highway-env's Parking with Indago's 20 spots, a scene set by the test input, and a numpy goal observation.

Registered on import as `GauntletParking-v0` (the subject's env_id `subjects.parking.env:GauntletParking-v0`
imports it when the env is made). It is highway-env's own ParkingEnv (dynamics, reward, success, collisions,
walls) with three differences, all through subclassing, none by patching the package:

* **Layout.** 2 rows of `spots_per_row` = 10 spots (Indago's 20), 4 m wide and 8 m deep, built by
  ParkingEnv's own `_create_road`: spot k of row r is lane ("a","b",k) for r = 0 (y from 10 to 18)
  and ("b","c",k) for r = 1 (y from -10 to -18); x = (k - 4) * 4 - 2, i.e. -18 .. 18 m.
  Spot numbers (Indago's `goal_lane`, 1..20): 1..10 are row 0 left to right (k = 0..9), 11..20 are
  row 1 left to right. The ego starts in the aisle between the rows; walls at x = +-35, y = +-21.
* **Scene.** `scene` (a ParkingScene, set by the subject's injector before `reset`) places the
  goal landmark in its spot (heading = the spot's lane heading, as highway-env does), a parked
  car in the middle of each occupied spot (where highway-env's `vehicles_count` puts its
  `Vehicle.make_on_lane(..., longitudinal=4)`, with a vehicle's 5 x 2 m footprint, but as a static
  Obstacle: a parked car never moves, and 20 idle Vehicles cost 80 % of a step in collision checks
  between each other and lane look-ups) and the ego at (x, y) with its heading, at rest. Without a
  scene the env behaves as ParkingEnv does (random goal, ego at the origin).
* **Observation.** `NumpyKinematicsGoalObservation` returns exactly what highway-env's
  KinematicsGoalObservation returns (checked value for value in tests/subjects/test_parking.py), without
  building two pandas DataFrames per call; ParkingEnv observes 4 times per step (observation,
  reward, termination, info), so this is most of the step's cost. Measured on this project's
  2-core machine (`python -m subjects.parking.env`: random actions, 19 parked cars, env
  steps per CPU-second, two runs): highway-env's observation 147 / 154, the numpy one 801 / 840 (5.4x).

Episode signals for the oracle: `crashed` (the ego hit a parked car or a wall), `parked`
(highway-env's success criterion holds now), `goal_error` (the weighted goal distance that the
criterion compares with `success_goal_reward`) and `ego_position`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from highway_env.envs.common.action import action_factory
from highway_env.envs.common.observation import KinematicsGoalObservation
from highway_env.envs.parking_env import ParkingEnv
from highway_env.vehicle.graphics import VehicleGraphics
from highway_env.vehicle.kinematics import Vehicle
from highway_env.vehicle.objects import Landmark, Obstacle

SPOTS_PER_ROW = 10
ROWS = (("a", "b"), ("b", "c"))  # ParkingEnv._create_road's two rows of lanes


@dataclass(frozen=True)
class ParkingScene:
    """One test input: spots are numbered 1..2*spots_per_row (module docstring)."""

    goal_spot: int
    parked_spots: tuple[int, ...]
    ego_x: float
    ego_y: float
    ego_heading: float  # radians


def spot_lane(spot: int, spots_per_row: int = SPOTS_PER_ROW) -> tuple[str, str, int]:
    """The lane index of spot number `spot` (1-based)."""
    if not 1 <= spot <= 2 * spots_per_row:
        raise ValueError(f"spot {spot} is outside 1..{2 * spots_per_row}")
    row, k = divmod(spot - 1, spots_per_row)
    return (*ROWS[row], k)


class NumpyKinematicsGoalObservation(KinematicsGoalObservation):
    """KinematicsGoalObservation with the features read straight from the objects.

    The original builds a one-row pandas DataFrame from `to_dict()` for the ego and its goal on every
    call; `to_dict()` also computes lane offsets and the destination direction, which Parking never
    observes. The common features are read directly with the same arithmetic as `to_dict()` (a
    vehicle's velocity, a landmark's zero velocity); any other feature falls back to `to_dict()`.
    """

    _DIRECT = frozenset({"x", "y", "vx", "vy", "cos_h", "sin_h"})

    def _features(self, obj: Any) -> np.ndarray:
        if not self._DIRECT.issuperset(self.features):
            record = obj.to_dict()
            return np.array([record[f] for f in self.features], dtype=np.float64)
        velocity = obj.velocity if isinstance(obj, Vehicle) else (0.0, 0.0)
        direction = obj.direction
        table = {
            "x": obj.position[0],
            "y": obj.position[1],
            "vx": velocity[0],
            "vy": velocity[1],
            "cos_h": direction[0],
            "sin_h": direction[1],
        }
        return np.array([table[f] for f in self.features], dtype=np.float64)

    def observe(self) -> dict[str, np.ndarray]:
        vehicle = self.observer_vehicle
        if not vehicle:
            return super().observe()
        own = self._features(vehicle)
        goal = self._features(vehicle.goal)
        return OrderedDict(
            [
                ("observation", own / self.scales),
                ("achieved_goal", own / self.scales),
                ("desired_goal", goal / self.scales),
            ]
        )


class GauntletParkingEnv(ParkingEnv):
    """ParkingEnv with 20 spots, a test-input scene and the numpy observation (module docstring)."""

    def __init__(self, config: dict | None = None, render_mode: str | None = None) -> None:
        self.scene: ParkingScene | None = None
        super().__init__(config, render_mode)

    @classmethod
    def default_config(cls) -> dict:
        config = super().default_config()
        config.update({"spots_per_row": SPOTS_PER_ROW, "numpy_observation": True})
        return config

    def define_spaces(self) -> None:
        if not self.config["numpy_observation"]:
            super().define_spaces()
            return
        settings = {k: v for k, v in self.config["observation"].items() if k != "type"}
        self.observation_type = NumpyKinematicsGoalObservation(self, **settings)
        self.action_type = action_factory(self, self.config["action"])
        self.observation_space = self.observation_type.space()
        self.action_space = self.action_type.space()
        parking = {k: v for k, v in self.PARKING_OBS["observation"].items() if k != "type"}
        self.observation_type_parking = NumpyKinematicsGoalObservation(self, **parking)

    def _reset(self) -> None:
        self._create_road(self.config["spots_per_row"])
        if self.scene is None:
            self._create_vehicles()
        else:
            self._create_scene(self.scene)

    def _create_scene(self, scene: ParkingScene) -> None:
        per_row = self.config["spots_per_row"]
        ego = self.action_type.vehicle_class(self.road, [scene.ego_x, scene.ego_y], scene.ego_heading, 0.0)
        ego.color = VehicleGraphics.EGO_COLOR
        self.road.vehicles.append(ego)
        self.controlled_vehicles = [ego]
        goal_lane = self.road.network.get_lane(spot_lane(scene.goal_spot, per_row))
        ego.goal = Landmark(self.road, goal_lane.position(goal_lane.length / 2, 0), heading=goal_lane.heading)
        self.road.objects.append(ego.goal)
        for spot in scene.parked_spots:
            # a static car-sized obstacle where highway-env would put Vehicle.make_on_lane(longitudinal=4):
            # the same footprint and crash, without stepping 20 idle vehicles and checking their 190 pairs
            lane = self.road.network.get_lane(spot_lane(spot, per_row))
            car = Obstacle(self.road, lane.position(4.0, 0), heading=lane.heading_at(4.0))
            car.LENGTH, car.WIDTH = Vehicle.LENGTH, Vehicle.WIDTH
            car.diagonal = np.sqrt(car.LENGTH**2 + car.WIDTH**2)
            self.road.objects.append(car)
        self._add_walls()

    def _add_walls(self) -> None:
        """ParkingEnv's walls (same size and place: a 70 x 42 m box around the lot)."""
        if not self.config["add_walls"]:
            return
        width, height = 70, 42
        for position, heading, length in (
            ([0, -height / 2], 0.0, width),
            ([0, height / 2], 0.0, width),
            ([-width / 2, 0], np.pi / 2, height),
            ([width / 2, 0], np.pi / 2, height),
        ):
            wall = Obstacle(self.road, position, heading=heading)
            wall.LENGTH, wall.WIDTH = length, 1
            wall.diagonal = np.sqrt(wall.LENGTH**2 + wall.WIDTH**2)
            self.road.objects.append(wall)

    # -- signals ---------------------------------------------------------------------------------
    @property
    def crashed(self) -> bool:
        return bool(self.vehicle.crashed)

    @property
    def goal_error(self) -> float:
        """-compute_reward(achieved, desired): parked when it is below success_goal_reward."""
        obs = self.observation_type_parking.observe()
        return float(-self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))

    @property
    def parked(self) -> bool:
        return self.goal_error < self.config["success_goal_reward"]

    @property
    def ego_position(self) -> np.ndarray:
        return np.asarray(self.vehicle.position, dtype=np.float64)


def _measure(steps: int = 2000, seed: int = 0) -> dict[str, float]:
    """Env steps per CPU-second with highway-env's pandas observation and with ours (random actions, 19 parked cars).

    CPU time, not wall time: the project's machine is shared, and wall-clock rates swing with its load.
    """
    import time

    out: dict[str, float] = {}
    for numpy_obs in (False, True):
        env = GauntletParkingEnv({"numpy_observation": numpy_obs, "duration": 1e9})
        rng = np.random.default_rng(seed)
        env.scene = ParkingScene(1, tuple(range(2, 21)), 0.0, 0.0, 0.0)
        env.reset(seed=seed)
        started = time.process_time()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 2))
            if terminated or truncated:
                env.reset(seed=seed)
        out["numpy" if numpy_obs else "pandas"] = steps / (time.process_time() - started)
    return out


def scene_from_values(values: Mapping[str, Any], flags: Sequence[str]) -> ParkingScene:
    """Builds the scene from a Parking test input (goal_lane, head_ego, parked_0.., x, y)."""
    return ParkingScene(
        goal_spot=int(values["goal_lane"]),
        parked_spots=tuple(i + 1 for i, name in enumerate(flags) if int(values[name])),
        ego_x=float(values["x"]),
        ego_y=float(values["y"]),
        ego_heading=2.0 * np.pi * float(values["head_ego"]),
    )


if "GauntletParking-v0" not in gym.registry:
    gym.register("GauntletParking-v0", entry_point="subjects.parking.env:GauntletParkingEnv")


if __name__ == "__main__":
    print({k: round(v, 1) for k, v in _measure().items()})
