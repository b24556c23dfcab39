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


@dataclass
class _Frame:
    """A state on the current DFS path: how it was reached and how far its sampling got."""

    visit: Visit
    action: int  # the action that led into it (unused for s0)
    next_pair: int = 0  # index of its next (action, repetition) pair
    new_children: int = 0  # successors it logged (reached first or by a shorter prefix)


def depth_first_search(
    env: SearchEnvironment,
    actions: Sequence[int],
    repetitions: int = 1,
    max_samples: int = 0,
    max_seconds: float = 0.0,
    revisit_shorter: bool = True,
    max_depth: int = 0,
) -> SearchResult:
    """Algorithm 1: τ_ref and the boundary states along it; `max_samples`/`max_seconds` bound it (0 = no bound).
    `max_depth` (0 = none) is a horizon in actions: a successor deeper than it is not logged, so a state whose every
    successor lies beyond it is a dead end, as one the episode's time limit ends (shortest_reference_search).

    With `revisit_shorter` a visited state is explored again when a shorter prefix reaches it: on a subject with a
    time limit, a state first reached deep in a long detour is a dead end there (the limit ends the episode), and
    the printed global rule (`revisit_shorter=False`) would never explore it again from a prefix that leaves time
    to reach the goal. τ_ref is the DFS path when the goal is sampled, which is what the printed post-processing
    of the log computes when every state is logged once."""
    started = time.perf_counter()
    stats = SearchStats()
    root = env.root()
    depth_of: dict[Hashable, int] = {root.key: 0}  # V_S as a set, with the shortest prefix each state was reached by
    explored: set[Hashable] = set()
    success = root.kind == GOAL
    goal: Visit | None = root if success else None
    if root.kind in (UNSAFE, ENDED):
        explored.add(root.key)
    stack: list[_Frame] = [] if success or root.key in explored else [_Frame(root, -1)]
    budget_hit = False
    while stack and not success:
        frame = stack[-1]
        if frame.next_pair >= len(actions) * repetitions:  # backtracked from every successor: the state failed
            explored.add(frame.visit.key)
            stack.pop()
            continue
        if (max_samples and stats.samples >= max_samples) or (
            max_seconds and time.perf_counter() - started >= max_seconds
        ):
            budget_hit = True
            break
        action = actions[frame.next_pair // repetitions]
        frame.next_pair += 1
        child = env.sample(frame.visit, action)
        stats.samples += 1
        depth = len(stack)
        if max_depth and depth > max_depth:  # beyond the horizon: like a cycle, not a successor of the state
            continue
        known = depth_of.get(child.key)
        if known is not None and (not revisit_shorter or known <= depth):  # a cycle, or no shorter way: skip
            continue
        depth_of[child.key] = depth
        explored.discard(child.key)
        frame.new_children += 1
        if child.kind == GOAL:
            success, goal = True, child
            stack.append(_Frame(child, action))
        elif child.kind in (UNSAFE, ENDED):
            explored.add(child.key)
        else:
            stack.append(_Frame(child, action))
    stats.visited, stats.explored = len(depth_of), len(explored)
    stats.seconds = time.perf_counter() - started
    stats.stopped = "goal" if success else ("budget" if budget_hit else "exhausted")
    if not success or goal is None:
        return SearchResult(False, stats=stats)
    return _reference(stack or [_Frame(root, -1)], stats)


def shortest_reference_search(
    env: SearchEnvironment,
    actions: Sequence[int],
    repetitions: int = 1,
    max_samples: int = 0,
    max_seconds: float = 0.0,
) -> SearchResult:
    """τ_ref as the shortest goal trace (our reading of the paper's intent, docs/strategies/search-based.md): the
    first DFS gives a goal trace of n actions; then DFS runs with a horizon (`max_depth`) find the smallest horizon
    that still reaches the goal: horizons 1, 2, 4, ... until one succeeds (a shallow search is cheap, a deep one
    re-explores states reached by many prefixes), then bisection below it. With `revisit_shorter` a bounded DFS
    finds a goal whenever one lies within its horizon, so the result is exact. It is the last successful search
    (its τ_ref and boundary states, a dead end now including "no goal within the horizon"), with the samples and
    seconds of all the searches; a budget that runs out keeps the shortest found so far (`stopped` = "budget")."""
    started = time.perf_counter()
    best = depth_first_search(env, actions, repetitions, max_samples, max_seconds)
    samples, stopped = best.stats.samples, best.stats.stopped
    low, high = 1, len(best.actions) - 1  # a goal trace within `high` actions is what the next search looks for
    probe = 1  # the doubling phase's next horizon; 0 once a bounded search has succeeded (then bisection)
    while best.success and low <= high:
        left_samples = max_samples - samples if max_samples else 0
        left_seconds = max_seconds - (time.perf_counter() - started) if max_seconds else 0.0
        if (max_samples and left_samples <= 0) or (max_seconds and left_seconds <= 0):
            stopped = "budget"
            break
        horizon = min(probe, high) if probe else (low + high) // 2
        trial = depth_first_search(env, actions, repetitions, left_samples, left_seconds, max_depth=horizon)
        samples += trial.stats.samples
        if trial.success:
            best, high, probe = trial, len(trial.actions) - 1, 0
        elif trial.stats.stopped == "budget":
            stopped = "budget"
            break
        else:
            low = horizon + 1
            probe = 2 * horizon if probe else 0
    best.stats.samples, best.stats.stopped = samples, stopped if best.success else best.stats.stopped
    best.stats.seconds = time.perf_counter() - started
    return best


def _reference(path: list[_Frame], stats: SearchStats) -> SearchResult:
    """τ_ref is the path s0 .. goal; a state on it whose first logged successor is not the next state on the path
    (that successor's subtree failed: it is explored) is a boundary state, as the printed look-ahead V_S[i+2] says.
    s0 is not one (the printed loop starts after it)."""
    result = SearchResult(True, states=[path[0].visit.key], stats=stats)
    for i, frame in enumerate(path[1:], start=1):
        result.actions.append(frame.action)
        result.rewards.append(frame.visit.reward)
        result.states.append(frame.visit.key)
        if i + 1 < len(path) and frame.new_children > 1:
            result.boundary.append(BoundaryState(len(result.actions), frame.visit.key))
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
