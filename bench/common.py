"""Helpers the replication benches share: run a campaign through the generator service to its end, list its
executions, and read the runs a bench saved (one JSON line per finished run) back for a merged table.

Every function talks to a running suite (cli.launcher.LocalSuite) over gRPC, as a user's client would.
Add functions here; do not change the signature of one another bench uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from generator_service.config import CampaignConfig


def run_campaign(gen: generator_pb2_grpc.GeneratorServiceStub, config: CampaignConfig) -> generator_pb2.CampaignStatus:
    """Starts the campaign and blocks until it ends; returns its final status (raises on an error stop)."""
    cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
    status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
    if status.stop_reason == "error":
        raise RuntimeError(f"campaign {config.name} ({cid}) stopped on an error: {status.error}")
    return status


def campaign_executions(
    gen: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str
) -> list[generator_pb2.Execution]:
    """The campaign's executions in asking order (index), invalid ones included."""
    rows = [
        r.execution
        for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=campaign_id), timeout=600)
    ]
    return sorted(rows, key=lambda e: e.index)


def load_saved_runs(
    paths: Iterable[Path],
    name_field: str,
    settings: Sequence[str],
    *,
    settings_required: bool = True,
    parse: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Runs saved one JSON object per line in a bench's .runs.jsonl files, per method (`name_field`) in seed order,
    and the settings every run shares.

    Raises SystemExit naming the file (and line, and field) for an unreadable file, a malformed line, a run that
    differs from earlier ones in a setting, or the same (method, seed) saved twice (overlapping shares). With
    `settings_required=False`, a run that lacks a setting (saved before the bench recorded it) is accepted.
    `parse` may convert a row's fields in place; what it raises (ValueError, KeyError, TypeError) is reported
    at the row's file:line. Rows are returned with `name_field` removed and everything else as saved."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    shared: dict[str, Any] = {}
    for path in paths:
        try:
            lines = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
        except OSError as err:
            raise SystemExit(f"error: cannot read saved runs {path}: {err.strerror}") from err
        for number, line in lines:
            try:
                row = json.loads(line)
                name, seed = str(row.pop(name_field)), int(row["seed"])
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                raise SystemExit(f"error: {path}:{number}: not a saved run ({type(err).__name__}: {err})") from err
            for key in settings:
                if key not in row and not settings_required:
                    continue
                if key not in row:
                    raise SystemExit(f"error: {path}:{number}: not a saved run (no {key!r})")
                if shared.setdefault(key, row[key]) != row[key]:
                    raise SystemExit(
                        f"error: {path}:{number}: {key} is {row[key]!r} but earlier runs have "
                        f"{shared[key]!r}; summarise runs with different settings apart"
                    )
            if parse is not None:
                try:
                    parse(row)
                except (ValueError, KeyError, TypeError) as err:
                    raise SystemExit(f"error: {path}:{number}: not a saved run ({type(err).__name__}: {err})") from err
            if seed in found.setdefault(name, {}):
                raise SystemExit(f"error: {path}:{number}: {name} seed {seed} is saved twice (overlapping shares?)")
            found[name][seed] = row
    return {name: [runs[seed] for seed in sorted(runs)] for name, runs in found.items()}, shared
