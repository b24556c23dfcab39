"""The typed test case: what a strategy proposes, a simulator runs and the campaign store keeps.

A test case is the subject's parameter values (how the environment is reset) and, for the strategies of
search-based testing of RL ("Search-Based Testing of Reinforcement Learning", IJCAI-ECAI 2022), an optional
action trace: actions replayed open loop after the reset, then ``agent_steps`` steps of the model under test.

On the wire it is gauntlet.v1 ``TestCase`` (``to_proto``). In the campaign store it is one JSON object
(``to_stored``/``from_stored``): the values, plus the trace under the key ``"action_trace"`` when there is one::

    {"x": 0.1, "action_trace": {"actions": [1, 1, 0], "agent_steps": 40, "reset_seed": 0,
                                "artifact": "taxi.json", "boundary": 2}}

That is the format earlier versions stored, so their rows load unchanged. The key is reserved in the stored
form only: in memory the trace is a field, never an entry among the values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.generated.gauntlet.v1 import common_pb2
from common.space import ParameterSpace, ParamValue

STORED_TRACE_KEY = "action_trace"  # the stored form's key for the trace (the format of earlier versions)
STORED_ORIGIN_KEY = "seed_origin"  # the stored form's key for a replayed case's seed origin
_TRACE_FIELDS = ("actions", "agent_steps", "reset_seed", "artifact", "prefix_length", "agent_subject")

Label = str | int | float | bool


@dataclass(frozen=True)
class ActionTrace:
    """gauntlet.v1 ActionTrace: ``actions`` open loop after the reset, then ``agent_steps`` agent steps.

    ``labels`` are provenance (the suite, boundary state or generation a test belongs to): stored as given and sent
    as ``ActionTrace.labels`` (strings), so a listing can group executions by them."""

    actions: tuple[int, ...]
    agent_steps: int = 0
    reset_seed: int | None = None  # None: the episode seed derived from (campaign seed, test-case id, repetition)
    artifact: str | None = None  # the search artifact the trace comes from (a file name)
    prefix_length: int | None = None  # actions of the prefix a performance test grew from
    labels: Mapping[str, Label] = field(default_factory=dict)
    agent_subject: str | None = None  # the subject variant the agent acts in after the replay; None: the campaign's

    def to_stored(self) -> dict[str, Any]:
        out: dict[str, Any] = {"actions": [int(a) for a in self.actions], "agent_steps": int(self.agent_steps)}
        if self.reset_seed is not None:
            out["reset_seed"] = int(self.reset_seed)
        if self.artifact is not None:
            out["artifact"] = self.artifact
        if self.prefix_length is not None:
            out["prefix_length"] = int(self.prefix_length)
        if self.agent_subject:
            out["agent_subject"] = self.agent_subject
        return {**out, **self.labels}

    @staticmethod
    def from_stored(data: Mapping[str, Any]) -> ActionTrace:
        return ActionTrace(
            actions=tuple(int(a) for a in data.get("actions", ())),
            agent_steps=int(data.get("agent_steps", 0)),
            reset_seed=None if data.get("reset_seed") is None else int(data["reset_seed"]),
            artifact=None if data.get("artifact") is None else str(data["artifact"]),
            prefix_length=None if data.get("prefix_length") is None else int(data["prefix_length"]),
            labels={str(k): v for k, v in data.items() if k not in _TRACE_FIELDS},
            agent_subject=str(data["agent_subject"]) if data.get("agent_subject") else None,
        )

    def to_proto(self) -> common_pb2.ActionTrace:
        msg = common_pb2.ActionTrace(
            actions=[int(a) for a in self.actions],
            agent_steps=int(self.agent_steps),
            artifact=self.artifact or "",
            prefix_length=int(self.prefix_length or 0),
            agent_subject=self.agent_subject or "",
        )
        if self.reset_seed is not None:
            msg.reset_seed = int(self.reset_seed)
        for key, value in self.labels.items():
            msg.labels[str(key)] = str(value)
        return msg


@dataclass(frozen=True)
class SeedOrigin:
    """gauntlet.v1 SeedOrigin: the episode a replayed test case reproduces (its campaign's seed, its id there), whose
    seeds its repetitions reset with (common/seeding.py case_episode_seed)."""

    campaign_seed: int
    test_case_id: str

    def to_stored(self) -> dict[str, Any]:
        return {"campaign_seed": int(self.campaign_seed), "test_case_id": self.test_case_id}

    @staticmethod
    def from_stored(data: Mapping[str, Any]) -> SeedOrigin:
        return SeedOrigin(int(data["campaign_seed"]), str(data["test_case_id"]))


@dataclass(frozen=True)
class TestCase:
    """One test case: the subject's parameter values, an optional action trace, and for a replayed stored
    execution (the ``replay`` strategy) the origin of its episode seeds."""

    __test__ = False  # not a pytest test class, whatever module imports it

    values: Mapping[str, ParamValue]
    action_trace: ActionTrace | None = None
    seed_origin: SeedOrigin | None = None

    def to_stored(self) -> dict[str, Any]:
        """The campaign store's JSON object (values, then the trace under STORED_TRACE_KEY and the seed origin
        under STORED_ORIGIN_KEY when there are)."""
        out = dict(self.values)
        if self.action_trace is not None:
            out[STORED_TRACE_KEY] = self.action_trace.to_stored()
        if self.seed_origin is not None:
            out[STORED_ORIGIN_KEY] = self.seed_origin.to_stored()
        return out

    @staticmethod
    def from_stored(data: Mapping[str, Any]) -> TestCase:
        """A stored test case, of this version or an earlier one (the same format)."""
        trace = data.get(STORED_TRACE_KEY)
        origin = data.get(STORED_ORIGIN_KEY)
        values = {k: v for k, v in data.items() if k not in (STORED_TRACE_KEY, STORED_ORIGIN_KEY)}
        return TestCase(
            values,
            ActionTrace.from_stored(trace) if isinstance(trace, Mapping) else None,
            SeedOrigin.from_stored(origin) if isinstance(origin, Mapping) else None,
        )

    def to_proto(self, space: ParameterSpace, case_id: str) -> common_pb2.TestCase:
        """The wire form: every parameter of ``space`` (typed by it), the trace and the seed origin when set."""
        msg = space.test_case_to_proto(case_id, self.values)
        if self.action_trace is not None:
            msg.action_trace.CopyFrom(self.action_trace.to_proto())
        if self.seed_origin is not None:
            msg.seed_origin.campaign_seed = int(self.seed_origin.campaign_seed)
            msg.seed_origin.test_case_id = self.seed_origin.test_case_id
        return msg

    def same_as(self, other: TestCase) -> bool:
        """Equal as stored (a JSON round trip makes tuples lists; key order does not matter)."""
        return json.dumps(self.to_stored(), sort_keys=True) == json.dumps(other.to_stored(), sort_keys=True)


def trace_case(
    initial: Mapping[str, ParamValue],
    actions: list[int],
    agent_steps: int,
    reset_seed: int,
    *,
    artifact: str | None = None,
    prefix_length: int | None = None,
    agent_subject: str | None = None,
    **labels: Label,
) -> TestCase:
    """A test case that resets as ``initial`` says, replays ``actions`` open loop, then runs ``agent_steps`` (in the
    subject variant ``agent_subject`` when given: the agent acts with that variant's action set)."""
    trace = ActionTrace(
        tuple(int(a) for a in actions),
        int(agent_steps),
        int(reset_seed),
        artifact,
        prefix_length,
        labels,
        agent_subject or None,
    )
    return TestCase(dict(initial), trace)
