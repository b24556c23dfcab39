"""python -m analysis_service: metrics and reports over stored campaigns."""

from __future__ import annotations

import argparse
from pathlib import Path

from common.server import add_outgoing_arguments, add_service_arguments, options_from_args, outgoing_credentials, serve


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m analysis_service",
        description="Computes campaign metrics (failures, distinct failing inputs, tests/seconds to first failure, "
        "failure rate with a 95%% Wilson interval) and writes JSON + HTML reports "
        "(gauntlet.v1.AnalysisService).",
    )
    parser.add_argument("--generator-endpoint", required=True, help="host:port of the generator service")
    parser.add_argument(
        "--report-root",
        type=Path,
        default=Path("runs/reports"),
        help="where reports are written when a request names no folder (default runs/reports)",
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
        lambda server: register(server, args.generator_endpoint, args.report_root, credentials=credentials),
    )


if __name__ == "__main__":
    main()
