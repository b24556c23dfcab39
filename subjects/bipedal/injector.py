"""The bipedal pack's injector (simulator role): ``terrain_obstacles``, the test case as the terrain's obstacles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from simulator_service.plugin_api import Injector, Subject


def terrain_obstacles(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """Obstacle terrains (BipedalWalker): the test case's integer slots, in the order of `parameters` (default: the
    space's order), are the obstacle codes of `reset(options={"obstacles": [...]})` (env.py). The env builds its
    terrain from them with a fixed terrain seed."""
    names: list[str] = list(options.get("parameters") or subject.space.names)

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        obs, _ = env.reset(seed=seed, options={"obstacles": [int(values[n]) for n in names]})
        return obs

    return inject
