"""The Gymnasium backend: any registered Gymnasium environment, with the test case injected after reset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from common.space import ParamValue

# Imported for their side effect: they register GauntletBipedalObstacles-v0 and GauntletTaxiLarge-v0 for gym.make.
from simulator_service.envs import bipedal_obstacles, taxi_large  # noqa: F401
from simulator_service.injectors import make_injector
from simulator_service.subject import Subject


class SubjectEnv(gym.Wrapper):
    """A Gymnasium env that starts every episode from a test case of its subject.

    `reset(options={"values": {...}})` runs that test case; without values a test case
    is drawn uniformly from the parameter space, among the cases the subject's validators accept
    (how the zoo trains its agents).
    """

    def __init__(self, env: gym.Env, subject: Subject, sampling_seed: int = 0) -> None:
        super().__init__(env)
        self.subject = subject
        self._inject = make_injector(subject)
        self._sampler = np.random.default_rng(sampling_seed)
        self.current_values: Mapping[str, ParamValue] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        values = (options or {}).get("values")
        if values is None:
            values = self.subject.sample(self._sampler)  # uniform, redrawn until the validators accept it
        obs = self._inject(self.env, values, seed)
        self.current_values = values
        return obs, {"test_case": values}

    def signal(self, attribute: str) -> np.ndarray:
        """Reads a dotted attribute path of the unwrapped env, e.g. `game_over` or `data.qpos.2`."""
        value: Any = self.env.unwrapped
        for part in attribute.split("."):
            value = value[int(part)] if part.isdigit() else getattr(value, part)
        return np.asarray(value, dtype=np.float64)


def make_env(subject: Subject, render_mode: str | None = None) -> SubjectEnv:
    env = gym.make(
        subject.env_id, max_episode_steps=subject.max_steps, render_mode=render_mode, **dict(subject.env_kwargs)
    )
    return SubjectEnv(env, subject)
