"""The `gauntlet` command: run campaigns, start the suite, list what a suite serves, render reports, train agents.

The arguments of each command are in cli/arguments.py (one function per command); this module builds the parser
from them and runs the command's handler, turning a UserError into one `error:` line and its exit code."""

from __future__ import annotations

import argparse
import importlib
import sys

from cli.arguments import COMMANDS
from cli.errors import UserError

EPILOG = """examples:
  gauntlet run examples/cartpole_random.yaml      run a campaign on a local suite, then write its report
  gauntlet up                                     start every service on loopback and print the endpoints
  gauntlet environments                           subjects, with their parameter spaces (a local simulator)
  gauntlet strategies --generator HOST:PORT       what a running suite's generator offers
  gauntlet models | gauntlet oracles
  gauntlet report <campaign-id>                   (re)render the report of a stored campaign
  gauntlet report --compare --match 'exp1-*'      statistics over repeated campaigns, by strategy
  gauntlet resume <campaign-id>                   continue an interrupted campaign
  gauntlet train cartpole-ppo                     retrain a zoo agent from its recipe
  gauntlet train my-ppo --recipe my.yaml --model-root my-models   train an agent for a subject of your own
  gauntlet surrogate train --model cartpole-ppo   train Indago's failure predictor on an agent's training log
"""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="gauntlet",
        description="Search for the inputs that make trained agents fail.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = root.add_subparsers(dest="command", required=True, metavar="command")
    for add in COMMANDS:
        add(sub)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    module, _, function = args.handler.partition(":")
    try:
        getattr(importlib.import_module(module), function)(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None  # 2, or how a campaign ended (cli/follow.py EXIT_CODES)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
