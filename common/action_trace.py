"""Action-trace test inputs (gauntlet.v1 ActionTrace) inside a strategy's test input.

A strategy of search-based testing of RL ("Search-Based Testing of Reinforcement Learning", IJCAI-ECAI 2022) asks
for inputs like any other: a dict of the subject's parameter values (the reset), plus one reserved entry,
``ACTION_TRACE_KEY``, holding the trace as JSON-like data (so the campaign store keeps it with the values)::

    {"action_trace": {"actions": [1, 1, 0], "agent_steps": 40, "reset_seed": 0,
                      "artifact": "search/taxi.json", "prefix_length": 3, ...}}

Keys besides the ActionTrace fields (e.g. the suite and boundary state a test belongs to) are kept in the store
and not sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.generated.gauntlet.v1 import common_pb2
from common.space import ParameterSpace

ACTION_TRACE_KEY = "action_trace"


FIELDS = ("actions", "agent_steps", "reset_seed", "artifact", "prefix_length")


def to_test_case(space: ParameterSpace, case_id: str, values: Mapping[str, Any]) -> common_pb2.TestCase:
    """The TestCase of a strategy's input: its parameter values, and its action trace when it carries one."""
    msg = space.test_case_to_proto(case_id, values)
    attach_trace(msg, values)
    return msg


def attach_trace(msg: common_pb2.TestCase, values: Mapping[str, Any]) -> None:
    """Sets msg.action_trace from the input's ACTION_TRACE_KEY entry, if it has one (other keys become labels)."""
    trace = values.get(ACTION_TRACE_KEY)
    if not isinstance(trace, Mapping):
        return
    msg.action_trace.actions.extend(int(a) for a in trace.get("actions", ()))
    msg.action_trace.agent_steps = int(trace.get("agent_steps", 0))
    if trace.get("reset_seed") is not None:
        msg.action_trace.reset_seed = int(trace["reset_seed"])
    msg.action_trace.artifact = str(trace.get("artifact", ""))
    msg.action_trace.prefix_length = int(trace.get("prefix_length", 0))
    for key, value in trace.items():
        if key not in FIELDS:
            msg.action_trace.labels[str(key)] = str(value)


def trace_input(
    initial: Mapping[str, Any], actions: list[int], agent_steps: int, reset_seed: int, **provenance: Any
) -> dict[str, Any]:
    """A strategy's test input: the reset `initial` describes, then `actions` open loop, then `agent_steps`."""
    trace = {"actions": [int(a) for a in actions], "agent_steps": int(agent_steps), "reset_seed": int(reset_seed)}
    return {**initial, ACTION_TRACE_KEY: {**trace, **provenance}}
