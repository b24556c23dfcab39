"""The parking pack's injector (simulator role): ``parking_scene``, the test case as the lot's scene."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from common.domain.validators import flag_names
from common.space import ParamValue
from simulator_service.plugin_api import Injector, Subject


def parking_scene(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """Parking (GauntletParking-v0): the test case is the scene the env builds on reset (goal spot, parked cars,
    ego position and heading; env.py). `flags` is the prefix of the 0/1 spot flags
    (flag i = spot i+1)."""
    from subjects.parking.env import scene_from_values  # here: highway-env is imported when a parking env is made

    flags = flag_names(str(options.get("flags", "parked")), subject.space.names)
    if not flags:
        raise ValueError(f"subject {subject.name}: injector parking_scene finds no flags {options.get('flags')}_0..")

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> Any:
        base = env.unwrapped
        spots = 2 * base.config["spots_per_row"]  # type: ignore[attr-defined]
        if len(flags) != spots:
            raise ValueError(f"{subject.name}: {len(flags)} spot flags for a lot of {spots} spots")
        base.scene = scene_from_values(values, flags)  # type: ignore[attr-defined]
        obs, _ = env.reset(seed=seed)
        return obs

    return inject
