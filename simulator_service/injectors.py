"""Injectors write a test case into a freshly reset environment, through the environment's own API.

Nothing patches installed packages: each injector runs after `reset()` and overwrites
the part of the state that the test case controls, then returns the matching observation.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from simulator_service.subject import Subject

Injector = Callable[[gym.Env, Mapping[str, ParamValue], np.ndarray], np.ndarray]


def _state_vector(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """Classic control: `env.unwrapped.<attribute>` is the whole state and the observation equals it."""
    attribute = options.get("attribute", "state")
    indices: Mapping[str, int] = options.get("indices") or {n: i for i, n in enumerate(subject.space.names)}

    def inject(env: gym.Env, values: Mapping[str, ParamValue], obs: np.ndarray) -> np.ndarray:
        base = env.unwrapped
        state = np.array(getattr(base, attribute), dtype=np.float64)
        for name, index in indices.items():
            state[index] = float(values[name])
        setattr(base, attribute, state)
        return np.array(state, dtype=env.observation_space.dtype)

    return inject


def _box2d_initial_force(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """LunarLander: replace the random initial impulse by the test case's (fx, fy).

    Box2D accumulates forces until the next world step, so clearing them right after reset
    removes Gymnasium's random push and the test case's force takes its place.
    """
    body_name = options.get("body", "lander")
    fx_name, fy_name = options.get("parameters", ("fx", "fy"))

    def inject(env: gym.Env, values: Mapping[str, ParamValue], obs: np.ndarray) -> np.ndarray:
        base = env.unwrapped
        base.world.ClearForces()
        getattr(base, body_name).ApplyForceToCenter((float(values[fx_name]), float(values[fy_name])), True)
        return obs

    return inject


def _mujoco_pose_offset(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """MuJoCo: qpos = init_qpos + offsets[:nq], qvel = init_qvel + offsets[nq:] (the PRT/Indago Humanoid input)."""
    names = subject.space.names

    def inject(env: gym.Env, values: Mapping[str, ParamValue], obs: np.ndarray) -> np.ndarray:
        base = env.unwrapped
        offsets = np.array([float(values[n]) for n in names])
        nq = base.init_qpos.shape[0]
        if offsets.shape[0] != nq + base.init_qvel.shape[0]:
            raise ValueError(f"{subject.name}: {offsets.shape[0]} offsets for nq={nq} + nv={base.init_qvel.shape[0]}")
        base.set_state(base.init_qpos + offsets[:nq], base.init_qvel + offsets[nq:])
        return base._get_obs()

    return inject


INJECTORS: dict[str, Callable[[Subject, Mapping[str, Any]], Injector]] = {
    "state_vector": _state_vector,
    "box2d_initial_force": _box2d_initial_force,
    "mujoco_pose_offset": _mujoco_pose_offset,
}


def make_injector(subject: Subject) -> Injector:
    kind = subject.injector["kind"]
    if kind not in INJECTORS:
        raise KeyError(f"subject {subject.name}: unknown injector {kind!r}; known: {', '.join(sorted(INJECTORS))}")
    return INJECTORS[kind](subject, subject.injector)
