"""Segmentation models under test (DESIGNATE's DNN): a TorchScript network in ``model.pt``, algorithm "SEGMENTATION".

The network (trained by offline/image_training.py) takes uint8 images (B, H, W, 3) and returns uint8 label maps
(B, H, W); its exported ``embed`` method gives the frozen encoder's feature vectors (B, D) and its attributes
``image_shape`` ([H, W, 3]) and ``n_classes`` describe it. A SegmentationModel offers what the agent registry uses
of a Stable-Baselines3 model (``load``, ``observation_space``, ``action_space``), so it is served through Act /
ActStream like any policy: the observation is the image, the "action" is the label map.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from common.errors import InvalidArgument

# CPU convolution kernels may pick their code path by batch size, and a last-bit difference can flip an arg-max
# pixel, so every forward pass runs on blocks of exactly this many images (padded): an image's label map does not
# depend on which other images share its lock-step.
BLOCK = 8


class SegmentationModel:
    def __init__(self, module: Any, path: Path) -> None:
        self.module = module
        self.path = path
        height, width, channels = (int(v) for v in module.image_shape)
        self.image_shape = (height, width, channels)
        self.n_classes = int(module.n_classes)
        self.observation_space = spaces.Box(0, 255, self.image_shape, dtype=np.uint8)
        self.action_space = spaces.Box(0, self.n_classes - 1, (height, width), dtype=np.uint8)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", **_: Any) -> SegmentationModel:
        import torch

        return cls(torch.jit.load(str(path), map_location=device).eval(), Path(path))

    def _check(self, images: np.ndarray) -> None:
        if images.dtype != np.uint8 or images.ndim != 4 or tuple(images.shape[1:]) != self.image_shape:
            h, w, c = self.image_shape
            raise InvalidArgument(
                f"a segmentation model takes uint8 images of shape (batch, {h}, {w}, {c}), "
                f"got {images.dtype} {tuple(images.shape)}"
            )

    def _blocks(self, images: np.ndarray, method: str) -> np.ndarray:
        import torch

        self._check(images)
        out = []
        with torch.no_grad():
            for start in range(0, len(images), BLOCK):
                block = images[start : start + BLOCK]
                rows = len(block)
                if rows < BLOCK:  # pad with copies of the first image; their answers are dropped
                    block = np.concatenate([block, np.repeat(block[:1], BLOCK - rows, axis=0)])
                result = getattr(self.module, method)(torch.from_numpy(np.ascontiguousarray(block)))
                out.append(result.numpy()[:rows])
        if not out:
            return np.zeros((0, *self.action_space.shape), dtype=np.uint8)
        return np.concatenate(out)

    def segment(self, images: np.ndarray) -> np.ndarray:
        """uint8 label maps (B, H, W) for uint8 images (B, H, W, 3)."""
        return self._blocks(images, "forward").astype(np.uint8)

    def embed(self, images: np.ndarray) -> np.ndarray:
        """float32 feature vectors (B, D) of the frozen encoder."""
        if len(images) == 0:
            self._check(images)
            return np.zeros((0, 0), dtype=np.float32)
        return self._blocks(images, "embed").astype(np.float32)
