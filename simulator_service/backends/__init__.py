"""Simulator backends are plugins registered under the `gauntlet.simulators` entry-point group.

A backend is a callable `make_env(subject, render_mode=None) -> gymnasium.Env` whose env accepts
`reset(seed=..., options={"values": case_values})` and exposes `signal(name)`.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points
from typing import Callable

import gymnasium as gym

from simulator_service.subject import Subject

ENTRY_POINT_GROUP = "gauntlet.simulators"
BackendFactory = Callable[..., gym.Env]


@lru_cache(maxsize=None)
def backends() -> dict[str, BackendFactory]:
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if "gymnasium" not in found:  # running from a source tree that was not pip-installed
        from simulator_service.backends.gymnasium import make_env

        return {"gymnasium": make_env}
    return {name: ep.load() for name, ep in found.items()}


def make_env(subject: Subject, render_mode: str | None = None) -> gym.Env:
    known = backends()
    if subject.backend not in known:
        raise KeyError(
            f"subject {subject.name}: backend {subject.backend!r} is not installed; "
            f"installed backends: {', '.join(sorted(known))} (entry-point group {ENTRY_POINT_GROUP})"
        )
    return known[subject.backend](subject, render_mode=render_mode)
