"""Replication helpers beyond bench/common.py: a throwaway local suite, its clients, and re-running failing test cases
with every repetition judged, to read the trajectories the campaign store does not keep.

Everything talks to the real services over gRPC, as `gauntlet run` does.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
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


@dataclass
class Clients:
    """Stubs for the services a bench talks to."""

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
