"""The taxi pack's injector (simulator role): ``taxi_state``, the test case as the start state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from simulator_service.plugin_api import Injector, Subject


def taxi_state(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """Taxi grids: the test case is the start state (taxi row and column, passenger location, destination).

    Calls the env's `set_state(taxi_row, taxi_col, passenger, destination)`; `parameters` maps
    those four arguments to the subject's parameter names (default: the same names).
    """
    fields = ("taxi_row", "taxi_col", "passenger", "destination")
    names: Mapping[str, str] = {**{f: f for f in fields}, **dict(options.get("parameters") or {})}

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        env.reset(seed=seed)
        state = env.unwrapped.set_state(*(int(values[names[f]]) for f in fields))  # type: ignore[attr-defined]
        return np.asarray(state, dtype=np.int64)

    return inject
