"""Campaign helpers that benches and replications share: run a campaign through the generator service to its end
and list its executions.

Every function talks to a running suite (cli.launcher.LocalSuite) over gRPC, as a user's client would.
Add functions here; do not change the signature of one another bench or replication uses.
"""

from __future__ import annotations

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from generator_service.api import CampaignConfig


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
