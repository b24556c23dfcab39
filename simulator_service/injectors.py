"""Injectors write a test case into a freshly reset environment, through the environment's own API.

Each injector is a plug-in (entry-point group gauntlet.injectors, declared in pyproject.toml): a factory
``(subject, options) -> Injector`` that the subject YAML names by ``injector.kind``. Nothing patches installed
packages: an injector resets the environment itself, steering
or overwriting the part of the state that the test case controls through the env's own
attributes, and returns the observation the agent sees first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from common.plugins import INJECTORS, load_plugin, plugin_names
from common.space import ParamValue
from simulator_service.subject import Subject, SubjectError

# (env, values, seed) -> first observation
Injector = Callable[[gym.Env, Mapping[str, ParamValue], "int | None"], np.ndarray]


# Methods through which classic-control envs compute their observation from their state (Acrobot `_get_ob`,
# Pendulum `_get_obs`); the state_vector injector calls the first one the env has.
OBSERVATION_METHODS = ("_get_obs", "_get_ob")


def state_vector(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """Classic control: the test case overwrites entries of `env.unwrapped.<attribute>` (the env's state).

    The first observation is re-derived from the injected state the way the env derives it: through the method
    that option ``observation`` names, by default the env's own ``_get_obs``/``_get_ob`` when it has one (Acrobot
    observes cos/sin of its angles), else the state itself (CartPole, MountainCar: the observation is the state).
    ``observation: state`` forces the latter.
    """
    attribute = options.get("attribute", "state")
    indices: Mapping[str, int] = options.get("indices") or {n: i for i, n in enumerate(subject.space.names)}
    declared = options.get("observation")

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        env.reset(seed=seed)
        base = env.unwrapped
        state = np.array(getattr(base, attribute), dtype=np.float64)
        for name, index in indices.items():
            state[index] = float(values[name])
        setattr(base, attribute, state)
        method = _observation_method(subject, base, declared)
        if method is None:
            return np.array(state, dtype=env.observation_space.dtype)
        return np.asarray(method())

    return inject


def _observation_method(subject: Subject, base: gym.Env, declared: str | None) -> Callable[[], Any] | None:
    """The env's state -> observation method for the state_vector injector; None: the state is the observation."""
    if declared == "state":
        return None
    if declared is not None:
        method = getattr(base, str(declared), None)
        if not callable(method):
            raise SubjectError(
                f"subject {subject.name}: injector option observation={declared!r} names no method of "
                f"{type(base).__name__}; give a method that returns the observation, or 'state'"
            )
        return method
    return next((m for name in OBSERVATION_METHODS if callable(m := getattr(base, name, None))), None)


class _ScriptedPushRng:
    """A Generator stand-in whose first two draws from U(-bound, bound) are the scripted push.

    LunarLander's reset draws its random initial push as two such uniform draws and applies
    it in the first physics step (inside reset). Everything else (terrain, dispersion) still
    comes from the seeded generator, so episodes stay deterministic given (test case, seed).
    """

    def __init__(self, rng: np.random.Generator, bound: float, push: tuple[float, float]) -> None:
        self._rng = rng
        self._bound = bound
        self._queue = list(push)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        if size is None and self._queue and low == -self._bound and high == self._bound:
            return self._queue.pop(0)
        return self._rng.uniform(low, high, size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


def box2d_initial_force(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """LunarLander: the test case's (fx, fy) replaces the random initial push."""
    fx_name, fy_name = options.get("parameters", ("fx", "fy"))
    bound_name = options.get("bound_constant", "INITIAL_RANDOM")

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        base = env.unwrapped
        bound = float(getattr(sys.modules[type(base).__module__], bound_name))
        rng = np.random.default_rng(seed)
        # Duck-typed stand-in for the env's Generator: it scripts the one initial push and delegates the rest.
        push = _ScriptedPushRng(rng, bound, (float(values[fx_name]), float(values[fy_name])))
        base._np_random = push  # type: ignore[assignment]
        obs, _ = env.reset()  # no seed: a seed would replace the scripted generator
        return obs

    return inject


def mujoco_pose_offset(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """MuJoCo: qpos = init_qpos + offsets[:nq], qvel = init_qvel + offsets[nq:] (the PRT/Indago Humanoid input)."""
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv  # here: only MuJoCo subjects pay for importing mujoco

    names = subject.space.names

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        env.reset(seed=seed)
        base = env.unwrapped
        if not isinstance(base, MujocoEnv):
            raise TypeError(
                f"{subject.name}: the mujoco_pose_offset injector needs a MuJoCo env, got {type(base).__name__}"
            )
        offsets = np.array([float(values[n]) for n in names])
        nq = base.init_qpos.shape[0]
        if offsets.shape[0] != nq + base.init_qvel.shape[0]:
            raise ValueError(f"{subject.name}: {offsets.shape[0]} offsets for nq={nq} + nv={base.init_qvel.shape[0]}")
        base.set_state(base.init_qpos + offsets[:nq], base.init_qvel + offsets[nq:])
        return base._get_obs()  # type: ignore[attr-defined]  # every MuJoCo task defines it; the base class does not

    return inject


def make_injector(subject: Subject) -> Injector:
    """The subject's injector: the plug-in its ``injector.kind`` names (entry-point group gauntlet.injectors), called
    as ``factory(subject, options)`` with the subject's ``injector`` mapping as options."""
    kind = subject.injector["kind"]
    try:
        factory = load_plugin(INJECTORS, kind)
    except KeyError:
        known = ", ".join(plugin_names(INJECTORS))
        raise KeyError(f"subject {subject.name}: unknown injector {kind!r}; installed: {known}") from None
    return factory(subject, subject.injector)
