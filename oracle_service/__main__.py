"""python -m oracle_service: judge recorded episodes."""

from __future__ import annotations

import argparse

from common.server import add_service_arguments, options_from_args, serve


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m oracle_service",
        description="Turns recorded episodes into pass/fail verdicts, margins and behaviour descriptors "
        "(gauntlet.v1.OracleService).",
    )
    add_service_arguments(parser, port=50053, metrics_port=9103)
    options = options_from_args(parser.parse_args())
    from oracle_service.oracles import oracles
    from oracle_service.server import register

    oracles()  # import every oracle plug-in now: the first campaign after a start should not pay for it
    serve("oracle", options, register)


if __name__ == "__main__":
    main()
