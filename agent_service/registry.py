"""Models under test, loaded lazily by name from a model root (never from a request payload).

A model root holds `manifest.yaml` (name -> subject, algorithm, training metadata) and one
folder per model (or, with `files: OTHER`, the folder of another listed model: one network listed for a
second subject) with `model.zip` (Stable-Baselines3), `model.npz` (a tabular Q-table, see
agent_service/qtable.py) or `model.pt` (TorchScript: a segmentation network, or a Q-network, see
agent_service/qnetwork.py); the algorithm decides which. Only names listed in the manifest can be loaded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agent_service.algorithms import QNETWORKS, TABULAR, algorithm_class, model_file_name
from agent_service.inference import predict_actions
from agent_service.qtable import ObservationError
from agent_service.segmentation import SegmentationModel
from common.errors import FailedPrecondition, InvalidArgument, NotFound
from common.space_spec import flat_shape
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

    def folder(self, name: str) -> Path:
        """The folder of model `name`'s files: its own (root/name), or the one its `files` field names: the same
        trained network listed again for another subject it fits (e.g. a widened input domain), without a copy.
        The named entry must be listed, have its own folder and the same algorithm."""
        entry = self.entry(name)
        files = entry.metadata.get("files", name)
        if files != name:
            target = self.entries.get(files) if isinstance(files, str) else None
            if target is None or "files" in target.metadata or target.algorithm != entry.algorithm:
                raise FailedPrecondition(
                    f"model {name!r}: files must name another listed {entry.algorithm} model with its own folder, "
                    f"got {shown(str(files))}"
                )
        return self.root / str(files)

    def load(self, name: str) -> Any:
        entry = self.entry(name)
        with self._lock:
            if name not in self._loaded:
                path = self.folder(name) / model_file_name(entry.algorithm)
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

    def preload(self, names: Sequence[str] | None = None) -> None:
        """Loads these models (None: every listed one); a broken or unknown one is logged and left to fail on use
        with NOT_FOUND/INTERNAL."""
        for name in self.entries if names is None else names:
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
                actions = predict_actions(model, observations)
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
