"""Shrunk failures in a campaign's report: each failure the generator shrank (ShrinkExecution, or the campaign's
`shrink` option at its end) beside its minimal failing input, with both distances from the nominal point and the
executions the search spent. The analysis service reads them through the generator's contract (ListShrinks), as it
reads the executions (ListExecutions); a generator that predates ListShrinks gives none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from analysis_service.html_kit import escape, fmt_float, fmt_value, scroll
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.space import value_from_proto

LIST_TIMEOUT_SECONDS = 60
_VERDICT = {1: "pass", 2: "fail", 3: "invalid"}


def _values(e: generator_pb2.Execution) -> dict[str, Any]:
    return {k: value_from_proto(v) for k, v in sorted(e.test_case.values.items())}


def _moved(values: Mapping[str, Any], nominal: Mapping[str, float]) -> list[str]:
    return [n for n, c in nominal.items() if n in values and float(values[n]) != c]


def _actions(e: generator_pb2.Execution) -> int | None:
    """The number of open-loop actions of the input's action trace; None for an input without one."""
    return len(e.test_case.action_trace.actions) if e.test_case.HasField("action_trace") else None


def shrink_entry(s: generator_pb2.ShrinkExecutionResponse, campaign_id: str) -> dict[str, Any]:
    """One shrunk failure as the JSON report holds it."""
    nominal = dict(sorted(s.nominal.items()))
    original, shrunk = _values(s.original), _values(s.shrunk)
    return {
        "test_case_id": s.original.test_case.id,
        "reason": s.original.reason,
        "replay": f"gauntlet replay {campaign_id} {s.original.test_case.id}",
        "executions": s.executions,
        "nominal": nominal,
        "original": {
            "values": original,
            "distance": s.original_distance,
            "moved": _moved(original, nominal),
            "verdict": _VERDICT.get(s.original.verdict, "unknown"),
            "reason": s.original.reason,
            "steps": s.original.steps,
            "actions": _actions(s.original),  # its action trace's length (the shrink keeps its shortest failing prefix)
        },
        "shrunk": {
            "values": shrunk,
            "distance": s.shrunk_distance,
            "moved": list(s.moved),
            "verdict": _VERDICT.get(s.shrunk.verdict, "unknown"),
            "reason": s.shrunk.reason,
            "steps": s.shrunk.steps,
            "actions": _actions(s.shrunk),  # its action trace's length (the shrink keeps its shortest failing prefix)
        },
    }


def fetch_shrinks(generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str) -> list[dict[str, Any]]:
    """The campaign's stored shrinks as report entries; none from a generator without ListShrinks."""
    try:
        answer = generator.ListShrinks(
            generator_pb2.ListShrinksRequest(campaign_id=campaign_id), timeout=LIST_TIMEOUT_SECONDS
        )
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return []
        raise
    return [shrink_entry(s, campaign_id) for s in answer.shrinks]


def shrinks_section(entries: Sequence[Mapping[str, Any]]) -> str:
    """The HTML of a campaign's shrunk failures: per failure, a line with the distances and executions, then its
    parameters side by side (nominal, original, shrunk)."""
    if not entries:
        return ""
    parts = [
        "<h3>Shrunk failures</h3>",
        "<p class=meta>Each failure beside the minimal failing input found for it, run under the failure's own "
        "episode seed (gauntlet shrink): distance from the nominal point (the centre of every real and integer "
        "range, each scaled by its range) and the parameters moved from it.</p>",
    ]
    for e in entries:
        o, s = e["original"], e["shrunk"]
        tid = escape(str(e["test_case_id"]))
        parts.append(
            f"<p class=meta><code>{tid}</code>: {escape(str(e.get('reason') or ''))}; shrunk in "
            f"{int(e['executions'])} executions, distance {fmt_float(o['distance'], 4)} → "
            f"{fmt_float(s['distance'], 4)}, parameters moved {len(o['moved'])} → {len(s['moved'])}"
            + (f", trace actions {o['actions']} → {s['actions']}" if o.get("actions") is not None else "")
            + "; "
            f"the shrunk input: {escape(str(s['verdict']))}, {escape(str(s.get('reason') or ''))}</p>"
        )
        names = list(dict.fromkeys([*o["values"], *s["values"]]))
        rows = "".join(
            "<tr>"
            f"<td><code>{escape(n)}</code></td>"
            f"<td class=num>{escape(fmt_value(e['nominal'][n])) if n in e['nominal'] else ''}</td>"
            f"<td class=num>{escape(fmt_value(o['values'].get(n)))}</td>"
            f"<td class=num>{escape(fmt_value(s['values'].get(n)))}{' (moved)' if n in s['moved'] else ''}</td>"
            "</tr>"
            for n in names
        )
        if o.get("actions") is not None:  # an action-trace input: its prefix shrinks to the shortest that fails
            rows += (
                "<tr><td>action trace length</td><td class=num></td>"
                f"<td class=num>{int(o['actions'])}</td><td class=num>{int(s['actions'])}</td></tr>"
            )
        rows += (
            "<tr><td>distance from nominal</td><td class=num>0</td>"
            f"<td class=num>{fmt_float(o['distance'], 4)}</td><td class=num>{fmt_float(s['distance'], 4)}</td></tr>"
        )
        head = f"<tr><th>parameter</th><th>nominal</th><th>original {tid}</th><th>shrunk</th></tr>"
        parts.append(scroll(f'<table class="shrink"><thead>{head}</thead><tbody>{rows}</tbody></table>'))
    return "".join(parts)
