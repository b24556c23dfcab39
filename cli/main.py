"""The `gauntlet` command: run campaigns, start the suite, list what is installed, render reports, train agents."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.follow import EXIT_CODES_HELP
from common.credentials import add_client_arguments, add_token_arguments

EPILOG = """examples:
  gauntlet run examples/cartpole_random.yaml      run a campaign on a local suite, then write its report
  gauntlet up                                     start every service on loopback and print the endpoints
  gauntlet environments                           subjects, with their parameter spaces
  gauntlet models | gauntlet strategies | gauntlet oracles
  gauntlet report <campaign-id>                   (re)render the report of a stored campaign
  gauntlet report --compare --match 'exp1-*'      statistics over repeated campaigns, by strategy
  gauntlet resume <campaign-id>                   continue an interrupted campaign
  gauntlet train cartpole-ppo                     retrain a zoo agent from its recipe
  gauntlet train my-ppo --recipe my.yaml --model-root my-models   train an agent for a subject of your own
  gauntlet surrogate train --model cartpole-ppo   train Indago's failure predictor on an agent's training log
"""


def campaign_id(text: str) -> str:
    """A campaign id argument, checked by the services' own rule (common/validation.py) before anything starts."""
    from common.errors import InvalidArgument
    from common.validation import check_id

    try:
        return check_id("campaign id", text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="gauntlet",
        description="Search for the inputs that make trained agents fail.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def suite_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store-url", help="campaign store (default sqlite:///runs/store/gauntlet.db)")
        p.add_argument(
            "--model-root",
            type=Path,
            help="models folder for the local agent service "
            "(manifest.yaml + <name>/model.zip; default: the bundled zoo)",
        )
        p.add_argument("--generator", help="host:port of a running generator service (skip the local suite)")
        p.add_argument("--analysis", help="host:port of a running analysis service (with --generator)")
        p.add_argument(
            "--report-dir",
            type=Path,
            help="folder for the report (default runs/reports); with --analysis: a folder relative to that "
            "service's --report-root on its host (default the root itself)",
        )
        p.add_argument(
            "--secure",
            action="store_true",
            help="local suite with mTLS and a bearer token on every link (throwaway CA under runs/secure)",
        )
        add_client_arguments(p, "credentials for --generator/--analysis (TLS, mTLS, token)")
        add_token_arguments(p, "--generator/--analysis require")

    p = sub.add_parser(
        "run",
        help="run a campaign file and write its report",
        description="Runs the campaign in CAMPAIGN (YAML). Without endpoints every service starts as a "
        "local process on loopback (a crashed one is restarted on its port) and stops afterwards. "
        + EXIT_CODES_HELP
        + ".",
    )
    p.add_argument("campaign", type=Path, help="campaign YAML (see examples/)")
    p.add_argument("--id", type=campaign_id, help="campaign id (idempotency key; default: generated)")
    suite_args(p)
    p = sub.add_parser(
        "resume",
        help="continue an interrupted or cancelled campaign",
        description="Continues a stored campaign where it stopped. " + EXIT_CODES_HELP + ".",
    )
    p.add_argument("campaign_id", type=campaign_id)
    suite_args(p)
    p = sub.add_parser(
        "report",
        help="render the JSON + HTML report of stored campaigns (or compare them)",
        description="Renders the report of the given campaigns. With --compare, groups them by strategy "
        "and writes statistics over the repeated campaigns instead (medians and quartiles, "
        "Mann-Whitney U and Vargha-Delaney A12 against a baseline, box plots, quartile bands).",
    )
    p.add_argument("campaign_ids", nargs="*", type=campaign_id, help="campaign ids (and/or --match)")
    p.add_argument(
        "--match", metavar="GLOB", help="also every stored campaign whose name matches GLOB, e.g. 'table3-cartpole-*'"
    )
    p.add_argument("--compare", action="store_true", help="statistics over repeated campaigns, grouped by strategy")
    p.add_argument(
        "--baseline", help="with --compare: the strategy the others are tested against (default random, else the first)"
    )
    p.add_argument(
        "--alternative",
        choices=["two-sided", "greater", "less"],
        default="two-sided",
        help="with --compare: Mann-Whitney U alternative (greater = the other strategy's values are larger)",
    )
    suite_args(p)
    p = sub.add_parser(
        "up",
        help="start the whole suite on loopback and print its endpoints (Ctrl-C stops it)",
        description="Starts every service on loopback and keeps them running: a service that dies is restarted on "
        "its port after a backoff (0.5 s, doubling up to 10 s); after 5 crashes in a row, each within 30 s of its "
        "start, the suite stops and the command exits 2. The generator resumes, on start, the campaigns a previous "
        "generator left running. Ctrl-C stops the suite (exit 130).",
    )
    p.add_argument("--store-url", help="campaign store (default sqlite:///runs/store/gauntlet.db)")
    p.add_argument(
        "--secure",
        action="store_true",
        help="mTLS and a bearer token on every link: a throwaway CA, certificates and token under runs/secure "
        "(removed when the suite stops); prints how a client connects",
    )
    p.add_argument("--model-root", type=Path, help="models folder for the agent service (default: the bundled zoo)")
    p.add_argument(
        "--simulators",
        type=int,
        choices=range(1, 17),
        default=1,
        metavar="N",
        help="simulator processes to start (1..16, default 1); the generator spreads each campaign's batches "
        "over all of them",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object instead: {service: {endpoint, metrics, log, pid}}, for scripts "
        "(with --secure also credentials: {variable: path})",
    )
    p = sub.add_parser(
        "certs",
        help="write a new CA, server and client certificates and a token (for a TLS deployment)",
        description="Writes ca.crt, server.crt/server.key (valid for localhost, 127.0.0.1 and every --host), "
        "client.crt/client.key and token into DIR, each readable by you only. The CA's key is not kept: "
        "to add a host, make a new set. deploy/k8s reads them from Secrets (docs/operations/security.md).",
    )
    p.add_argument("dir", type=Path, help="new or empty folder for the files")
    p.add_argument(
        "--host",
        action="append",
        default=[],
        help="DNS name or IP address the server certificate must also be valid for (repeatable)",
    )
    sub.add_parser("environments", help="list the subjects (environment + parameter space + oracle)")
    p = sub.add_parser("models", help="list the models of a model root (default: the bundled zoo)")
    p.add_argument("--model-root", type=Path, help="models folder (default: the bundled zoo)")
    sub.add_parser("strategies", help="list the test-generation strategies and their parameters")
    sub.add_parser("oracles", help="list the oracles and the signals they need")
    p = sub.add_parser(
        "train",
        help="train an agent from its recipe (the zoo's, or your own --recipe file)",
        description="Trains the recipe NAME. With --model-root the model goes to MODEL_ROOT/NAME and is listed in "
        "MODEL_ROOT/manifest.yaml, so `gauntlet run/evaluate/models --model-root MODEL_ROOT` use it. Subjects of "
        "your own are YAML files in a folder on $GAUNTLET_SUBJECT_PATH.",
    )
    p.add_argument("name", help="recipe name, e.g. cartpole-ppo")
    p.add_argument("--recipe", type=Path, help="recipe file (default: the bundled offline/recipes.yaml)")
    p.add_argument("--timesteps", type=int, help="override the recipe's budget (e.g. for a smoke test)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the output folder's checkpoint (resume/: model, replay buffer, step count, RNG) "
        "to the budget, adding this sitting's wall and CPU seconds to the run's",
    )
    p.add_argument(
        "--stop-at",
        type=int,
        metavar="STEPS",
        help="end this sitting with a checkpoint at the first episode end at or after STEPS total steps (Ctrl-C "
        "or SIGTERM: at the next one); the model is listed only once the budget is reached",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        metavar="STEPS",
        help="steps between resumable checkpoints (default: a tenth of the budget, at most 10,000)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help="output folder (default runs/zoo/<name>)")
    where.add_argument("--model-root", type=Path, help="models folder to write the model into and list it in")
    p = sub.add_parser(
        "evaluate",
        help="measure a zoo model's failure rate on uniform random test inputs",
        description="Runs N uniform random (valid) test inputs of the model's subject in process and "
        "judges them with the subject's oracle: the measurement behind the manifest's "
        "eval_* fields. PRT's 'well trained' rule asks for 1 to 499 failures in 100,000.",
    )
    p.add_argument("model", help="zoo model name, e.g. cartpole-ppo (see `gauntlet models`)")
    p.add_argument("--tests", type=int, default=1000, help="number of random test inputs (default 1000)")
    p.add_argument("--seed", type=int, default=100000, help="seed of the input draws (default 100000, the manifest's)")
    p.add_argument("--parallelism", type=int, default=64, help="environments stepped in lock-step (default 64)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes sharing the chunks (default 1); any number gives the same inputs and counts",
    )
    p.add_argument("--chunk", type=int, default=1000, help="tests per chunk of work (default 1000)")
    p.add_argument(
        "--inputs",
        type=Path,
        help="measure these named inputs instead of --tests random ones: a JSON-lines file, one "
        '{"id": ..., "values": {...}} a line; each runs with the episode seed a campaign with --seed gives '
        "that test-case id, so a campaign's inputs replay its episodes",
    )
    p.add_argument(
        "--journal",
        type=Path,
        help="append each finished chunk (with its failing inputs) to this JSONL file and skip chunks "
        "already there: a killed 100,000-test measurement resumes with the same command",
    )
    p.add_argument("--model-root", type=Path, help="models folder (default: the bundled zoo)")
    p = sub.add_parser(
        "surrogate",
        help="train or inspect a surrogate failure predictor (Indago)",
        description="Indago's surrogates: networks trained on a zoo agent's training episodes that "
        "predict which test inputs make it fail (strategies indago, indago_sampling).",
    )
    actions = p.add_subparsers(dest="surrogate_command", required=True, metavar="action")
    t = actions.add_parser("train", help="tune and train a surrogate on a zoo model's interaction log")
    t.add_argument("--model", required=True, help="zoo model whose training log is used, e.g. cartpole-ppo")
    t.add_argument(
        "--kind",
        choices=["classifier", "regressor"],
        default="classifier",
        help="classifier on pass/fail (default), or regressor on margins for logs with few failures",
    )
    t.add_argument(
        "--grid",
        choices=["tiny", "small", "paper"],
        default="small",
        help="tuning grid: tiny (2 runs), small (18, default) or paper (9 filters x 4 depths x 10 seeds)",
    )
    t.add_argument("--out", type=Path, help="artifact folder (default runs/surrogates/<model>-<kind>-<timestamp>)")
    t.add_argument("--model-root", type=Path, help="models folder of --model (default: the bundled zoo)")
    s = actions.add_parser("show", help="print what a surrogate artifact is and how well it predicts")
    s.add_argument("dir", type=Path, help="artifact folder (with surrogate.json)")
    s.add_argument("--json", action="store_true", help="print surrogate.json as is")

    from cli.designate_commands import add_parser as add_designate_parser

    add_designate_parser(sub)

    args = parser.parse_args(argv)
    from cli import commands

    try:
        getattr(commands, f"cmd_{args.command}")(args)
    except commands.UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None  # 2, or how a campaign ended (cli/follow.py EXIT_CODES)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
