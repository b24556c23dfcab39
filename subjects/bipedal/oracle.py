"""The bipedal pack's oracles (oracle role): bipedal_fall and its three other descriptor pairs.

They read the standard ``observations`` and ``actions`` and the signals bipedalwalker_obstacles.yaml declares (set by
env.py): ``hull_x`` and ``game_over``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from oracle_service.plugin_api import Episode, Judgement, Oracle, flag

# BipedalWalker (QD fault-diversity paper, Gupta et al. 2020 descriptors as the authors' bw_common.py computes
# them): 12 per-step features, each averaged over the episode (summed, divided by the step count).
BIPEDAL_FEATURES = (
    "distance",
    "hull_angle",
    "torque",
    "jump",
    "leg0_hip_angle",
    "leg0_hip_speed",
    "leg0_knee_angle",
    "leg0_knee_speed",
    "leg1_hip_angle",
    "leg1_hip_speed",
    "leg1_knee_angle",
    "leg1_knee_speed",
)
# The authors' descriptor pairs (their EXPERT_INDICES, RQ3); the first is the paper's main space. Their fourth
# pair reads feature 11 (leg1 knee speed) beside leg0 hip speed; we pair the two hip speeds, as the paper names.
BIPEDAL_PAIRS = {
    "": ("distance", "hull_angle"),
    "torque_jump": ("torque", "jump"),
    "hip_angles": ("leg0_hip_angle", "leg1_hip_angle"),
    "hip_speeds": ("leg0_hip_speed", "leg1_hip_speed"),
}


def bipedal_features(observations: np.ndarray, actions: np.ndarray, hull_x: np.ndarray) -> dict[str, float]:
    """Episode means of the 12 features. Distance is the hull's x (the authors' code; the paper says "relative
    to the goal"), hull angle |obs[0]|, torque the sum over the 4 joints of clip(|a|, 0, 1), jump the fraction of
    steps with BOTH legs off the ground (the paper's wording; the authors' code tests both legs in contact),
    then the hip/knee joint angles and speeds of each leg (obs[4:8], obs[9:13]) as observed."""
    obs = np.asarray(observations, dtype=float).reshape(len(observations), -1)
    if len(obs) == 0:
        return {name: 0.0 for name in BIPEDAL_FEATURES}
    act = np.asarray(actions, dtype=float).reshape(len(obs), -1)
    joints = obs[:, [4, 5, 6, 7, 9, 10, 11, 12]].mean(axis=0)
    values = [
        float(np.mean(np.abs(np.asarray(hull_x, dtype=float).reshape(-1)))),
        float(np.mean(np.abs(obs[:, 0]))),
        float(np.mean(np.clip(np.abs(act), 0.0, 1.0).sum(axis=1))),
        float(np.mean((obs[:, 8] == 0) & (obs[:, 13] == 0))),
        *map(float, joints),
    ]
    return dict(zip(BIPEDAL_FEATURES, values))


def _bipedal(pair: tuple[str, str]) -> Callable[[Episode], Judgement]:
    # Fault (paper and code): the hull touched the ground (game over, reward -100; leaving the left edge too).
    # Margin: the episode return, as the paper's fitness (QD minimises it); a fall costs -100, so lower is
    # closer to failing.
    def judge(ep: Episode) -> Judgement:
        feats = bipedal_features(ep.signals["observations"], ep.signals["actions"], ep.signals["hull_x"])
        descriptors = (feats[pair[0]], feats[pair[1]])
        if flag(ep, "game_over") or (
            ep.terminated and float(np.asarray(ep.signals["hull_x"]).reshape(-1)[-1:].sum()) < 0
        ):
            return Judgement(
                True,
                float(ep.total_reward),
                descriptors,
                f"the walker's hull hit the ground at step {ep.steps} (x={feats['distance']:.1f} mean)",
            )
        how = "reached the end of the terrain" if ep.terminated else "kept walking to the step limit"
        return Judgement(False, float(ep.total_reward), descriptors, f"the walker {how} ({ep.steps} steps)")

    return judge


def bipedal_oracle(suffix: str) -> Oracle:
    """bipedal_fall (suffix "") or bipedal_fall_<suffix>: the same fault, with the descriptor pair BIPEDAL_PAIRS
    gives the suffix."""
    pair = BIPEDAL_PAIRS[suffix]
    return Oracle(
        "bipedal_fall" + (f"_{suffix}" if suffix else ""),
        "BipedalWalker fails when its hull touches the ground (reward -100; QD fault-diversity "
        f"paper); descriptors: episode means of {pair[0]} and {pair[1]}.",
        ("observations", "actions", "hull_x", "game_over"),
        pair,
        "episode return",
        _bipedal(pair),
    )


BIPEDAL_FALL = bipedal_oracle("")
BIPEDAL_FALL_TORQUE_JUMP = bipedal_oracle("torque_jump")
BIPEDAL_FALL_HIP_ANGLES = bipedal_oracle("hip_angles")
BIPEDAL_FALL_HIP_SPEEDS = bipedal_oracle("hip_speeds")
