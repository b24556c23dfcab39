"""The Donkey pack's oracle (oracle service role): donkey_off_road, Indago's Driving failure.

It reads the episode signals the donkey subjects record (donkey.yaml ``signals``): ``off_road``, ``reached_end``,
``max_abs_deviation`` and ``cte_limit``, all set by the donkey backend (backend.py).
"""

from __future__ import annotations

from oracle_service.plugin_api import Episode, Judgement, Oracle, flag, scalar


def _donkey(ep: Episode) -> Judgement:
    # Indago Driving: failure = the car left the road (|cte - lane centre| > max_cte; the backend sets off_road);
    # success = the end line; running out of steps without either passes. Margin: the slack to the off-road
    # threshold at the worst moment (negative once off the road).
    worst = scalar(ep, "max_abs_deviation")
    margin = scalar(ep, "cte_limit") - worst
    descriptors = (worst, float(ep.steps))
    if flag(ep, "off_road"):
        return Judgement(True, margin, descriptors, f"left the road at step {ep.steps} (|cte - centre| {worst:.2f} m)")
    if flag(ep, "reached_end"):
        return Judgement(False, margin, descriptors, f"crossed the end line after {ep.steps} steps")
    return Judgement(False, margin, descriptors, f"stayed on the road for {ep.steps} steps without reaching the end")


DONKEY_OFF_ROAD = Oracle(
    "donkey_off_road",
    "Donkey fails when the car leaves the road (cross-track error beyond the "
    "subject's max_cte around the lane centre; Indago Driving); the end line or the step limit pass.",
    ("off_road", "reached_end", "max_abs_deviation", "cte_limit"),
    ("max_abs_deviation", "steps"),
    "max_cte minus the largest |cte - lane centre| of the episode (m)",
    _donkey,
)
