"""Simulator backends are plug-ins in the entry-point group `gauntlet.simulators` (common/plugins.py).

A backend is a callable `make_env(subject, render_mode=None) -> gymnasium.Env` whose env accepts
`reset(seed=..., options={"values": case_values})` and exposes `signal(name)`. An env that runs locally may also
offer `check_first_observation()` (raising SubjectError when a sample input's first observation does not fit its
observation space); the simulator calls it once per subject before describing the subject.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym

from common.errors import FailedPrecondition
from common.plugins import SIMULATORS, load_group, load_plugin, plugin_names
from simulator_service.subject import Subject

BackendFactory = Callable[..., gym.Env]


def backends() -> dict[str, BackendFactory]:
    """Every installed backend by name, loaded."""
    return load_group(SIMULATORS)


def make_env(subject: Subject, render_mode: str | None = None) -> gym.Env:
    if subject.backend not in plugin_names(SIMULATORS):  # the deployment lacks a plug-in: no request can fix it
        raise FailedPrecondition(
            f"subject {subject.name}: backend {subject.backend!r} is not installed; "
            f"installed backends: {', '.join(plugin_names(SIMULATORS))} (entry-point group {SIMULATORS})"
        )
    factory: BackendFactory = load_plugin(SIMULATORS, subject.backend)
    return factory(subject, render_mode=render_mode)


def check_first_observation(env: gym.Env) -> None:
    """The env's first-observation check (SubjectError when a sample input's first observation does not fit the
    observation space), where its backend offers one; nothing for a backend that does not (see above)."""
    check = getattr(env, "check_first_observation", None)
    if check is not None:
        check()
