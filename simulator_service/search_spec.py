"""A subject's `search` declaration: how search-based testing of RL explores it.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022) searches a subject by depth-first search over a
small action set (Section 3, Algorithm 1), needs to recognise visited states (an abstraction, e.g. rounded positions)
and to tell goal states (S_G) from unsafe ones (S_U). A subject declares those in YAML, e.g. Taxi::

    search:
      actions: [0, 1, 2, 3, 4, 5]          # search action set, in the order the DFS tries them
      snapshot: true                        # sessions can deepcopy the env; false: reset + replay the prefix
      initial: {taxi_row: 0, taxi_col: 0, passenger: 0, destination: 1}
      seed: 0
      repetitions: 1                        # rep(c, p); 1 for a deterministic subject
      abstraction: {observation: all}       # or {observation: [0, 1], decimals: 1} or {attributes: [x, y]}
      unsafe: [{attribute: crash}, {attribute: illegal_action}]
      goal: [{attribute: delivered}]

A condition holds for a state when its one key holds: ``attribute: NAME`` (the unwrapped env's attribute is
truthy), ``terminated: true`` / ``truncated: true`` (the step ended the episode so), or ``observation: I`` with
``abs_at_least: V`` (|observation[I]| >= V). A state is unsafe when any unsafe condition holds, else a goal when any
goal condition holds, else ended when the episode ended, else ongoing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import simulator_pb2
from common.space_spec import pack_observation

# Episode signals every subject with a `search` declaration records (besides STANDARD_SIGNALS).
SEARCH_SIGNALS: dict[str, tuple[str, str]] = {
    "abstract_states": ("step", "the search abstraction of each visited state, s0 .. sn (one row each)"),
    "prefix_terminal": ("episode", "1 when the episode ended during its action-trace prefix, else 0"),
    "unsafe": ("episode", "1 when the final state is unsafe (the subject's search.unsafe), else 0"),
    "goal": ("episode", "1 when the final state is a goal (the subject's search.goal), else 0"),
}

ONGOING, GOAL, UNSAFE, ENDED = (
    simulator_pb2.STATE_KIND_ONGOING,
    simulator_pb2.STATE_KIND_GOAL,
    simulator_pb2.STATE_KIND_UNSAFE,
    simulator_pb2.STATE_KIND_ENDED,
)


@dataclass(frozen=True)
class Condition:
    """One goal/unsafe condition (exactly one of its fields is set)."""

    attribute: str = ""
    terminated: bool = False
    truncated: bool = False
    observation: int = -1
    abs_at_least: float = 0.0

    def holds(self, env: Any, obs: Any, terminated: bool, truncated: bool) -> bool:
        if self.attribute:
            return bool(np.asarray(env.signal(self.attribute)).any())
        if self.terminated:
            return terminated
        if self.truncated:
            return truncated
        row = np.asarray(pack_observation(obs), dtype=np.float64).reshape(-1)
        return bool(abs(row[self.observation]) >= self.abs_at_least)

    @property
    def text(self) -> str:
        if self.attribute:
            return f"attribute {self.attribute}"
        if self.terminated or self.truncated:
            return "terminated" if self.terminated else "truncated"
        return f"|observation[{self.observation}]| >= {self.abs_at_least:g}"


@dataclass(frozen=True)
class SearchSpec:
    actions: tuple[int, ...]
    snapshot: bool
    initial: Mapping[str, Any]
    seed: int
    repetitions: int
    observation_indices: tuple[int, ...] | None  # None: the whole observation (with attributes empty)
    attributes: tuple[str, ...]
    decimals: int | None
    unsafe: tuple[Condition, ...]
    goal: tuple[Condition, ...]

    def abstract(self, env: Any, obs: Any) -> np.ndarray:
        """The state's abstraction: chosen observation entries or env attributes, rounded to `decimals`."""
        if self.attributes:
            row = np.concatenate([np.asarray(env.signal(a), dtype=np.float64).reshape(-1) for a in self.attributes])
        else:
            row = np.asarray(pack_observation(obs), dtype=np.float64).reshape(-1)
            if self.observation_indices is not None:
                row = row[list(self.observation_indices)]
        return np.round(row, self.decimals) if self.decimals is not None else row

    def kind(self, env: Any, obs: Any, terminated: bool, truncated: bool) -> simulator_pb2.StateKind.ValueType:
        if any(c.holds(env, obs, terminated, truncated) for c in self.unsafe):
            return UNSAFE
        if any(c.holds(env, obs, terminated, truncated) for c in self.goal):
            return GOAL
        return ENDED if terminated or truncated else ONGOING

    @property
    def abstraction_text(self) -> str:
        rounding = f" rounded to {self.decimals} decimals" if self.decimals is not None else ""
        if self.attributes:
            return f"attributes {', '.join(self.attributes)}{rounding}"
        which = "all" if self.observation_indices is None else ", ".join(map(str, self.observation_indices))
        return f"observation entries {which}{rounding}"


def parse_search(raw: object, parameter_names: Sequence[str]) -> SearchSpec:
    """The `search` section of a subject file; ValueError naming the bad field and its allowed values."""
    if not isinstance(raw, dict):
        raise ValueError("search must be a mapping (actions, snapshot, initial, seed, abstraction, unsafe, goal)")
    allowed = {"actions", "snapshot", "initial", "seed", "repetitions", "abstraction", "unsafe", "goal"}
    if unknown := sorted(set(raw) - allowed):
        raise ValueError(f"search: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    actions = raw.get("actions")
    if not isinstance(actions, list) or not actions or not all(isinstance(a, int) and a >= 0 for a in actions):
        raise ValueError(f"search.actions must be a non-empty list of action indices (integers >= 0), got {actions!r}")
    if len(set(actions)) != len(actions):
        raise ValueError(f"search.actions must not repeat an action, got {actions!r}")
    initial = raw.get("initial")
    if not isinstance(initial, dict) or sorted(initial) != sorted(parameter_names):
        raise ValueError(f"search.initial must give every parameter ({', '.join(parameter_names)}), got {initial!r}")
    seed, repetitions = raw.get("seed", 0), raw.get("repetitions", 1)
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"search.seed must be an integer >= 0, got {seed!r}")
    if not isinstance(repetitions, int) or not 1 <= repetitions <= 100:
        raise ValueError(f"search.repetitions must be an integer in [1, 100], got {repetitions!r}")
    indices, attributes, decimals = _abstraction(raw.get("abstraction", {"observation": "all"}))
    unsafe = _conditions("unsafe", raw.get("unsafe"))
    goal = _conditions("goal", raw.get("goal"))
    return SearchSpec(
        actions=tuple(actions),
        snapshot=bool(raw.get("snapshot", True)),
        initial=dict(initial),
        seed=seed,
        repetitions=repetitions,
        observation_indices=indices,
        attributes=attributes,
        decimals=decimals,
        unsafe=unsafe,
        goal=goal,
    )


def _abstraction(raw: object) -> tuple[tuple[int, ...] | None, tuple[str, ...], int | None]:
    if not isinstance(raw, dict) or len(set(raw) - {"decimals"}) != 1 or not set(raw) & {"observation", "attributes"}:
        raise ValueError(
            "search.abstraction must be {observation: all | [indices]} or {attributes: [names]}, "
            f"optionally with decimals: N; got {raw!r}"
        )
    decimals = raw.get("decimals")
    if decimals is not None and (not isinstance(decimals, int) or not 0 <= decimals <= 12):
        raise ValueError(f"search.abstraction.decimals must be an integer in [0, 12], got {decimals!r}")
    if "attributes" in raw:
        names = raw["attributes"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"search.abstraction.attributes must be a non-empty list of names, got {names!r}")
        return None, tuple(names), decimals
    which = raw["observation"]
    if which == "all":
        return None, (), decimals
    if not isinstance(which, list) or not which or not all(isinstance(i, int) and i >= 0 for i in which):
        raise ValueError(f"search.abstraction.observation must be 'all' or a list of indices >= 0, got {which!r}")
    return tuple(which), (), decimals


def _conditions(field: str, raw: object) -> tuple[Condition, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"search.{field} must be a non-empty list of conditions, got {raw!r}")
    out = []
    for i, entry in enumerate(raw):
        where = f"search.{field}[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping, got {entry!r}")
        if set(entry) == {"attribute"} and isinstance(entry["attribute"], str) and entry["attribute"]:
            out.append(Condition(attribute=entry["attribute"]))
        elif set(entry) == {"terminated"} and entry["terminated"] is True:
            out.append(Condition(terminated=True))
        elif set(entry) == {"truncated"} and entry["truncated"] is True:
            out.append(Condition(truncated=True))
        elif set(entry) == {"observation", "abs_at_least"} and isinstance(entry["observation"], int):
            out.append(Condition(observation=entry["observation"], abs_at_least=float(entry["abs_at_least"])))
        else:
            raise ValueError(
                f"{where} must be one of {{attribute: NAME}}, {{terminated: true}}, {{truncated: true}} or "
                f"{{observation: INDEX, abs_at_least: VALUE}}, got {entry!r}"
            )
    return tuple(out)


def to_proto(spec: SearchSpec, space: Any, agent_actions: int) -> simulator_pb2.SearchDeclaration:
    """The declaration as DescribeEnvironment sends it (`space`: the subject's ParameterSpace)."""
    initial = space.test_case_to_proto("initial", spec.initial).values
    msg = simulator_pb2.SearchDeclaration(
        actions=spec.actions,
        agent_actions=agent_actions,
        snapshot=spec.snapshot,
        seed=spec.seed,
        repetitions=spec.repetitions,
        abstraction=spec.abstraction_text,
    )
    for name, value in initial.items():
        msg.initial[name].CopyFrom(value)
    return msg
