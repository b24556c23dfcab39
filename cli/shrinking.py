"""Shrinking failures from the command line: `gauntlet shrink CAMPAIGN [TEST_ID ...]` and `gauntlet run --shrink N`
ask the generator's ShrinkExecution for each failure and print it beside its minimal failing input."""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc, oracle_pb2
from common.space import value_from_proto

SHRINK_TIMEOUT_SECONDS = 900


def failing_ids(executions: list[generator_pb2.Execution], first: int) -> list[str]:
    """The ids of the first `first` failures, in asking order, one per distinct input."""
    seen: set[str] = set()
    ids = []
    for e in sorted(executions, key=lambda e: e.index):
        if e.verdict != oracle_pb2.VERDICT_KIND_FAIL:
            continue
        # an action trace is part of the input: search-based tests share their start values and differ by trace
        trace = list(e.test_case.action_trace.actions) if e.test_case.HasField("action_trace") else None
        values = {k: value_from_proto(v) for k, v in e.test_case.values.items()}
        key = json.dumps([values, trace, e.test_case.action_trace.agent_steps], sort_keys=True)
        if key not in seen:
            seen.add(key)
            ids.append(e.test_case.id)
    return ids[:first]


def shrink_and_print(
    console: Console,
    generator: generator_pb2_grpc.GeneratorServiceStub,
    campaign_id: str,
    ids: list[str],
    max_executions: int,
) -> list[generator_pb2.ShrinkExecutionResponse]:
    """Shrinks each failure and prints it beside the original; the answers in the same order."""
    answers = []
    for test_case_id in ids:
        request = generator_pb2.ShrinkExecutionRequest(
            campaign_id=campaign_id, test_case_id=test_case_id, max_executions=max_executions
        )
        with console.status(f"shrinking {test_case_id}..."):
            answer = generator.ShrinkExecution(request, timeout=SHRINK_TIMEOUT_SECONDS)
        answers.append(answer)
        print_shrunk(console, answer)
    return answers


def print_stored_shrinks(
    console: Console, generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str
) -> list[generator_pb2.ShrinkExecutionResponse]:
    """Prints the campaign's stored shrinks (ListShrinks: those its `shrink` option made at its end)."""
    answer = generator.ListShrinks(generator_pb2.ListShrinksRequest(campaign_id=campaign_id), timeout=60)
    if not answer.shrinks:
        console.print("shrink: no failure to shrink", highlight=False)
    for s in answer.shrinks:
        print_shrunk(console, s)
    return list(answer.shrinks)


def _values(e: generator_pb2.Execution) -> str:
    values = {k: value_from_proto(v) for k, v in sorted(e.test_case.values.items())}
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def print_shrunk(console: Console, s: generator_pb2.ShrinkExecutionResponse) -> None:
    o, m = s.original, s.shrunk
    console.print(f"[bold]{escape(o.test_case.id)}[/bold]: {escape(o.reason)}", highlight=False)
    moved_before = [n for n in s.nominal if n in o.test_case.values]
    console.print(
        f"  original  distance {s.original_distance:.4f} from nominal; {_values(o)}", highlight=False, soft_wrap=True
    )
    console.print(
        f"  shrunk    distance {s.shrunk_distance:.4f}, {len(s.moved)} of {len(moved_before)} parameters moved "
        f"({', '.join(s.moved) or 'none'}), {s.executions} executions; {_values(m)}",
        highlight=False,
        soft_wrap=True,
    )
    if o.test_case.HasField("action_trace"):
        console.print(
            f"  trace     {len(o.test_case.action_trace.actions)} actions -> {len(m.test_case.action_trace.actions)} "
            "(the shortest failing prefix found)",
            highlight=False,
        )
    console.print(f"            still fails: {escape(m.reason)}", highlight=False)
