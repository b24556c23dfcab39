"""The `procedural_scene` backend: DESIGNATE's image subjects (urban, Mars) rendered by a numpy camera.

A test case is a camera pose: parameters ``x``, ``y``, ``yaw`` (degrees) and, when the subject declares it,
``pitch`` (degrees; 0 otherwise). An episode is ONE step: ``reset`` renders the pose, the observation is the
simulator's RGB image, the agent answers with label maps, and ``step`` ends the episode.

Signals (the contract of every image backend, whatever renders the scene; shapes for the subject's
``env_kwargs.image`` {height: H, width: W}, class indices from ``env_kwargs.classes``):

    image                 uint8 (H, W, 3)  the simulator's RGB image (also the observation), row-major, RGB order
    label_map             uint8 (H, W)     the ground truth: class index per pixel
    on_road               uint8 ()         1 when the ego stands inside a road lane (urban), always 1 on Mars
    realistic_image       uint8 (H, W, 3)  the translator's image of label_map; shape (0,) without a translator
    prediction_simulated  uint8 (H, W)     the DNN's label map on `image`
    prediction_realistic  uint8 (H, W)     the DNN's label map on `realistic_image`; shape (0,) without one
    features              float32 (D,)     the DNN encoder's features of the image the DNN is judged on
                                           (realistic_image with a translator, image without); (0,) if not asked
    t_relevance           float64 ()       the subject's delta_IoU threshold (env_kwargs.t_relevance)
    iou_threshold         float64 ()       IoU (or mIoU) below this fails (env_kwargs.iou_threshold)
    min_class_share       float64 ()       judged class (car / sky) share below this: irrelevant
                                           (env_kwargs.min_class_share; 0 = the paper's rule)

A backend produces image, label_map and on_road; the simulator's image stage (simulator_service/image_stage.py)
fills realistic_image and features before the step, and the step stores the two predictions: the action is
(H, W) (the prediction on `image`) or (2, H, W) (on `image`, then on `realistic_image`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from simulator_service.plugin_api import Subject
from subjects.urban.lanes import inside_lanes, parse_lanes
from subjects.urban.scene import CLASSES, Camera, build_scene, render

EMPTY_U8 = np.zeros((0,), dtype=np.uint8)


class SceneEnv(gym.Env):
    """One camera in one procedural scene; see the module docstring for its signals."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, subject: Subject, render_mode: str | None = None) -> None:
        kwargs = dict(subject.env_kwargs)
        kind = str(kwargs.get("scene", ""))
        if kind not in CLASSES:
            raise ValueError(f"subject {subject.name}: env_kwargs.scene must be one of {', '.join(CLASSES)}")
        declared = tuple(kwargs.get("classes") or ())
        if declared != CLASSES[kind]:
            raise ValueError(
                f"subject {subject.name}: env_kwargs.classes {list(declared)} differ from the {kind} renderer's "
                f"class table {list(CLASSES[kind])}"
            )
        size = kwargs.get("image") or {}
        self.camera = Camera(
            height=int(size.get("height", 64)),
            width=int(size.get("width", 128)),
            fov_deg=float(kwargs.get("fov_deg", 90.0)),
            elevation=float(kwargs.get("camera_elevation", 1.6)),
        )
        self.scene = build_scene(kind, int(kwargs.get("layout_seed", 0)))
        self.classes = CLASSES[kind]
        self.t_relevance = np.float64(kwargs.get("t_relevance", 0.1))
        self.iou_threshold = np.float64(kwargs.get("iou_threshold", 0.5))
        self.min_class_share = np.float64(kwargs.get("min_class_share", 0.0))
        if not 0.0 <= float(self.min_class_share) < 1.0:
            raise ValueError(f"subject {subject.name}: env_kwargs.min_class_share must be in [0, 1)")
        lanes = [v.options.get("lanes") for v in subject.validators if v.kind == "road_lanes"]
        self._lanes = parse_lanes(lanes[0]) if lanes else []
        self.render_mode = render_mode
        h, w = self.camera.height, self.camera.width
        self.observation_space = gym.spaces.Box(0, 255, (h, w, 3), dtype=np.uint8)
        self.action_space = gym.spaces.Box(0, len(self.classes) - 1, (h, w), dtype=np.uint8)
        self.current_values: Mapping[str, Any] = {}
        self._sampler = np.random.default_rng(0)
        self.subject = subject
        self._clear()

    def _clear(self) -> None:
        h, w = self.camera.height, self.camera.width
        self.image = np.zeros((h, w, 3), dtype=np.uint8)
        self.label_map = np.zeros((h, w), dtype=np.uint8)
        self.on_road = np.uint8(0)
        self.realistic_image = EMPTY_U8
        self.features = np.zeros((0,), dtype=np.float32)
        self.prediction_simulated = EMPTY_U8
        self.prediction_realistic = EMPTY_U8

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        values = (options or {}).get("values")
        if values is None:  # training-style use without a test case: a uniform valid pose
            values = self.subject.sample(self._sampler)
        self._clear()
        x, y = float(values["x"]), float(values["y"])
        shot = render(self.scene, self.camera, x, y, float(values["yaw"]), float(values.get("pitch", 0.0)))
        self.image, self.label_map = shot.image, shot.labels
        self.on_road = np.uint8(inside_lanes(self._lanes, x, y) if self._lanes else 1)
        self.current_values = values
        return self.image, {"test_case": values}

    def attach_views(self, realistic_image: np.ndarray | None, features: np.ndarray | None) -> None:
        """The image stage's products for this episode (before the step)."""
        self.realistic_image = EMPTY_U8 if realistic_image is None else realistic_image
        self.features = np.zeros((0,), dtype=np.float32) if features is None else features.astype(np.float32)

    def translator_input(self) -> np.ndarray:
        """What the translator turns into the realistic image: the ground-truth label map (as in the paper)."""
        return self.label_map

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        predictions = np.asarray(action, dtype=np.uint8)
        if predictions.ndim == 2:
            predictions = predictions[None]
        self.prediction_simulated = predictions[0]
        self.prediction_realistic = predictions[1] if len(predictions) > 1 else EMPTY_U8
        return self.image, 0.0, True, False, {}

    def render(self) -> np.ndarray:
        return self.image

    def signal(self, attribute: str) -> np.ndarray:
        return np.asarray(getattr(self, attribute))


def make_env(subject: Subject, render_mode: str | None = None) -> SceneEnv:
    return SceneEnv(subject, render_mode=render_mode)
