"""Models under test, loaded lazily by name from a model root (never from a request payload).

A model root holds `manifest.yaml` (name -> subject, algorithm, training metadata) and one
folder per model with `model.zip` (Stable-Baselines3), `model.npz` (a tabular Q-table, see
agent_service/qtable.py) or `model.pt` (TorchScript: a segmentation network, or a Q-network, see
agent_service/qnetwork.py); the algorithm decides which. Only names listed in the manifest can be loaded.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agent_service.algorithms import QNETWORKS, TABULAR, algorithm_class, model_file_name
from agent_service.qtable import ObservationError
from agent_service.segmentation import SegmentationModel
from common.errors import FailedPrecondition, InvalidArgument, NotFound
from common.space_spec import flat_shape, unpack_observations
from common.validation import shown

DEFAULT_MODEL_ROOT = Path(__file__).parent / "zoo"
# A served model only acts: an off-policy model saved with a replay buffer that needs its training env (HER
# relabels goals through env.compute_reward) loads with a minimal plain buffer instead. Keys a model did not
# save (e.g. PPO's) are ignored by Stable-Baselines3.
SERVE_ONLY: dict[str, Any] = {"replay_buffer_class": None, "replay_buffer_kwargs": {}, "buffer_size": 1}
log = logging.getLogger("agent")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    subject: str
    algorithm: str
    description: str
    metadata: dict[str, Any]


class ModelRegistry:
    def __init__(self, root: Path = DEFAULT_MODEL_ROOT) -> None:
        self.root = root
        manifest = root / "manifest.yaml"
        data = yaml.safe_load(manifest.read_text()) if manifest.exists() else {}
        self.entries = {
            name: ModelEntry(name, str(e["subject"]), str(e["algorithm"]), str(e.get("description", "")), dict(e))
            for name, e in (data.get("models") or {}).items()
        }
        self._loaded: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._act_locks = {name: threading.Lock() for name in self.entries}

    def entry(self, name: str) -> ModelEntry:
        if name not in self.entries:
            known = ", ".join(sorted(self.entries)) or "none"
            raise NotFound(f"unknown model {shown(name)}; installed models: {known} (model root {self.root})")
        return self.entries[name]

    def load(self, name: str) -> Any:
        entry = self.entry(name)
        with self._lock:
            if name not in self._loaded:
                path = self.root / name / model_file_name(entry.algorithm)
                if not path.exists():
                    others = sorted(p.name for p in path.parent.glob("model.*"))
                    hint = f" (the folder holds {', '.join(others)}; is the algorithm right?)" if others else ""
                    raise NotFound(f"model {name!r} ({entry.algorithm}) is in the manifest but {path} is missing{hint}")
                try:
                    loader = algorithm_class(entry.algorithm)
                except KeyError as exc:  # the manifest names an algorithm this service cannot load
                    raise FailedPrecondition(str(exc.args[0])) from None
                extra: dict[str, Any] = {"custom_objects": SERVE_ONLY}
                if entry.algorithm in TABULAR:
                    extra = {}
                elif entry.algorithm in QNETWORKS:  # the observation space comes from the manifest entry
                    extra = {"entry": entry.metadata}
                self._loaded[name] = loader.load(path, device="cpu", **extra)
            return self._loaded[name]

    def preload(self) -> None:
        """Loads every listed model; a broken one is logged and left to fail on use with NOT_FOUND/INTERNAL."""
        for name in self.entries:
            try:
                self.load(name)
            except Exception:
                log.exception("model %s could not be preloaded", name)

    def act(self, name: str, observations: np.ndarray) -> np.ndarray:
        model = self.load(name)
        if isinstance(model, SegmentationModel):  # images in, label maps out (uint8: no int64 widening)
            with self._act_locks[name]:
                return model.segment(observations)
        expected = flat_shape(model.observation_space)  # a Dict space arrives packed (common/space_spec.py)
        if observations.ndim != len(expected) + 1 or tuple(observations.shape[1:]) != expected:
            raise InvalidArgument(
                f"model {name!r} expects observations of shape (batch, {', '.join(map(str, expected))}), "
                f"got {tuple(observations.shape)}"
            )
        # SB3 policies keep the last action distribution on the shared module: one batch at a time per model
        with self._act_locks[name]:
            try:
                actions = _predict_fixed_rows(model, observations)
            except ObservationError as exc:
                raise InvalidArgument(str(exc)) from None
            except ValueError as exc:
                # torch's distribution check: finite but extreme observations (float32 overflow) gave NaN outputs;
                # its message dumps whole tensors, so only the gist is passed on
                if not str(exc).startswith("Expected parameter"):
                    raise
                raise InvalidArgument(
                    f"model {name!r} computes no valid action for these observations (its outputs are not finite); "
                    "are they far outside the range it was trained on?"
                ) from None
        return actions.astype(np.int64) if np.issubdtype(actions.dtype, np.integer) else actions.astype(np.float32)

    def embed(self, name: str, images: np.ndarray) -> np.ndarray:
        """The model's encoder features of a batch of images (segmentation models only)."""
        model = self.load(name)
        if not isinstance(model, SegmentationModel):
            raise FailedPrecondition(
                f"model {name!r} ({self.entry(name).algorithm}) has no image encoder; only SEGMENTATION models embed"
            )
        with self._act_locks[name]:
            return model.embed(images)


# CPU matmul kernels pick their code path by batch shape, so one observation's action could differ in the
# last float bits between a lock-step batch of 3 and one of 64 (measured: BipedalWalker PPO at batch 1-3,
# MountainCar SAC at 2, 3, 79, 97, ...), and a walker turns such bits into another verdict. Every forward
# pass therefore runs on a block of one of these row counts (the smallest that holds the batch, padded), at
# which every bundled model gives each row the same bits at every row position and every rung (measured on
# random inputs, kept by tests/agent_service/test_zoo.py): an input's action no longer depends on which other
# episodes are alive. A batch over the top rung runs in blocks of it. The smaller rungs spare a lock-step group of 32
# the compute of 128 rows.
INFERENCE_BLOCKS = (16, 32, 64, 128)
INFERENCE_ROWS = INFERENCE_BLOCKS[-1]


def block_rows(n: int) -> int:
    """Rows of the padded block that a batch of n (1 <= n <= INFERENCE_ROWS) observations runs in."""
    return next(rows for rows in INFERENCE_BLOCKS if rows >= n)


def _predict_fixed_rows(model: Any, observations: np.ndarray) -> np.ndarray:
    n = len(observations)
    if n == 0:  # an empty batch: no forward pass (a policy cannot reshape 0 rows), no actions
        space = model.action_space
        return np.zeros((0, *(space.shape or ())), dtype=space.dtype or np.float32)
    blocks = []
    for start in range(0, n, INFERENCE_ROWS):
        rows = min(INFERENCE_ROWS, n - start)
        # one writable copy of the wire buffer, padded with copies of the first row (their actions are dropped)
        block = np.empty((block_rows(rows), *observations.shape[1:]), dtype=observations.dtype)
        block[:rows] = observations[start : start + rows]
        block[rows:] = observations[start]
        blocks.append(_predict(model, block)[:rows])
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def _predict(model: Any, observations: np.ndarray) -> np.ndarray:
    """Deterministic actions for a batch; the same result as `model.predict(obs, deterministic=True)`.

    For Box observations it calls the policy directly under inference_mode, skipping predict()'s
    per-call checks and conversions (measurable at one call per lock-step).
    """
    from gymnasium import spaces

    if isinstance(model.observation_space, spaces.Dict):  # goal-conditioned (HER): restore the dict first
        actions, _ = model.predict(unpack_observations(model.observation_space, observations), deterministic=True)
        return np.asarray(actions)
    # e.g. Discrete (SB3 models and Q-tables alike), or a model that is no SB3 policy (a Q-network)
    if not isinstance(model.observation_space, spaces.Box) or not hasattr(model, "policy"):
        actions, _ = model.predict(observations, deterministic=True)
        return np.asarray(actions)
    import torch

    policy = model.policy
    if policy.training:  # once: set_training_mode walks every submodule (~40 % of a CartPole policy's act here)
        policy.set_training_mode(False)
    with torch.inference_mode():
        obs = torch.from_numpy(np.asarray(observations, dtype=np.float32))  # the padded block is a writable copy
        actions = policy._predict(obs, deterministic=True).numpy()
    if isinstance(model.action_space, spaces.Box):
        actions = actions.reshape((-1, *model.action_space.shape))
        if policy.squash_output:
            actions = policy.unscale_action(actions)
        else:
            actions = np.clip(actions, model.action_space.low, model.action_space.high)
    else:
        actions = actions.reshape((-1, *model.action_space.shape))
    return actions
