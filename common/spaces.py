"""gymnasium.Space <-> gauntlet.v1.SpaceSpec, and the compatibility check between a model and a subject."""

from __future__ import annotations

from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import common_pb2
from common.tensor import from_tensor, to_tensor


def space_to_proto(space: Any) -> common_pb2.SpaceSpec:
    kind = type(space).__name__
    if kind == "Discrete":
        return common_pb2.SpaceSpec(kind="discrete", n=int(space.n))
    if kind == "Box":
        return common_pb2.SpaceSpec(kind="box", shape=list(space.shape), low=to_tensor(np.asarray(space.low)),
                                    high=to_tensor(np.asarray(space.high)))
    if kind == "MultiDiscrete":
        return common_pb2.SpaceSpec(kind="multi_discrete", shape=list(space.shape), high=to_tensor(space.nvec))
    if kind == "MultiBinary":
        return common_pb2.SpaceSpec(kind="multi_binary", shape=list(np.atleast_1d(space.shape)))
    return common_pb2.SpaceSpec(kind=kind.lower())


def describe(spec: common_pb2.SpaceSpec) -> str:
    if spec.kind == "discrete":
        return f"Discrete({spec.n})"
    if spec.kind == "box":
        return f"Box{tuple(spec.shape)}"
    return f"{spec.kind}{tuple(spec.shape)}"


def compatible(model: common_pb2.SpaceSpec, subject: common_pb2.SpaceSpec) -> bool:
    """Same kind and shape (and n); bounds may differ (a model may clip)."""
    return model.kind == subject.kind and list(model.shape) == list(subject.shape) and model.n == subject.n


def bounds(spec: common_pb2.SpaceSpec) -> tuple[np.ndarray, np.ndarray] | None:
    if spec.kind != "box":
        return None
    return from_tensor(spec.low), from_tensor(spec.high)
