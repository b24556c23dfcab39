"""Step 1 of search-based testing of RL: depth-first search for a reference trace and boundary states.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Section 3, Algorithm 1, with the corrections a
faithful reading needs (our deviations, documented in docs/strategies/search-based.md):

* the visited-state log V_S receives the *successor* s′ (the printed ``Push(V_S, s)`` contradicts the worked example);
* the search stops as soon as it succeeds (as printed, the caller's loops would keep sampling and pollute τ_ref);
* the boundary look-ahead V_S[i+2] past the end of the log counts as "not explored";
* rewards are recorded when a transition is sampled (a black-box subject has no callable R);
* an episode that ends neither in a goal nor an unsafe state (a time limit) is a dead end: explored, like an
  unsafe one, and the search backtracks from it;
* the recursion is an explicit stack (Mario's reference traces are thousands of steps deep).

The algorithm runs over ``SearchEnvironment``, so it needs no simulator: the simulator's sessions implement it in
session.py (snapshot/restore, or reset + replay), a plain graph implements it in the tests (the paper's Figure 2).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

ONGOING, GOAL, UNSAFE, ENDED = "ongoing", "goal", "unsafe", "ended"


@dataclass(frozen=True)
class Visit:
    """A state the search reached: its abstraction (`key`), kind, the reward of the transition into it, and a
    `handle` its environment uses to come back to it (a snapshot id, an action prefix, a graph node)."""

    key: Hashable
    kind: str
    reward: float = 0.0
    handle: Any = None


class SearchEnvironment(Protocol):
    def root(self) -> Visit:
        """The initial state s0."""

    def sample(self, state: Visit, action: int) -> Visit:
        """Samples s′ from P(state, action): goes back to `state` (restore or replay) and takes `action`."""


@dataclass(frozen=True)
class BoundaryState:
    depth: int  # d(τ_ref, s): actions of τ_ref before s
    key: Hashable


@dataclass
class SearchStats:
    samples: int = 0
    visited: int = 0
    explored: int = 0
    seconds: float = 0.0
    stopped: str = ""  # "goal", "exhausted" (no goal reachable within the search) or "budget"


@dataclass
class SearchResult:
    success: bool
    actions: list[int] = field(default_factory=list)  # τ_A,ref
    rewards: list[float] = field(default_factory=list)  # r_1 .. r_n of τ_ref
    states: list[Hashable] = field(default_factory=list)  # s_0 .. s_n of τ_ref (abstractions)
    boundary: list[BoundaryState] = field(default_factory=list)  # S′_BO in τ_ref order (DB = their depths)
    stats: SearchStats = field(default_factory=SearchStats)


def depth_first_search(
    env: SearchEnvironment,
    actions: Sequence[int],
    repetitions: int = 1,
    max_samples: int = 0,
    max_seconds: float = 0.0,
) -> SearchResult:
    """Algorithm 1: τ_ref and the boundary states along it; `max_samples`/`max_seconds` bound it (0 = no bound)."""
    started = time.perf_counter()
    stats = SearchStats()
    root = env.root()
    log_states: list[Hashable] = [root.key]  # V_S
    log_actions: list[int] = []  # V_A; V_A[i] led to V_S[i+1]
    log_rewards: list[float] = [0.0]  # reward of the transition into V_S[i], recorded when sampled
    visited = {root.key}
    explored: set[Hashable] = set()
    success = root.kind == GOAL
    if root.kind in (UNSAFE, ENDED):
        explored.add(root.key)
    # each frame: the state, the index of its next (action, repetition) pair
    stack: list[tuple[Visit, int]] = [] if success or root.key in explored else [(root, 0)]
    budget_hit = False
    while stack and not success:
        state, next_pair = stack[-1]
        if next_pair >= len(actions) * repetitions:  # backtracked from every successor: the state failed
            explored.add(state.key)
            stack.pop()
            continue
        if (max_samples and stats.samples >= max_samples) or (
            max_seconds and time.perf_counter() - started >= max_seconds
        ):
            budget_hit = True
            break
        stack[-1] = (state, next_pair + 1)
        child = env.sample(state, actions[next_pair // repetitions])
        stats.samples += 1
        if child.key in visited:  # a cycle (or a state another branch reached): not explored twice
            continue
        visited.add(child.key)
        log_actions.append(actions[next_pair // repetitions])
        log_states.append(child.key)
        log_rewards.append(child.reward)
        if child.kind == GOAL:
            success = True
        elif child.kind in (UNSAFE, ENDED):
            explored.add(child.key)
        else:
            stack.append((child, 0))
    stats.visited, stats.explored = len(visited), len(explored)
    stats.seconds = time.perf_counter() - started
    stats.stopped = "goal" if success else ("budget" if budget_hit else "exhausted")
    if not success:
        return SearchResult(False, stats=stats)
    return _reference(log_states, log_actions, log_rewards, explored, stats)


def _reference(
    log_states: list[Hashable],
    log_actions: list[int],
    log_rewards: list[float],
    explored: set[Hashable],
    stats: SearchStats,
) -> SearchResult:
    """Algorithm 1's post-processing: τ_ref is the unexplored part of the log; a kept state whose next log entry
    was explored is a boundary state."""
    result = SearchResult(True, states=[log_states[0]], stats=stats)
    for i in range(1, len(log_actions) + 1):  # V_A[i-1] led to V_S[i] (0-based)
        state = log_states[i]
        if state in explored:
            continue
        result.actions.append(log_actions[i - 1])
        result.rewards.append(log_rewards[i])
        result.states.append(state)
        if i + 1 < len(log_states) and log_states[i + 1] in explored:  # out of range: not explored
            result.boundary.append(BoundaryState(len(result.actions), state))
    return result


def repetitions_for(confidence: float, smallest_probability: float) -> int:
    """rep(c, p) = ⌈log(1 − c) / log(1 − p)⌉ (Section 3): samples per action and state to see every successor
    with probability at least c; 1 for a deterministic subject (p = 1)."""
    import math

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0 < smallest_probability <= 1:
        raise ValueError(f"smallest_probability must be in (0, 1], got {smallest_probability}")
    if smallest_probability == 1:
        return 1
    return math.ceil(math.log(1 - confidence) / math.log(1 - smallest_probability))
