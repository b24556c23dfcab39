"""Helpers the replication benches share: run a campaign through the generator service to its end, list its
executions, and re-run executed test cases on the simulator service to read signals the store does not keep.

Every function talks to a running suite (cli.launcher.LocalSuite) over gRPC, as a user's client would.
Add functions here; do not change the signature of one another bench uses.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from common.generated.gauntlet.v1 import common_pb2, generator_pb2, generator_pb2_grpc, simulator_pb2, simulator_pb2_grpc
from common.space import ParameterSpace
from common.tensor import from_tensor
from generator_service.config import CampaignConfig


def run_campaign(gen: generator_pb2_grpc.GeneratorServiceStub, config: CampaignConfig) -> generator_pb2.CampaignStatus:
    """Starts the campaign and blocks until it ends; returns its final status (raises on an error stop)."""
    cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
    status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
    if status.stop_reason == "error":
        raise RuntimeError(f"campaign {config.name} ({cid}) stopped on an error: {status.error}")
    return status


def campaign_executions(gen: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str) -> list[generator_pb2.Execution]:
    """The campaign's executions in asking order (index), invalid ones included."""
    rows = [r.execution for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=campaign_id),
                                                    timeout=600)]
    return sorted(rows, key=lambda e: e.index)


def rerun_signals(sim: simulator_pb2_grpc.SimulatorServiceStub, subject: str, model: str, seed: int,
                  space: ParameterSpace, cases: Sequence[tuple[str, dict[str, Any]]], signals: Iterable[str],
                  request_prefix: str, chunk: int = 512, parallelism: int = 64) -> dict[str, dict[str, np.ndarray]]:
    """Runs the cases again (same campaign seed and test-case ids, hence the same episode reset seeds) and returns
    the asked signals per test-case id. Episodes are deterministic given (subject, model, seed, id, values), so
    this reads what the campaign's own episodes recorded, e.g. the final observation the store does not keep."""
    wanted = list(signals)
    out: dict[str, dict[str, np.ndarray]] = {}
    for start in range(0, len(cases), chunk):
        part = cases[start:start + chunk]
        request = simulator_pb2.RunEpisodesRequest(
            request_id=f"{request_prefix}/{start}", subject=subject, seed=seed, repetitions=1,
            trace=common_pb2.TraceSpec(signals=wanted), parallelism=parallelism,
            test_cases=[space.test_case_to_proto(cid, values) for cid, values in part])
        request.model.name = model
        for response in sim.RunEpisodes(request, timeout=3600):
            result = response.result
            if result.error:
                raise RuntimeError(f"re-run of {result.test_case_id} failed: {result.error}")
            out[result.test_case_id] = {name: from_tensor(result.signals[name]) for name in wanted}
    return out
