"""`gauntlet designate calibrate|archive`: DESIGNATE's thresholds from a stored random campaign, and a stored
DESIGNATE campaign's archive (cli/designate_archive.py explains both)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import grpc

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc, simulator_pb2
from common.space import ParameterSpace


def run_designate(args: argparse.Namespace) -> None:
    from cli.commands import UserError
    from cli.designate_archive import calibrate_rows, replay_archive
    from common.credentials import client_credentials
    from common.remote import describe
    from common.server import client_channel
    from generator_service.config import CampaignConfig

    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(args.generator, client_credentials(args)))
    try:
        status = gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=args.campaign_id), timeout=30).status
        rows = [
            r.execution
            for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=args.campaign_id), timeout=600)
        ]
    except grpc.RpcError as exc:
        raise UserError(f"generator {args.generator}: {describe(exc)}") from None
    config = CampaignConfig.from_proto(status.spec)
    try:
        if args.designate_command == "calibrate":
            oracle = config.oracle or {"urban": "iou_car", "mars": "miou"}.get(config.subject, "")
            found = calibrate_rows(rows, args.percentile, oracle, args.diversity_percentile)
            found.update({"subject": config.subject, "campaign": args.campaign_id, "oracle": oracle})
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(found, indent=1) + "\n")
            print(json.dumps(found))
            print(
                f"thresholds written to {args.out}: name it in a designate campaign as strategy_params.thresholds "
                "(a path relative to the generator's --artifact-root)"
            )
            return
        space = _space(args, config.subject)
        _, archive = replay_archive(config, space, rows, args.artifact_root)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for entry in archive:
        print(
            json.dumps(
                {"test_case": entry.execution.test_case.id, "values": entry.values, "f_accuracy": entry.f_accuracy}
            )
        )


def _space(args: argparse.Namespace, subject: str) -> ParameterSpace:
    from cli.commands import UserError
    from common.credentials import client_credentials
    from common.generated.gauntlet.v1 import simulator_pb2_grpc
    from common.remote import describe
    from common.server import client_channel

    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(args.simulator, client_credentials(args)))
    try:
        info = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=60)
    except grpc.RpcError as exc:
        raise UserError(f"simulator {args.simulator}: {describe(exc)}") from None
    return ParameterSpace.from_proto(info.parameter_space)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from common.credentials import add_client_arguments

    p = sub.add_parser("designate", help="DESIGNATE: calibrate thresholds, list a campaign's archive")
    actions = p.add_subparsers(dest="designate_command", required=True, metavar="action")
    c = actions.add_parser("calibrate", help="T_relevance and T_diversity from a stored random campaign")
    c.add_argument("campaign_id", help="a random campaign on an image subject (iou_car/miou, or *_pix for pixels)")
    c.add_argument("--percentile", type=float, default=97.0, help="percentile of delta_IoU for T_relevance")
    c.add_argument(
        "--diversity-percentile",
        type=float,
        default=50.0,
        help="percentile of the pairwise distances for T_diversity (50 = the median, the paper's rule; lower "
        "admits closer images: a larger archive)",
    )
    c.add_argument("--out", type=Path, default=Path("runs/artifacts/designate_thresholds.json"))
    a = actions.add_parser("archive", help="a designate campaign's archive (replayed from its stored results)")
    a.add_argument("campaign_id")
    a.add_argument("--simulator", required=True, help="host:port of the simulator service (for the space)")
    a.add_argument("--artifact-root", type=Path, help="the generator's --artifact-root (for a thresholds file)")
    for q in (c, a):
        q.add_argument("--generator", required=True, help="host:port of the generator service holding the campaign")
        add_client_arguments(q, "credentials for the services")
