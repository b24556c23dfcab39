"""The classic pack's oracles (oracle role): CartPole, LunarLander, MountainCar and Humanoid failures.

They read the standard signals (``observations``, ``actions``, ``final_observation``) and the ones the subject files
declare: LunarLander's ``game_over``, MountainCar's ``goal_position``, Humanoid's ``torso_z``.
"""

from __future__ import annotations

import math

import numpy as np

from oracle_service.plugin_api import Episode, Judgement, Oracle

CARTPOLE_THETA_LIMIT = 12 * 2 * math.pi / 360  # Gymnasium's CartPole threshold (12 degrees)
CARTPOLE_X_LIMIT = 2.4


def _sign_counts(actions: np.ndarray) -> tuple[float, float]:
    """Counts of negative and positive action components (PRT's descriptor for continuous control)."""
    a = np.asarray(actions, dtype=float)
    return float(np.sum(a < 0)), float(np.sum(a > 0))


def _cartpole(ep: Episode) -> Judgement:
    obs = np.asarray(ep.signals["observations"], dtype=float)
    slack = np.minimum(1 - np.abs(obs[:, 2]) / CARTPOLE_THETA_LIMIT, 1 - np.abs(obs[:, 0]) / CARTPOLE_X_LIMIT)
    final = np.asarray(ep.signals["final_observation"], dtype=float)
    final_slack = min(1 - abs(final[2]) / CARTPOLE_THETA_LIMIT, 1 - abs(final[0]) / CARTPOLE_X_LIMIT)
    margin = float(min(slack.min(initial=1.0), final_slack))
    actions = np.asarray(ep.signals["actions"]).reshape(-1)
    descriptors = (float(np.sum(actions == 0)), float(np.sum(actions == 1)))
    if ep.terminated:
        which = "pole angle" if abs(final[2]) > CARTPOLE_THETA_LIMIT else "cart position"
        return Judgement(True, margin, descriptors, f"{which} left its limit at step {ep.steps}")
    return Judgement(False, margin, descriptors, f"balanced for {ep.steps} steps")


def _lunar(ep: Episode) -> Judgement:
    # As the PRT authors' code: a crash is body contact (game_over) or leaving the viewport
    # (|x| >= 1); a landing off the pad or a timeout is a pass.
    final = np.asarray(ep.signals["final_observation"], dtype=float)
    game_over = bool(np.asarray(ep.signals["game_over"]).item())
    obs = np.asarray(ep.signals["observations"], dtype=float)
    contact = np.nonzero((obs[:, 6] > 0) | (obs[:, 7] > 0))[0] if len(obs) else np.array([], dtype=int)
    # QD paper's descriptor: (x, vertical velocity) at the first leg contact, or at the end if none
    row = obs[contact[0]] if len(contact) else final
    descriptors = (float(row[0]), float(row[3]))
    if game_over:
        return Judgement(True, ep.total_reward, descriptors, f"the lander body hit the ground at step {ep.steps}")
    if abs(final[0]) >= 1.0:
        return Judgement(True, ep.total_reward, descriptors, f"the lander left the viewport (x={final[0]:.2f})")
    how = "came to rest" if ep.terminated else "was still flying at the time limit"
    return Judgement(False, ep.total_reward, descriptors, f"the lander {how} after {ep.steps} steps")


def _mountaincar(ep: Episode) -> Judgement:
    obs = np.asarray(ep.signals["observations"], dtype=float)
    final = np.asarray(ep.signals["final_observation"], dtype=float)
    goal = float(np.asarray(ep.signals["goal_position"]).item())
    margin = float(max(obs[:, 0].max(initial=-np.inf), final[0])) - goal
    descriptors = _sign_counts(np.asarray(ep.signals["actions"], dtype=float) - _mountaincar_centre(ep))
    if ep.terminated:
        return Judgement(False, margin, descriptors, f"reached the goal after {ep.steps} steps")
    return Judgement(True, margin, descriptors, f"did not reach the goal (x={goal}) in {ep.steps} steps")


def _mountaincar_centre(ep: Episode) -> float:
    """Discrete MountainCar's 'no push' action is 1; continuous actions are centred on 0."""
    actions = np.asarray(ep.signals["actions"])
    return 1.0 if np.issubdtype(actions.dtype, np.integer) else 0.0


def _humanoid(ep: Episode) -> Judgement:
    z = np.asarray(ep.signals["torso_z"], dtype=float).reshape(-1)
    margin = float(z.min(initial=np.inf) - 1.0) if len(z) else 0.0
    descriptors = _sign_counts(ep.signals["actions"])
    if ep.terminated:
        return Judgement(True, margin, descriptors, f"fell (torso below 1.0 m) at step {ep.steps}")
    return Judgement(False, margin, descriptors, f"stayed up for {ep.steps} steps")


CARTPOLE_BALANCE = Oracle(
    "cartpole_balance",
    "CartPole fails when |theta| > 12 deg or |x| > 2.4 before the step limit (500).",
    ("observations", "actions", "final_observation"),
    ("action0_count", "action1_count"),
    "smallest normalised slack to the angle/position limits over the episode",
    _cartpole,
)

LUNAR_CRASH = Oracle(
    "lunar_crash",
    "LunarLander fails when the lander body touches the ground or |x| >= 1 (PRT authors' rule).",
    ("observations", "final_observation", "game_over"),
    ("x_at_contact", "vy_at_contact"),
    "episode return",
    _lunar,
)

MOUNTAINCAR_GOAL = Oracle(
    "mountaincar_goal",
    "MountainCar fails when the car does not reach the goal before the step limit.",
    ("observations", "actions", "final_observation", "goal_position"),
    ("negative_actions", "positive_actions"),
    "best position reached minus the goal position",
    _mountaincar,
)

HUMANOID_FALL = Oracle(
    "humanoid_fall",
    "Humanoid fails when its torso drops below 1.0 m before the horizon (Gymnasium's healthy range).",
    ("torso_z", "actions"),
    ("negative_torques", "positive_torques"),
    "lowest torso height minus 1.0 m",
    _humanoid,
)
