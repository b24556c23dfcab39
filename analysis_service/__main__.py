"""python -m analysis_service: metrics and reports over stored campaigns."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis_service.designate_archive_report import ARCHIVE_IMAGES
from common.endpoints import endpoint_type
from common.server import add_outgoing_arguments, add_service_arguments, options_from_args, outgoing_credentials, serve


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m analysis_service",
        description="Computes campaign metrics (failures, distinct failing inputs, tests/seconds to first failure, "
        "failure rate with a 95%% Wilson interval) and writes JSON + HTML reports "
        "(gauntlet.v1.AnalysisService).",
    )
    parser.add_argument(
        "--generator-endpoint",
        type=endpoint_type("--generator-endpoint"),
        required=True,
        help="host:port of the generator service",
    )
    parser.add_argument(
        "--report-root",
        type=Path,
        default=Path("runs/reports"),
        help="where reports are written when a request names no folder (default runs/reports)",
    )
    parser.add_argument(
        "--archive-images",
        type=_non_negative,
        default=ARCHIVE_IMAGES,
        help="archive members the generator re-renders per campaign for a report's image grid (and for the "
        f"diversity the store does not keep); 0 = no re-rendering, no grid (default {ARCHIVE_IMAGES}: one "
        "simulator call renders up to 64)",
    )
    add_service_arguments(parser, port=50055, metrics_port=9105)
    add_outgoing_arguments(parser)
    args = parser.parse_args()
    options = options_from_args(args)
    credentials = outgoing_credentials(args)
    from analysis_service.server import register

    serve(
        "analysis",
        options,
        lambda server: register(
            server,
            args.generator_endpoint,
            args.report_root,
            credentials=credentials,
            archive_images=args.archive_images,
        ),
    )


if __name__ == "__main__":
    main()
