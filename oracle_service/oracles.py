"""Oracles: the interface (Episode, Judgement, Oracle), the subject-independent oracles, and the installed ones.

An oracle is a pure function of a recorded episode. It names the signals it reads, so the simulator records only
those (and a campaign whose subject does not record them is refused before it starts). The margin is a continuous
distance to failure: lower is closer to failing. A subject family's own oracles live in its pack
(subjects/<family>/oracle.py, written against oracle_service/plugin_api.py); the generic ones here judge any subject
(early_termination, goal_not_reached) or any subject with a search declaration (trace_safety, trace_outcome).
"""

from __future__ import annotations

import hashlib
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


def _early_termination(ep: Episode) -> Judgement:
    if ep.terminated:
        return Judgement(True, ep.total_reward, (), f"terminated at step {ep.steps}")
    return Judgement(False, ep.total_reward, (), f"ran to the limit ({ep.steps} steps)")


def _goal_not_reached(ep: Episode) -> Judgement:
    if ep.terminated:
        return Judgement(False, ep.total_reward, (), f"reached its goal after {ep.steps} steps")
    return Judgement(True, ep.total_reward, (), f"did not terminate within {ep.steps} steps")


def _flag(ep: Episode, name: str) -> bool:
    return bool(np.asarray(ep.signals[name]).item())


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
