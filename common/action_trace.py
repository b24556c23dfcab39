"""The stored form of a test case's action trace, for code that reads stored test cases as plain dicts.

New code uses the typed test case (common/test_case.py: ``TestCase``, ``ActionTrace``); this module keeps the
two names the generator's listing used, on top of it, until every reader has moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.generated.gauntlet.v1 import common_pb2
from common.test_case import STORED_TRACE_KEY, TestCase

ACTION_TRACE_KEY = STORED_TRACE_KEY


def attach_trace(msg: common_pb2.TestCase, values: Mapping[str, Any]) -> None:
    """Sets msg.action_trace from a stored test case's trace, if it has one."""
    trace = TestCase.from_stored(values).action_trace
    if trace is not None:
        msg.action_trace.CopyFrom(trace.to_proto())
