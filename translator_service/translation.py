"""Running one translator on a batch: input checks by the translator's kind, fixed-size blocks, uint8 output.

A manifest entry (translator_service/models/manifest.yaml) declares ``input_kind``:

* ``rgb``: uint8 images (batch, height, width, channels), scaled to [-1, 1] for the network;
* ``label_map``: uint8 label maps (batch, height, width) of class indices, given to the network as int64 (it
  one-hot encodes them itself, as DESIGNATE's pix2pixHD takes the simulator's segmentation). The entry's
  ``image: {height, width}`` and ``classes`` fix what it accepts.

Either way the network answers float images (batch, 3, height, width) in [-1, 1], returned as uint8 RGB
(batch, height, width, 3). Blocks of a fixed size keep a translation independent of the batch it came in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from common.errors import InvalidArgument

BLOCK = 8


def check_input(name: str, entry: Mapping[str, Any], images: np.ndarray) -> None:
    """InvalidArgument naming what the translator takes when `images` is not that."""
    kind = str(entry.get("input_kind", "rgb"))
    if kind == "label_map":
        size = entry.get("image") or {}
        shape = (int(size.get("height", 0)), int(size.get("width", 0)))
        classes = list(entry.get("classes") or [])
        if images.dtype != np.uint8 or images.ndim != 3 or (all(shape) and tuple(images.shape[1:]) != shape):
            raise InvalidArgument(
                f"translator {name!r} takes uint8 label maps of shape (batch, {shape[0]}, {shape[1]}), "
                f"got {images.dtype} {tuple(images.shape)}"
            )
        if classes and images.size and int(images.max()) >= len(classes):
            raise InvalidArgument(
                f"translator {name!r}: label value {int(images.max())} is outside its class table "
                f"0..{len(classes) - 1} ({', '.join(classes)})"
            )
        return
    if images.dtype != np.uint8 or images.ndim != 4:
        raise InvalidArgument(
            f"translator {name!r} takes uint8 images (batch, height, width, channels), "
            f"got {images.dtype} {tuple(images.shape)}"
        )


def translate(entry: Mapping[str, Any], model: Any, images: np.ndarray) -> np.ndarray:
    """The translated batch, uint8 (batch, height, width, 3)."""
    import torch

    label_maps = str(entry.get("input_kind", "rgb")) == "label_map"
    out = []
    with torch.no_grad():
        for start in range(0, len(images), BLOCK):
            block = images[start : start + BLOCK]
            rows = len(block)
            if rows < BLOCK:  # padded with copies of the first item; their translations are dropped
                block = np.concatenate([block, np.repeat(block[:1], BLOCK - rows, axis=0)])
            if label_maps:
                x = torch.from_numpy(block.astype(np.int64))
            else:
                x = torch.from_numpy(np.ascontiguousarray(block)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
            y = model(x).clamp(-1, 1)
            out.append(((y + 1.0) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()[:rows])
    if not out:
        return np.zeros((0, *images.shape[1:3], 3), dtype=np.uint8)
    return np.concatenate(out)
