"""`gauntlet designate calibrate|archive|retrain`: DESIGNATE's thresholds from a stored random campaign
(cli/designate_calibration.py), a stored DESIGNATE campaign's archive (the generator's ListArchive RPC)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import grpc

from cli.errors import UserError
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc


def run_designate(args: argparse.Namespace) -> None:
    from common.credentials import client_credentials
    from common.remote import describe
    from common.server import client_channel

    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(args.generator, client_credentials(args)))
    if args.designate_command == "archive":
        _print_archive(gen, args)
        return
    from cli.designate_calibration import calibrate_rows
    from generator_service.config import CampaignConfig

    try:
        status = gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=args.campaign_id), timeout=30).status
        rows = [
            r.execution
            for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=args.campaign_id), timeout=600)
        ]
    except grpc.RpcError as exc:
        raise UserError(f"generator {args.generator}: {describe(exc)}") from None
    config = CampaignConfig.from_proto(status.spec)
    oracle = config.oracle or {"urban": "iou_car", "mars": "miou"}.get(config.subject, "")
    try:
        found = calibrate_rows(rows, args.percentile, oracle, args.diversity_percentile)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    found.update({"subject": config.subject, "campaign": args.campaign_id, "oracle": oracle})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(json.dumps(found))
    print(
        f"thresholds written to {args.out}: name it in a designate campaign as strategy_params.thresholds "
        "(a path relative to the generator's --artifact-root)"
    )


def _print_archive(gen: generator_pb2_grpc.GeneratorServiceStub, args: argparse.Namespace) -> None:
    """The summary, then one JSON line per member, as the generator's ListArchive gives them."""
    from google.protobuf import json_format

    from common.remote import describe
    from common.space import case_values

    request = generator_pb2.ListArchiveRequest(campaign_id=args.campaign_id)
    try:
        for reply in gen.ListArchive(request, timeout=600):
            if reply.WhichOneof("item") == "summary":
                print(json.dumps(json_format.MessageToDict(reply.summary, preserving_proto_field_name=True)))
                continue
            execution = reply.member.execution
            entry = {
                "test_case": execution.test_case.id,
                "index": execution.index,
                "values": case_values(execution.test_case),
                "f_accuracy": reply.member.f_accuracy,
            }
            print(json.dumps(entry))
    except grpc.RpcError as exc:
        raise UserError(f"generator {args.generator}: {describe(exc)}") from None


def add_parser(sub: Any) -> None:  # argparse._SubParsersAction, private in typeshed
    from common.credentials import add_client_arguments
    from common.endpoints import endpoint_type

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
    a = actions.add_parser("archive", help="a designate campaign's archive (the generator's ListArchive)")
    a.add_argument("campaign_id")
    p.set_defaults(handler="cli.designate_commands:run_designate")
    for q in (c, a):
        q.add_argument(
            "--generator",
            type=endpoint_type("--generator"),
            required=True,
            help="host:port of the generator service holding the campaign",
        )
        add_client_arguments(q, "credentials for the services")
