"""gymnasium.Space <-> gauntlet.v1.SpaceSpec, and the compatibility check between a model and a subject.

Dict observations (goal-conditioned subjects such as Parking: observation, achieved_goal, desired_goal)
travel as ONE flat float vector per environment: the Box entries in sorted key order, each flattened
row-major. Their SpaceSpec says kind "dict" with the flat shape and the flat bounds. The simulator packs
with `pack_observations` / `pack_observation` wherever an observation goes on the wire, and the agent
service restores the dict with `unpack_observations` (from the model's own Dict space) before `predict`;
Box and Discrete observations pass through both unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import common_pb2
from common.tensor import from_tensor, to_tensor


def space_to_proto(space: Any) -> common_pb2.SpaceSpec:
    kind = type(space).__name__
    if kind == "Discrete":
        return common_pb2.SpaceSpec(kind="discrete", n=int(space.n))
    if kind == "Box":
        return common_pb2.SpaceSpec(
            kind="box",
            shape=list(space.shape),
            low=to_tensor(np.asarray(space.low)),
            high=to_tensor(np.asarray(space.high)),
        )
    if kind == "MultiDiscrete":
        return common_pb2.SpaceSpec(kind="multi_discrete", shape=list(space.shape), high=to_tensor(space.nvec))
    if kind == "MultiBinary":
        return common_pb2.SpaceSpec(kind="multi_binary", shape=list(np.atleast_1d(space.shape)))
    if kind == "Dict":
        parts = _dict_parts(space)
        low = np.concatenate([np.asarray(sub.low, dtype=np.float64).reshape(-1) for _, sub in parts])
        high = np.concatenate([np.asarray(sub.high, dtype=np.float64).reshape(-1) for _, sub in parts])
        return common_pb2.SpaceSpec(kind="dict", shape=[low.size], low=to_tensor(low), high=to_tensor(high))
    return common_pb2.SpaceSpec(kind=kind.lower())


def _dict_parts(space: Any) -> list[tuple[str, Any]]:
    """(key, Box) in wire order (sorted keys); ValueError names a non-Box entry."""
    parts = sorted(space.spaces.items())
    for key, sub in parts:
        if type(sub).__name__ != "Box":
            raise ValueError(f"Dict observation entry {key!r} is {type(sub).__name__}; only Box entries travel flat")
    return parts


def pack_observation(observation: Any) -> np.ndarray:
    """One observation as it goes on the wire: a Dict observation flattened (sorted keys), anything else as is."""
    if isinstance(observation, Mapping):
        return np.concatenate([np.asarray(observation[k], dtype=np.float64).reshape(-1) for k in sorted(observation)])
    return np.asarray(observation)


def pack_observations(observations: Sequence[Any]) -> np.ndarray:
    """A batch for one lock-step: np.stack for arrays (unchanged path), one flat row per Dict observation."""
    if observations and isinstance(observations[0], Mapping):
        return np.array([pack_observation(o) for o in observations])
    return np.array(observations)  # as np.stack for equal-shaped rows, at a fraction of its per-row cost


def unpack_observations(space: Any, batch: np.ndarray) -> dict[str, np.ndarray]:
    """Inverse of pack_observations for a Dict space: key -> (batch, *shape) float32 arrays."""
    parts = _dict_parts(space)
    sizes = [int(np.prod(sub.shape)) for _, sub in parts]
    if batch.ndim != 2 or batch.shape[1] != sum(sizes):
        raise ValueError(f"a packed Dict observation batch has shape (batch, {sum(sizes)}), got {tuple(batch.shape)}")
    out: dict[str, np.ndarray] = {}
    start = 0
    for (key, sub), size in zip(parts, sizes):
        out[key] = np.array(batch[:, start : start + size], dtype=np.float32).reshape((-1, *sub.shape))
        start += size
    return out


def flat_shape(space: Any) -> tuple[int, ...]:
    """The per-environment shape of an observation on the wire."""
    if type(space).__name__ == "Dict":
        return (sum(int(np.prod(sub.shape)) for _, sub in _dict_parts(space)),)
    return tuple(space.shape)


def describe(spec: common_pb2.SpaceSpec) -> str:
    if spec.kind == "discrete":
        return f"Discrete({spec.n})"
    if spec.kind == "box":
        return f"Box{tuple(spec.shape)}"
    if spec.kind == "dict":
        return f"Dict(flat {tuple(spec.shape)})"
    return f"{spec.kind}{tuple(spec.shape)}"


def compatible(model: common_pb2.SpaceSpec, subject: common_pb2.SpaceSpec) -> bool:
    """Same kind and shape (and n); bounds may differ (a model may clip)."""
    return model.kind == subject.kind and list(model.shape) == list(subject.shape) and model.n == subject.n


def bounds(spec: common_pb2.SpaceSpec) -> tuple[np.ndarray, np.ndarray] | None:
    if spec.kind != "box":
        return None
    return from_tensor(spec.low), from_tensor(spec.high)
