"""The "real-world" domain of the image subjects: our substitute for Cityscapes (urban) and AI4MARS (Mars).

DESIGNATE ("Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Sections III-IV) trains both
the DNN under test and the pix2pixHD translator on a real dataset of <image, segmentation> pairs. Neither dataset
can be downloaded here, so this module generates one, deterministically from a seed:

* the label maps come from the same procedural scenes as the simulator (subjects/urban/scene.py)
  but from OTHER layouts (layout seeds 100, 101, ...; the subjects render layout 0) and random camera poses, as
  Cityscapes' cities differ from AirSim's town;
* each image is painted from its label map by a DIFFERENT renderer than the simulator's flat shading: per-class
  textures (asphalt grain, paving joints, window grids, foliage, car bodies of random paint with dark windows and
  shadows), a vertical sky gradient, a random lighting ramp, per-image colour shifts, sensor noise and blur.

The gap between simulator images and these "real" ones is what the translator (trained on these pairs) closes.
Splits: train / val / test with disjoint layouts, written as one .npz per split (``labels`` uint8 (N, H, W),
``images`` uint8 (N, H, W, 3)) under runs/ at training time; nothing here is committed but the code and the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from subjects.urban.scene import CLASSES, Camera, build_scene, on_urban_road, render

SPLITS = ("train", "val", "test")
# first layout seed of each split; a split uses layouts first .. first + LAYOUTS_PER_SPLIT - 1
FIRST_LAYOUT = {"train": 100, "val": 200, "test": 300}
LAYOUTS_PER_SPLIT = 8

# "real" base colours per class (RGB): deliberately unlike the simulator's palette
URBAN_REAL = np.array(
    [[72, 70, 74], [128, 118, 112], [118, 102, 92], [52, 92, 38], [170, 195, 220], [40, 60, 110]], dtype=np.float32
)
MARS_REAL = np.array([[150, 95, 62], [196, 150, 100], [98, 70, 55], [70, 52, 44], [196, 168, 140]], dtype=np.float32)


@dataclass(frozen=True)
class DomainSpec:
    kind: str  # "urban" or "mars"
    seed: int
    sizes: dict[str, int]  # split -> number of pairs
    height: int = 64
    width: int = 128


def random_pose(kind: str, rng: np.random.Generator) -> tuple[float, float, float, float]:
    """A camera pose like the subjects': on a road lane (urban, level camera) or anywhere with a tilt (Mars)."""
    if kind == "urban":
        while True:
            x, y = float(rng.uniform(-10, 90)), float(rng.uniform(-12, 12))
            if on_urban_road(x, y, margin=0.3):
                return x, y, float(rng.uniform(-180, 180)), 0.0
    x, y = (float(v) for v in rng.uniform(-40, 40, 2))
    return x, y, float(rng.uniform(-180, 180)), float(rng.uniform(-35, 15))


def _blur(image: np.ndarray) -> np.ndarray:
    padded = np.pad(image, ((1, 1), (1, 1), (0, 0)), mode="edge")
    h, w = image.shape[:2]
    total = np.zeros(image.shape, dtype=np.float32)
    for i in range(3):
        for j in range(3):
            total += padded[i : i + h, j : j + w]
    return total / 9.0


def paint(kind: str, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The "real" image of a label map: textures, lighting, colour shift, noise and blur (uint8 (H, W, 3))."""
    h, w = labels.shape
    base = (URBAN_REAL if kind == "urban" else MARS_REAL)[labels].copy()
    rows, cols = np.indices((h, w)).astype(np.float32)
    grain = rng.normal(0.0, 1.0, (h, w)).astype(np.float32)
    out = base * (1.0 + 0.06 * grain[..., None])
    names = CLASSES[kind]
    sky = labels == names.index("sky")
    horizon = rows / max(h - 1, 1)
    zenith, low_sky = ((120, 160, 215), (235, 235, 235)) if kind == "urban" else ((150, 110, 80), (225, 190, 150))
    out[sky] = np.array(zenith, dtype=np.float32) * (1 - horizon[sky, None]) + np.array(low_sky) * horizon[sky, None]
    if kind == "urban":
        building = labels == names.index("building")
        period_x, period_y = int(rng.integers(5, 9)), int(rng.integers(4, 7))
        windows = ((cols % period_x) < period_x // 2) & ((rows % period_y) < period_y // 2)
        out[building & windows] *= 0.55
        vegetation = labels == names.index("vegetation")
        leaves = rng.uniform(0.6, 1.3, (h, w)).astype(np.float32)
        out[vegetation] *= leaves[vegetation, None]
        car = labels == names.index("car")
        if car.any():
            paint_rgb = rng.uniform(30, 230, 3).astype(np.float32)
            out[car] = paint_rgb * (1.0 + 0.05 * grain[car, None])
            # dark glass in the upper part of each car column, a shadow band at its bottom
            top = np.where(car.any(axis=0), car.argmax(axis=0), h)
            bottom = np.where(car.any(axis=0), h - 1 - car[::-1].argmax(axis=0), -1)
            span = np.maximum(bottom - top, 1)
            rel = (rows - top[None, :]) / span[None, :]
            out[car & (rel < 0.4)] = np.array([35, 40, 50], dtype=np.float32)
            out[car & (rel > 0.85)] *= 0.45
        road = labels == names.index("road")
        out[road & ((cols + rows * 3) % 23 == 0)] += 25  # tar patches
    else:
        rock = labels == names.index("big_rock")
        out[rock] *= 0.7 + 0.5 * (1 - horizon[rock, None])
        sand = labels == names.index("sand")
        out[sand] *= (1.0 + 0.08 * np.sin(cols[sand] * 0.9 + rows[sand] * 0.3))[:, None]
    # lighting ramp in a random direction, per-image colour shift and gamma, noise, then blur
    angle = rng.uniform(0, 2 * math.pi)
    ramp = ((cols / w - 0.5) * math.cos(angle) + (rows / h - 0.5) * math.sin(angle)).astype(np.float32)
    out *= (1.0 + rng.uniform(0.15, 0.35) * ramp)[..., None]
    out *= rng.uniform(0.85, 1.15, 3).astype(np.float32)
    out = 255.0 * (np.clip(out, 0, 255) / 255.0) ** rng.uniform(0.8, 1.25)
    out += rng.normal(0.0, rng.uniform(2.0, 7.0), out.shape).astype(np.float32)
    if rng.random() < 0.6:
        out = _blur(out)
    return np.clip(out, 0, 255).round().astype(np.uint8)


def generate_split(spec: DomainSpec, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels (N, H, W), images (N, H, W, 3)) of one split; the same spec always gives the same arrays."""
    n = spec.sizes[split]
    camera = Camera(height=spec.height, width=spec.width)
    scenes = [build_scene(spec.kind, FIRST_LAYOUT[split] + i) for i in range(LAYOUTS_PER_SPLIT)]
    rng = np.random.default_rng([spec.seed, SPLITS.index(split), 0 if spec.kind == "urban" else 1])
    labels = np.zeros((n, spec.height, spec.width), dtype=np.uint8)
    images = np.zeros((n, spec.height, spec.width, 3), dtype=np.uint8)
    for i in range(n):
        x, y, yaw, pitch = random_pose(spec.kind, rng)
        labels[i] = render(scenes[i % LAYOUTS_PER_SPLIT], camera, x, y, yaw, pitch).labels
        images[i] = paint(spec.kind, labels[i], rng)
    return labels, images


def ensure_dataset(spec: DomainSpec, folder: Path) -> dict[str, Path]:
    """Writes each split's .npz into `folder` unless a file of the same spec is there; returns split -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in SPLITS:
        path = folder / f"{spec.kind}-seed{spec.seed}-{split}{spec.sizes[split]}-{spec.height}x{spec.width}.npz"
        if not path.exists():
            labels, images = generate_split(spec, split)
            partial = path.with_suffix(".partial.npz")
            np.savez_compressed(partial, labels=labels, images=images)
            partial.replace(path)
        paths[split] = path
    return paths


def load_split(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as data:
        return data["labels"], data["images"]
