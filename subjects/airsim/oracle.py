"""The airsim pack's oracle (oracle role): airsim_crash, a collision or leaving the road.

It reads the signals airsim_drive.yaml declares (set by the airsim backend): ``collision``, ``off_road``,
``reached_end``, ``max_lane_distance`` and ``lane_limit``.
"""

from __future__ import annotations

from oracle_service.plugin_api import Episode, Judgement, Oracle, flag, scalar


def _airsim_crash(ep: Episode) -> Judgement:
    # AirSim driving: failure = a collision (simGetCollisionInfo) or leaving the road (further than half_width from
    # the subject's centre line; the backend sets both). Margin: the slack to the road's edge at the worst moment.
    worst = scalar(ep, "max_lane_distance")
    margin = scalar(ep, "lane_limit") - worst
    descriptors = (worst, float(ep.steps))
    if flag(ep, "collision"):
        return Judgement(True, min(margin, 0.0), descriptors, f"collided at step {ep.steps}")
    if flag(ep, "off_road"):
        return Judgement(True, margin, descriptors, f"left the road at step {ep.steps} ({worst:.2f} m off the centre)")
    if flag(ep, "reached_end"):
        return Judgement(False, margin, descriptors, f"reached the end of the road after {ep.steps} steps")
    return Judgement(False, margin, descriptors, f"stayed on the road without a collision for {ep.steps} steps")


AIRSIM_CRASH = Oracle(
    "airsim_crash",
    "AirSim driving fails on a collision or when the car leaves the road (further than half_width from the "
    "subject's centre line); the end of the road or the step limit pass.",
    ("collision", "off_road", "reached_end", "max_lane_distance", "lane_limit"),
    ("max_lane_distance", "steps"),
    "half_width minus the largest distance to the centre line (m); at most 0 after a collision",
    _airsim_crash,
)
