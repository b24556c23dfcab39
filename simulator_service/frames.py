"""Frames of one episode (RenderEpisode): a wrapper that keeps the rendered frame after the reset and after every
`stride`-th step, shrunk to a width limit, at most `max_frames` of them (past the limit it keeps every second frame
and doubles the stride, so the frames always span the whole episode)."""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from typing import Any

import gymnasium as gym
import numpy as np

DEFAULT_FRAMES = 300
MAX_FRAMES = 1000
DEFAULT_WIDTH = 480
MAX_WIDTH = 1920


def headless_gl(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Chooses MuJoCo's OpenGL backend for frames drawn without a display: EGL (Mesa draws on the CPU where there is
    no GPU). Unset, Gymnasium takes GLFW, whose context then fails to draw without a display. A MUJOCO_GL already set
    (the container image's osmesa) or a display (GLFW works there) is left alone. Runs before the first MuJoCo scene
    is drawn: the variable is read when a rendering context is made. The backend chosen; None when left as it was."""
    if environ.get("MUJOCO_GL") or environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    environ["MUJOCO_GL"] = "egl"
    return "egl"


class FrameCapture(gym.Wrapper):
    """Records RGB frames of the episode its environment runs (an env made with render_mode="rgb_array")."""

    def __init__(self, env: gym.Env, stride: int = 1, max_frames: int = DEFAULT_FRAMES, max_width: int = DEFAULT_WIDTH):
        super().__init__(env)
        self.stride = max(1, stride)
        self.max_frames = max(1, max_frames)
        self.max_width = max(1, max_width)
        self.frames: list[np.ndarray] = []
        self._steps = 0

    def reset(self, **kwargs: Any) -> Any:
        out = self.env.reset(**kwargs)
        self.frames, self._steps = [], 0
        self._keep()
        return out

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self._steps += 1
        ended = bool(out[2] or out[3])
        if self._steps % self.stride == 0 or ended:
            self._keep()
        return out

    def signal(self, attribute: str) -> np.ndarray:
        """The wrapped subject environment's signal: trace recording and a subject's search spec (Mario's
        unsafe-state signals) read it at every step and at the episode's end, as they do when nothing renders."""
        return np.asarray(self.env.signal(attribute))  # type: ignore[attr-defined]

    def _keep(self) -> None:
        frame = self.env.render()
        if frame is None:
            return
        image = np.asarray(frame)
        if image.ndim != 3 or image.shape[2] < 3:
            return
        image = image[:, :, :3]
        factor = math.ceil(image.shape[1] / self.max_width)
        if factor > 1:
            image = image[::factor, ::factor]
        self.frames.append(np.ascontiguousarray(image, dtype=np.uint8))
        if len(self.frames) > self.max_frames:
            last = self.frames[-1]
            self.frames = self.frames[::2]
            if self.frames[-1] is not last:  # the episode's latest frame stays: it shows how it ended
                self.frames.append(last)
            self.stride *= 2
