"""Q-network agents: a TorchScript network in ``model.pt`` that maps a batch of observations to one Q-value per
discrete action, acting greedily (algorithm "QNETWORK"; "DDQN" names the zoo's Double DQN trainer, whose models load
the same way: offline/mario_dqn.py).

The network's ``forward`` takes the observations as the simulator sends them (e.g. Mario's uint8 frame stack
(B, 4, 84, 84); it scales them itself) and returns float Q-values (B, n_actions); its attribute ``n_actions`` gives
the action count. The observation shape and dtype are not in the file: the model's manifest entry declares them
(``observation_shape``, ``observation_dtype``, ``observation_low``/``observation_high``). A QNetworkPolicy offers
what the agent registry uses of a Stable-Baselines3 model: ``load``, ``observation_space``, ``action_space`` and
``predict(obs, deterministic=True)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from common.errors import InvalidArgument

FILE_NAME = "model.pt"
# CPU convolution kernels pick their code path by batch size, so one observation's action could differ in the
# last float bits (and a near-tie arg-max flip) between lock-steps of different sizes: every forward pass runs on
# blocks of exactly this many rows (padded), and an action does not depend on which other episodes are alive.
BLOCK = 8


class QNetworkPolicy:
    """Acts greedily: argmax_a Q(obs, a), ties to the lowest action index."""

    def __init__(self, module: Any, observation_space: spaces.Box, path: Path) -> None:
        self.module = module
        self.path = path
        self.observation_space = observation_space
        self.action_space = spaces.Discrete(int(module.n_actions))

    @classmethod
    def load(
        cls, path: str | Path, device: str = "cpu", entry: Mapping[str, Any] | None = None, **_: Any
    ) -> QNetworkPolicy:
        import torch

        return cls(torch.jit.load(str(path), map_location=device).eval(), observation_space(entry or {}), Path(path))

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """Greedy actions (int64, shape (B,)) for a batch of observations; `deterministic` is accepted for
        Stable-Baselines3 compatibility (a greedy policy always is)."""
        import torch

        obs = np.asarray(observation)
        shape = self.observation_space.shape
        if obs.ndim != len(shape) + 1 or obs.shape[1:] != shape:
            raise InvalidArgument(
                f"a Q-network of {self.path.parent.name} takes observations of shape (batch, "
                f"{', '.join(map(str, shape))}), got {tuple(obs.shape)}"
            )
        obs = obs.astype(self.observation_space.dtype, copy=False)
        out = []
        with torch.no_grad():
            for start in range(0, len(obs), BLOCK):
                block = obs[start : start + BLOCK]
                rows = len(block)
                if rows < BLOCK:  # pad with copies of the first row; their actions are dropped
                    block = np.concatenate([block, np.repeat(block[:1], BLOCK - rows, axis=0)])
                q = self.module(torch.from_numpy(np.ascontiguousarray(block)))
                out.append(q.argmax(dim=1).numpy()[:rows])
        if not out:
            return np.zeros((0,), dtype=np.int64), None
        return np.concatenate(out).astype(np.int64), None


def observation_space(entry: Mapping[str, Any]) -> spaces.Box:
    """The Box a manifest entry declares for a Q-network (uint8 in 0..255 unless it says otherwise)."""
    shape: Sequence[int] | None = entry.get("observation_shape")
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ValueError(
            "a QNETWORK/DDQN model's manifest entry needs observation_shape: a list of positive integers "
            f"(e.g. [4, 84, 84]), got {shape!r}"
        )
    dtype = np.dtype(str(entry.get("observation_dtype", "uint8")))
    low = entry.get("observation_low", 0 if dtype == np.uint8 else -np.inf)
    high = entry.get("observation_high", 255 if dtype == np.uint8 else np.inf)
    return spaces.Box(low, high, shape=tuple(shape), dtype=dtype)
