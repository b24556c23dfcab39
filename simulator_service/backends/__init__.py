"""Simulator backends are plugins registered under the `gauntlet.simulators` entry-point group.

A backend is a callable `make_env(subject, render_mode=None) -> gymnasium.Env` whose env accepts
`reset(seed=..., options={"values": case_values})` and exposes `signal(name)`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from importlib.metadata import entry_points

import gymnasium as gym

from simulator_service.subject import Subject

ENTRY_POINT_GROUP = "gauntlet.simulators"
BackendFactory = Callable[..., gym.Env]


# The backends this package ships; also found when the source tree was not (re)installed, so the entry points
# in pyproject.toml are missing from the installed metadata.
BUILTIN_BACKENDS = {
    "gymnasium": "simulator_service.backends.gymnasium",
    "donkey": "simulator_service.backends.donkey",
}


@cache
def backends() -> dict[str, BackendFactory]:
    from importlib import import_module

    found: dict[str, BackendFactory] = {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name, module in BUILTIN_BACKENDS.items():
        if name not in found:
            found[name] = import_module(module).make_env
    return found


def make_env(subject: Subject, render_mode: str | None = None) -> gym.Env:
    known = backends()
    if subject.backend not in known:
        raise KeyError(
            f"subject {subject.name}: backend {subject.backend!r} is not installed; "
            f"installed backends: {', '.join(sorted(known))} (entry-point group {ENTRY_POINT_GROUP})"
        )
    return known[subject.backend](subject, render_mode=render_mode)
