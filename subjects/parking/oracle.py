"""The parking pack's oracle (oracle role): parking_fail, Indago's Parking failure.

It reads the signals parking.yaml declares (set by env.py): ``crashed``, ``parked``, ``goal_error`` and ``ego_xy``.
"""

from __future__ import annotations

import numpy as np

from oracle_service.plugin_api import Episode, Judgement, Oracle, flag

PARKING_SUCCESS_ERROR = 0.12  # highway-env's success_goal_reward: parked when the weighted goal error is below it
PARKING_STEP_LIMIT = 100  # the parking subject's max_steps (subjects/parking/parking.yaml)


def _parking(ep: Episode) -> Judgement:
    # Indago: a failure is a crash (a parked car or a wall) or not parking before the timeout; success is
    # highway-env's criterion. Margin (ours, lower = closer to failure, in [-1, 1]): parked -> the fraction of the
    # step limit left (a long manoeuvre is near a timeout; Indago's regressor label is the episode length);
    # timeout -> -(1 - 0.12 / closest goal error), near 0 when it almost parked, towards -1 when it never came
    # near; crash -> -1. Descriptors: the ego's final (x, y).
    xy = np.asarray(ep.signals["ego_xy"], dtype=float).reshape(-1, 2)
    descriptors = (float(xy[-1, 0]), float(xy[-1, 1])) if len(xy) else (0.0, 0.0)
    if flag(ep, "crashed"):
        return Judgement(True, -1.0, descriptors, f"crashed into a parked car or a wall at step {ep.steps}")
    if flag(ep, "parked") and ep.terminated:
        left = max(1.0 - ep.steps / PARKING_STEP_LIMIT, 1.0 / PARKING_STEP_LIMIT)
        return Judgement(False, float(left), descriptors, f"parked after {ep.steps} steps")
    error = np.asarray(ep.signals["goal_error"], dtype=float).reshape(-1)
    best = float(error.min()) if len(error) else float("inf")
    margin = -(1.0 - PARKING_SUCCESS_ERROR / best) if best > PARKING_SUCCESS_ERROR else 0.0
    return Judgement(
        True,
        float(margin),
        descriptors,
        f"not parked after {ep.steps} steps (closest goal error {best:.4f}, parked below {PARKING_SUCCESS_ERROR})",
    )


PARKING_FAIL = Oracle(
    "parking_fail",
    "Parking fails on a crash (a parked car or a wall) or when the ego is not parked "
    "(highway-env's success criterion) before the step limit (Indago).",
    ("crashed", "parked", "goal_error", "ego_xy"),
    ("final_x", "final_y"),
    "parked: fraction of the step limit left; timeout: -(1 - 0.12 / closest goal error); crash: -1",
    _parking,
)
