"""Helpers the replications share (beyond bench/harness.py's run_campaign and campaign_executions): read the runs a
replication saved (one JSON line per finished run) back for a merged table; a throwaway local suite, its clients, and
re-running failing test cases with every repetition judged, to read the trajectories the campaign store does not keep.

Everything talks to the real services over gRPC, as `gauntlet run` does.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import (
    common_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    oracle_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from common.space import ParameterSpace
from common.tensor import from_tensor

REPOSITORY = Path(__file__).resolve().parent.parent


def repo_relative(path: Path) -> str:
    """A path as a results file's command line names it: relative to the repository when inside it, so the
    command reads the same on every checkout."""
    try:
        return str(path.resolve().relative_to(REPOSITORY))
    except ValueError:
        return str(path)


def load_saved_runs(
    paths: Iterable[Path],
    name_field: str,
    settings: Sequence[str],
    *,
    settings_required: bool = True,
    parse: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Runs saved one JSON object per line in a replication's .runs.jsonl files, per method (`name_field`) in seed
    order, and the settings every run shares.

    Raises SystemExit naming the file (and line, and field) for an unreadable file, a malformed line, a run that
    differs from earlier ones in a setting, or the same (method, seed) saved twice (overlapping shares). With
    `settings_required=False`, a run that lacks a setting (saved before the replication recorded it) is accepted.
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


@dataclass
class Clients:
    """Stubs for the services a replication talks to."""

    generator: generator_pb2_grpc.GeneratorServiceStub
    simulator: simulator_pb2_grpc.SimulatorServiceStub
    oracle: oracle_pb2_grpc.OracleServiceStub
    artifact_root: Path = Path("runs")  # the generator's: a campaign names surrogates relative to it

    @staticmethod
    def of(suite: LocalSuite) -> Clients:
        return Clients(
            generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator"))),
            simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint("simulator"))),
            oracle_pb2_grpc.OracleServiceStub(client_channel(suite.endpoint("oracle"))),
            suite.artifact_root,
        )

    def artifact_path(self, path: Path) -> str:
        """`path` as a campaign names it: relative to the generator's artifact root (it refuses any other)."""
        try:
            return str(path.resolve().relative_to(self.artifact_root.resolve()))
        except ValueError:
            raise SystemExit(
                f"error: {path} is outside the generator's artifact root {self.artifact_root}; "
                "a campaign can only name files under it"
            ) from None


@contextmanager
def temporary_suite(name: str, artifact_root: Path = Path("runs")) -> Iterator[LocalSuite]:
    """Every service on loopback with a fresh SQLite store in a temporary folder (deleted afterwards)."""
    with (
        tempfile.TemporaryDirectory(prefix=f"gauntlet-{name}-") as tmp,
        LocalSuite(
            store_url=f"sqlite:///{tmp}/{name}.db",
            log_dir=Path(tmp) / "logs",
            report_root=Path(tmp) / "reports",
            artifact_root=artifact_root,
        ) as local,
    ):
        yield local


def oracle_signals(oracle: oracle_pb2_grpc.OracleServiceStub, name: str) -> list[str]:
    """The signals oracle ``name`` needs recorded."""
    for info in oracle.ListOracles(oracle_pb2.ListOraclesRequest(), timeout=60).oracles:
        if info.name == name:
            return list(info.required_signals)
    raise ValueError(f"unknown oracle {name!r}")


def failing_traces(
    clients: Clients,
    *,
    subject: str,
    model: str,
    oracle: str,
    seed: int,
    repetitions: int,
    space: ParameterSpace,
    cases: Sequence[tuple[str, dict[str, Any]]],
    signal: str,
    request_id: str,
    parallelism: int = 64,
) -> dict[str, list[np.ndarray]]:
    """Re-runs ``cases`` (same campaign seed and test-case ids, so the same episode seeds) and returns, per case,
    ``signal`` of each repetition the oracle judges a failure (empty: the re-run did not fail)."""
    if not cases:
        return {}
    wanted = sorted(set(oracle_signals(clients.oracle, oracle)) | {signal})
    request = simulator_pb2.RunEpisodesRequest(
        request_id=request_id,
        subject=subject,
        seed=seed,
        repetitions=repetitions,
        trace=common_pb2.TraceSpec(signals=wanted),
        parallelism=parallelism,
        test_cases=[space.test_case_to_proto(cid, values) for cid, values in cases],
    )
    request.model.name = model
    episodes: list[common_pb2.EpisodeResult] = []
    for response in clients.simulator.RunEpisodes(request, timeout=3600):
        if response.result.error:
            raise RuntimeError(f"re-run of {response.result.test_case_id} failed: {response.result.error}")
        episodes.append(response.result)
    verdicts = clients.oracle.Evaluate(oracle_pb2.EvaluateRequest(oracle=oracle, episodes=episodes), timeout=600)
    failed = {(v.test_case_id, v.repetition) for v in verdicts.verdicts if v.verdict == oracle_pb2.VERDICT_KIND_FAIL}
    out: dict[str, list[np.ndarray]] = {cid: [] for cid, _ in cases}
    for episode in sorted(episodes, key=lambda e: (e.test_case_id, e.repetition)):
        if (episode.test_case_id, episode.repetition) in failed:
            out[episode.test_case_id].append(from_tensor(episode.signals[signal]))
    return out
