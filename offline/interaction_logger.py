"""The training environments' wrapper that judges each finished episode and appends it to the interaction log.

Every trainer (Stable-Baselines3 recipes in offline/training.py, tabular Q-learning in offline/qlearning.py) wraps
its environments in it, so an agent's interaction log (what Indago's surrogates learn from) has one format and one
verdict rule, the subject's own oracle.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from generator_service.api import InteractionLog
from oracle_service.api import Episode, get_oracle
from simulator_service.api import Subject, TraceRecorder


class InteractionLogger(gym.Wrapper):
    """Judges each finished training episode with the subject's oracle and appends it to the log."""

    def __init__(self, env: gym.Env, subject: Subject, log: InteractionLog) -> None:
        super().__init__(env)
        self._oracle = get_oracle(subject.oracle)
        self._recorder = TraceRecorder(subject, list(self._oracle.required_signals))
        self._log = log
        self._obs: Any = None
        self._reward = 0.0
        self._steps = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._obs, info = self.env.reset(**kwargs)
        self._recorder.start()
        self._reward, self._steps = 0.0, 0
        return self._obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._recorder.step(self.env, self._obs, np.asarray(action), float(reward))
        self._obs = obs
        self._reward += float(reward)
        self._steps += 1
        self._log.timesteps += 1
        if terminated or truncated:
            signals = self._recorder.finish(self.env, obs)
            verdict = self._oracle.evaluate(Episode(self._steps, self._reward, terminated, truncated, signals))
            values = {k: v for k, v in self.env.current_values.items()}  # type: ignore[attr-defined]
            self._log.write(values, verdict.failed, verdict.margin, self._reward, self._steps)
        return obs, reward, terminated, truncated, info
