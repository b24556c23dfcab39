"""The Gymnasium backend: any registered Gymnasium environment, with the test case injected after reset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from common.errors import bounded
from common.space import ParamValue
from simulator_service.injectors import make_injector
from simulator_service.subject import Subject, SubjectError


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

    def check_first_observation(self, seed: int = 0) -> None:
        """Refuses the subject (SubjectError naming both) when its first observation does not fit the observation space.

        Runs one seeded sample input. The simulator calls it once per subject, when it first describes the subject
        (every campaign's preflight does), and training calls it before it builds a model: a subject whose
        injector returns the wrong thing (e.g. a state where the env observes something else) fails there, before
        any test runs, instead of as an agent's shape error mid-campaign.
        """
        values = self.subject.sample(np.random.default_rng(seed))
        obs, _ = self.reset(seed=seed, options={"values": values})
        if not self.observation_space.contains(obs):
            raise SubjectError(
                f"subject {self.subject.name}: its injector ({self.subject.injector['kind']}) gives a first "
                f"observation {describe_observation(obs)}, which does not fit the environment's observation space "
                f"{bounded(repr(self.observation_space), 400)}"
            )

    def signal(self, attribute: str) -> np.ndarray:
        """Reads a dotted attribute path of the unwrapped env, e.g. `game_over` or `data.qpos.2`."""
        value: Any = self.env.unwrapped
        for part in attribute.split("."):
            value = value[int(part)] if part.isdigit() else getattr(value, part)
        return np.asarray(value, dtype=np.float64)


def describe_observation(obs: Any) -> str:
    """Shape, dtype and value range of an observation (a Dict one entry by entry), for error messages."""
    if isinstance(obs, Mapping):
        return "{" + ", ".join(f"{k}: {describe_observation(v)}" for k, v in sorted(obs.items())) + "}"
    array = np.asarray(obs)
    if array.size == 0 or not np.issubdtype(array.dtype, np.number):
        return f"of shape {array.shape} and dtype {array.dtype}"
    return f"of shape {array.shape}, dtype {array.dtype}, values in [{array.min():.6g}, {array.max():.6g}]"


def make_env(subject: Subject, render_mode: str | None = None) -> SubjectEnv:
    env = gym.make(
        subject.env_id, max_episode_steps=subject.max_steps, render_mode=render_mode, **dict(subject.env_kwargs)
    )
    return SubjectEnv(env, subject)


class RemoteSubjectEnv(SubjectEnv):
    """A SubjectEnv whose env runs on a remote simulator host (Donkey, AirSim): describing the subject must not need
    the host, so its first-observation check does nothing (the host's own observations are checked per step)."""

    def check_first_observation(self, seed: int = 0) -> None:
        return None
