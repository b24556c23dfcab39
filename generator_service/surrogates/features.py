"""What a surrogate's network reads: the encoded configuration, or that plus the scene it implies.

Indago's surrogate ("Testing of Deep Reinforcement Learning Agents with Surrogate Models", Sec. 3.1: the surrogate
reads the environment configuration) takes the encoded configuration as its input; that is the kind ``config``
and the default. The kind ``scene`` is a documented deviation for goal-reaching subjects whose configuration
names a target among fixed places (Parking: the goal spot among 20) and an agent pose: the network reads the
encoding followed by 15 features of the scene it implies, because an MLP on the encoding alone ranks Parking's
failures at chance while the same MLP on these features ranks them well (results/parking_tqc/learnability.md):

    cos_heading, sin_heading                   the agent's heading (a fraction of a turn wraps at 1)
    goal_dx, goal_dy, goal_distance            target minus agent position
    goal_forward, goal_lateral                 the same in the agent's frame (forward = along its heading)
    goal_bearing_cos, goal_bearing_sin         their ratios to the distance (behind the agent: cos < 0)
    goal_rel_heading_cos, goal_rel_heading_sin target heading minus agent heading
    goal_left_occupied, goal_right_occupied,   the 0/1 flags of the target's neighbours (0 where there is none)
    goal_opposite_occupied
    goal_abs_dy                                |target y - agent y|

Each scene feature is min-max scaled by ranges fitted on the training rows (stored in the spec). The scene is
computed inside the network, from the encoded vector, in torch: scores, saliency and the search read and move
the same parameters as with ``config`` (the gradient reaches the pose and the neighbour flags through the scene
features; the target's choice is a lookup and reaches the network through its own encoded feature only).

The spec (surrogate.json's ``features``) names the parameters (``goal``: an integer parameter whose values
low..high index ``targets``; ``x``, ``y``; ``heading`` in turns) and holds the geometry: ``targets``, one
[x, y, heading in radians] per goal value, and ``neighbours``, one [left, right, opposite] list of flag
parameter names (or null) per goal value. The generator reads the geometry from the artifact and never imports a
subject pack; the trainer builds it (offline/surrogate_features.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from generator_service.surrogates.encoding import Encoder

FEATURE_KINDS = ("config", "scene")
SCENE_FEATURES = (
    "cos_heading", "sin_heading", "goal_dx", "goal_dy", "goal_distance", "goal_forward", "goal_lateral",
    "goal_bearing_cos", "goal_bearing_sin", "goal_rel_heading_cos", "goal_rel_heading_sin",
    "goal_left_occupied", "goal_right_occupied", "goal_opposite_occupied", "goal_abs_dy",
)  # fmt: skip


class FeatureMap:
    """The encoded configuration -> the network's input (module docstring); ``config`` is the identity."""

    def __init__(self, spec: Mapping[str, Any] | None, encoder: Encoder) -> None:
        spec = dict(spec or {"kind": "config"})
        kind = spec.get("kind")
        if kind not in FEATURE_KINDS:
            raise ValueError(f"unknown surrogate features {kind!r}; known: {', '.join(FEATURE_KINDS)}")
        self.kind: str = kind
        self.encoder = encoder
        self._spec = spec
        self._module: Any = None
        if kind == "scene":
            self._check_scene(spec)

    # -- the scene's parameters and geometry, checked against the encoding ------------------------------------
    def _column(self, name: Any, what: str, kinds: Sequence[str]) -> Any:
        block = next((b for b in self.encoder.blocks if b.param.name == name), None)
        if block is None or block.param.kind not in kinds:
            raise ValueError(f"scene features: {what} must name a parameter of kind {' or '.join(kinds)}, got {name!r}")
        return block

    def _check_scene(self, spec: Mapping[str, Any]) -> None:
        self._goal = self._column(spec.get("goal"), "goal", ("integer",))
        self._x = self._column(spec.get("x"), "x", ("real",))
        self._y = self._column(spec.get("y"), "y", ("real",))
        self._heading = self._column(spec.get("heading"), "heading", ("real",))
        n_goals = int(self._goal.param.high) - int(self._goal.param.low) + 1
        targets = np.asarray(spec.get("targets"), dtype=np.float64)
        if targets.shape != (n_goals, 3) or not np.all(np.isfinite(targets)):
            raise ValueError(
                f"scene features: targets must be {n_goals} finite [x, y, heading] rows, one per goal value"
            )
        neighbours = spec.get("neighbours")
        if not isinstance(neighbours, list) or len(neighbours) != n_goals:
            raise ValueError(f"scene features: neighbours must list {n_goals} [left, right, opposite] rows")
        index = []
        for row in neighbours:
            if not isinstance(row, list) or len(row) != 3:
                raise ValueError("scene features: each neighbours row is [left, right, opposite] (names or null)")
            index.append(
                [
                    self.encoder.n_features if n is None else self._column(n, "a neighbour", ("integer",)).start
                    for n in row
                ]
            )
        self._targets = targets
        self._neighbours = np.asarray(index, dtype=np.int64)

    # -- sizes and names ---------------------------------------------------------------------------------------
    @property
    def n_out(self) -> int:
        return self.encoder.n_features + (len(SCENE_FEATURES) if self.kind == "scene" else 0)

    @property
    def names(self) -> list[str]:
        return self.encoder.feature_names + (list(SCENE_FEATURES) if self.kind == "scene" else [])

    def spec(self) -> dict[str, Any]:
        return dict(self._spec)

    # -- the transform -----------------------------------------------------------------------------------------
    def module(self) -> Any:
        """A torch module from (batch, encoder.n_features) to (batch, n_out)."""
        if self._module is None:
            self._module = _scene_module(self) if self.kind == "scene" else None
        return self._module

    def transform(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "config":
            return np.asarray(x, dtype=np.float64)
        import torch

        with torch.no_grad():
            return self.module()(torch.as_tensor(np.atleast_2d(x), dtype=torch.float64)).numpy()

    def fitted(self, x: np.ndarray) -> FeatureMap:
        """This map with each scene feature's min-max range fitted on the encoded rows ``x`` (``config``: itself)."""
        if self.kind == "config":
            return self
        raw = FeatureMap(
            {**self._spec, "low": [0.0] * len(SCENE_FEATURES), "span": [1.0] * len(SCENE_FEATURES)}, self.encoder
        )
        scene = raw.transform(x)[:, self.encoder.n_features :]
        span = np.ptp(scene, axis=0)
        span[span == 0] = 1.0
        return FeatureMap({**self._spec, "low": scene.min(axis=0).tolist(), "span": span.tolist()}, self.encoder)

    def wrap(self, network: Any) -> Any:
        """``network`` preceded by the transform, so that it reads encoded configurations."""
        if self.kind == "config":
            return network
        import torch.nn as nn

        return nn.Sequential(self.module(), network).eval()


def _scene_module(fmap: FeatureMap) -> Any:
    import torch
    import torch.nn as nn

    spec = fmap.spec()
    low = np.asarray(spec.get("low", []), dtype=np.float64)
    span = np.asarray(spec.get("span", []), dtype=np.float64)
    if low.shape != (len(SCENE_FEATURES),) or span.shape != low.shape or not np.all(span > 0):
        raise ValueError(f"scene features: low and span must hold {len(SCENE_FEATURES)} numbers (span > 0)")

    def scale(block: Any) -> tuple[int, float, float]:
        lo, hi = float(block.param.low), float(block.param.high)
        return block.start, lo, hi - lo

    goal, x, y, heading = (scale(b) for b in (fmap._goal, fmap._x, fmap._y, fmap._heading))
    n_goals = len(fmap._targets)

    class SceneFeatures(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # constants of the spec, not parameters: no state_dict entries, model.pt holds the network's only
            self.targets = torch.as_tensor(fmap._targets, dtype=torch.float64)
            self.neighbours = torch.as_tensor(fmap._neighbours)
            self.low = torch.as_tensor(low, dtype=torch.float64)
            self.span = torch.as_tensor(span, dtype=torch.float64)

        def forward(self, r: torch.Tensor) -> torch.Tensor:
            dtype = r.dtype
            index = torch.round(r[:, goal[0]].detach() * goal[2]).long().clamp(0, n_goals - 1)
            target = self.targets.to(dtype)[index]
            px = x[1] + r[:, x[0]] * x[2]
            py = y[1] + r[:, y[0]] * y[2]
            h = 2.0 * math.pi * (heading[1] + r[:, heading[0]] * heading[2])
            dx, dy = target[:, 0] - px, target[:, 1] - py
            distance = torch.sqrt(dx * dx + dy * dy + 1e-9)
            c, s = torch.cos(h), torch.sin(h)
            forward, lateral = dx * c + dy * s, -dx * s + dy * c
            rel = target[:, 2] - h
            padded = torch.cat([r, torch.zeros_like(r[:, :1])], dim=1)
            flags = padded.gather(1, self.neighbours[index])
            scene = torch.stack(
                [c, s, dx, dy, distance, forward, lateral, forward / distance, lateral / distance,
                 torch.cos(rel), torch.sin(rel), flags[:, 0], flags[:, 1], flags[:, 2], dy.abs()],
                dim=1,
            )  # fmt: skip
            return torch.cat([r, (scene - self.low.to(dtype)) / self.span.to(dtype)], dim=1)

    return SceneFeatures()
