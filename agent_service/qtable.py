"""Tabular agents: a greedy policy over a Q-table, stored as `model.npz` (a zip of .npy arrays, no pickle).

The file holds `q` (float64, n_observations x n_actions) and `format` ("gauntlet-qtable-1").
A QTablePolicy offers what the agent registry uses of a Stable-Baselines3 model: `load(path,
device=...)`, `observation_space`, `action_space` and `predict(obs, deterministic=True)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

FILE_NAME = "model.npz"
FORMAT = "gauntlet-qtable-1"


class ObservationError(ValueError):
    """Observations a Q-table cannot index (not integers, or out of its range): the caller's mistake."""


class QTablePolicy:
    """Acts greedily: argmax_a Q[obs, a], ties to the lowest action index (numpy's argmax)."""

    def __init__(self, q: np.ndarray) -> None:
        q = np.asarray(q, dtype=np.float64)
        if q.ndim != 2 or q.shape[0] < 1 or q.shape[1] < 1:
            raise ValueError(f"a Q-table must be a non-empty 2-D array (observations x actions), got shape {q.shape}")
        self.q = q
        self.observation_space = spaces.Discrete(q.shape[0])
        self.action_space = spaces.Discrete(q.shape[1])

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """Greedy actions for one observation or a batch (same shape as `observation`).

        `deterministic` is accepted for Stable-Baselines3 compatibility; a greedy Q-table always is.
        """
        obs = np.asarray(observation)
        if obs.size and not np.issubdtype(obs.dtype, np.integer):
            if not np.all(np.equal(np.mod(obs, 1), 0)):
                raise ObservationError(f"a Q-table takes integer observations, got dtype {obs.dtype}")
            obs = obs.astype(np.int64)
        n = self.q.shape[0]
        if obs.size and (obs.min() < 0 or obs.max() >= n):
            raise ObservationError(f"observations must lie in 0..{n - 1}, got values in {obs.min()}..{obs.max()}")
        return np.argmax(self.q[obs], axis=-1).astype(np.int64), None

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as f:  # a file object: np.savez would append '.npz' to a name without it
            np.savez_compressed(f, q=self.q, format=np.array(FORMAT))

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", **_: Any) -> QTablePolicy:
        with np.load(path, allow_pickle=False) as data:
            if "q" not in data or str(data.get("format", "")) != FORMAT:
                raise ValueError(f"{path} is not a Gauntlet Q-table (expected arrays 'q' and format={FORMAT!r})")
            return cls(data["q"])
