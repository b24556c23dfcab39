"""The failure oracles of the seed papers, as pure functions of a recorded episode.

Each oracle names the signals it needs, so the simulator records only those. The
margin is a continuous distance to failure: lower is closer to failing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from common import plugins
from common.errors import NotFound
from common.plugins import PluginError, load_plugin, plugin_names


@dataclass(frozen=True)
class Episode:
    steps: int
    total_reward: float
    terminated: bool
    truncated: bool
    signals: Mapping[str, np.ndarray] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class Judgement:
    failed: bool
    margin: float
    descriptors: tuple[float, ...]
    reason: str
    invalid: bool = False  # the episode cannot be judged (e.g. an action-trace prefix that ended it)


class MissingSignals(KeyError):
    """An episode lacks a signal the oracle reads: the caller asked for too few (its trace spec), not an oracle bug."""


@dataclass(frozen=True)
class Oracle:
    name: str
    description: str
    required_signals: tuple[str, ...]
    descriptor_names: tuple[str, ...]
    margin_description: str
    judge: Callable[[Episode], Judgement]

    def evaluate(self, episode: Episode) -> Judgement:
        missing = [s for s in self.required_signals if s not in episode.signals]
        if missing:
            raise MissingSignals(f"oracle {self.name} needs signal(s) {', '.join(missing)}, which the episode lacks")
        return self.judge(episode)


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


def _flag(ep: Episode, name: str) -> bool:
    return bool(np.asarray(ep.signals[name]).item())


def _taxi(ep: Episode) -> Judgement:
    # QD fault-diversity paper: a fault is an illegal pick-up/drop-off or a collision with a wall (the
    # simulator ends test episodes at the first one). A timeout without a fault passes.
    # Margin (ours; the paper has none): 1.0 delivered, 0.0 timed out without a fault, -1.0 a fault.
    descriptors = (
        float(np.asarray(ep.signals["moves_before_pickup"]).item()),
        float(np.asarray(ep.signals["moves_after_pickup"]).item()),
    )
    crash, illegal = _flag(ep, "crash"), _flag(ep, "illegal_action")
    if crash or illegal:
        what = " and ".join(
            w
            for w, f in (("moved into a wall or off the grid", crash), ("made an illegal pick-up or drop-off", illegal))
            if f
        )
        return Judgement(True, -1.0, descriptors, f"the taxi {what} (episode ended after {ep.steps} steps)")
    if _flag(ep, "delivered"):
        return Judgement(False, 1.0, descriptors, f"delivered the passenger after {ep.steps} steps")
    return Judgement(False, 0.0, descriptors, f"no fault, but the passenger was not delivered within {ep.steps} steps")


def _airsim_crash(ep: Episode) -> Judgement:
    # AirSim driving: failure = a collision (simGetCollisionInfo) or leaving the road (further than half_width from
    # the subject's centre line; the backend sets both). Margin: the slack to the road's edge at the worst moment.
    worst = float(np.asarray(ep.signals["max_lane_distance"]).item())
    margin = float(np.asarray(ep.signals["lane_limit"]).item()) - worst
    descriptors = (worst, float(ep.steps))
    if _flag(ep, "collision"):
        return Judgement(True, min(margin, 0.0), descriptors, f"collided at step {ep.steps}")
    if _flag(ep, "off_road"):
        return Judgement(True, margin, descriptors, f"left the road at step {ep.steps} ({worst:.2f} m off the centre)")
    if _flag(ep, "reached_end"):
        return Judgement(False, margin, descriptors, f"reached the end of the road after {ep.steps} steps")
    return Judgement(False, margin, descriptors, f"stayed on the road without a collision for {ep.steps} steps")


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
        if _flag(ep, "game_over") or (
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
    if _flag(ep, "crashed"):
        return Judgement(True, -1.0, descriptors, f"crashed into a parked car or a wall at step {ep.steps}")
    if _flag(ep, "parked") and ep.terminated:
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


def _early_termination(ep: Episode) -> Judgement:
    if ep.terminated:
        return Judgement(True, ep.total_reward, (), f"terminated at step {ep.steps}")
    return Judgement(False, ep.total_reward, (), f"ran to the limit ({ep.steps} steps)")


def _goal_not_reached(ep: Episode) -> Judgement:
    if ep.terminated:
        return Judgement(False, ep.total_reward, (), f"reached its goal after {ep.steps} steps")
    return Judgement(True, ep.total_reward, (), f"did not terminate within {ep.steps} steps")


def state_hash(row: np.ndarray) -> float:
    """A visited abstract state as a float descriptor: 48 bits of its bytes' BLAKE2b digest (exact in a double)."""
    digest = hashlib.blake2b(np.ascontiguousarray(row, dtype=np.float64).tobytes(), digest_size=6).digest()
    return float(int.from_bytes(digest, "big"))


def _trace_safety(ep: Episode) -> Judgement:
    # "Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Section 4: an action-trace test fails when
    # the agent reaches an unsafe state within its l steps; a prefix that itself ends the episode makes the run
    # invalid. Descriptors (Section 5's fitness inputs): positive and negative reward sums, then the distinct
    # abstract states visited (hashed), in visiting order.
    rewards = np.asarray(ep.signals["rewards"], dtype=float).reshape(-1)
    states = np.asarray(ep.signals["abstract_states"], dtype=np.float64)
    seen: dict[float, None] = {}
    for row in states.reshape(len(states), -1) if states.size else ():
        seen.setdefault(state_hash(row), None)
    descriptors = (float(rewards[rewards > 0].sum()), float(rewards[rewards < 0].sum()), *seen)
    goal = _flag(ep, "goal")
    margin = -1.0 if _flag(ep, "unsafe") else (1.0 if goal else 0.0)
    if _flag(ep, "prefix_terminal"):
        return Judgement(
            False, margin, descriptors, f"the action-trace prefix ended the episode at step {ep.steps}", True
        )
    if _flag(ep, "unsafe"):
        return Judgement(True, margin, descriptors, f"reached an unsafe state at step {ep.steps}")
    how = "reached the goal" if goal else ("ran to its step limit" if ep.truncated else "ended")
    return Judgement(False, margin, descriptors, f"{how} after {ep.steps} steps without an unsafe state")


def _trace_outcome(ep: Episode) -> Judgement:
    # A trace executed alone (no agent step) ends the episode within its "prefix" whenever it ends it at all: that is
    # an outcome to judge here, not an invalid test, and an unsafe end fails (the fuzzing counts its unsafe traces).
    judged = _trace_safety(ep)
    if _flag(ep, "unsafe"):
        return replace(judged, failed=True, invalid=False, reason=f"reached an unsafe state at step {ep.steps}")
    return replace(judged, invalid=False)


# Each oracle is a plug-in: pyproject.toml names these objects under the entry-point group gauntlet.oracles.
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

TAXI_FAULT = Oracle(
    "taxi_fault",
    "Taxi fails on an illegal pick-up/drop-off or a move into a wall (QD fault-diversity paper); "
    "a timeout without a fault passes.",
    ("crash", "illegal_action", "delivered", "moves_before_pickup", "moves_after_pickup"),
    ("moves_before_pickup", "moves_after_pickup"),
    "1.0 delivered, 0.0 timed out without a fault, -1.0 a fault (illegal action or crash)",
    _taxi,
)

AIRSIM_CRASH = Oracle(
    "airsim_crash",
    "AirSim driving fails on a collision or when the car leaves the road (further than half_width from the "
    "subject's centre line); the end of the road or the step limit pass.",
    ("collision", "off_road", "reached_end", "max_lane_distance", "lane_limit"),
    ("max_lane_distance", "steps"),
    "half_width minus the largest distance to the centre line (m); at most 0 after a collision",
    _airsim_crash,
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

EARLY_TERMINATION = Oracle(
    "early_termination",
    "Generic: fails when the episode terminates before its step limit.",
    (),
    (),
    "episode return",
    _early_termination,
)

GOAL_NOT_REACHED = Oracle(
    "goal_not_reached",
    "Generic: fails when the episode does not terminate before its step limit.",
    (),
    (),
    "episode return",
    _goal_not_reached,
)

TRACE_SAFETY = Oracle(
    "trace_safety",
    "Search-based testing of RL (action-trace inputs): fails when the episode ends in an unsafe state of the "
    "subject's search declaration; invalid when the open-loop prefix itself ended the episode.",
    ("prefix_terminal", "unsafe", "goal", "rewards", "abstract_states"),
    ("positive_reward", "negative_reward", "visited_state_hashes..."),
    "1 goal reached, 0 neither, -1 unsafe",
    _trace_safety,
)

TRACE_OUTCOME = Oracle(
    "trace_outcome",
    "Search-based testing of RL (traces executed alone, e.g. trace fuzzing): fails when the episode ends in an "
    "unsafe state of the subject's search declaration; a trace that ends the episode is judged, not invalid.",
    ("prefix_terminal", "unsafe", "goal", "rewards", "abstract_states"),
    ("positive_reward", "negative_reward", "visited_state_hashes..."),
    "1 goal reached, 0 neither, -1 unsafe",
    _trace_outcome,
)

BIPEDAL_FALL = bipedal_oracle("")
BIPEDAL_FALL_TORQUE_JUMP = bipedal_oracle("torque_jump")
BIPEDAL_FALL_HIP_ANGLES = bipedal_oracle("hip_angles")
BIPEDAL_FALL_HIP_SPEEDS = bipedal_oracle("hip_speeds")


def oracles() -> dict[str, Oracle]:
    """Every installed oracle that loads, by name (entry-point group gauntlet.oracles)."""
    return plugins.loadable(plugins.ORACLES, get_oracle)


def get_oracle(name: str) -> Oracle:
    """The installed oracle ``name``: an object with this module's ``Oracle`` interface, whatever package has it."""
    try:
        oracle = load_plugin(plugins.ORACLES, name)
    except KeyError:
        installed = ", ".join(plugin_names(plugins.ORACLES))
        raise NotFound(f"unknown oracle {name!r}; installed oracles: {installed}") from None
    if getattr(oracle, "name", None) != name:
        raise PluginError(f"oracle plug-in {name!r} names an object whose name is {getattr(oracle, 'name', None)!r}")
    return oracle
