"""The `gauntlet` command line, one function per command: each adds its subcommand's arguments and names the
function that runs it (`handler`: "module:function", imported only when that command runs, so `gauntlet --help`
and a listing stay quick)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.follow import EXIT_CODES_HELP
from common.credentials import add_client_arguments, add_token_arguments
from common.endpoints import endpoint_type

Subparsers = Any  # argparse._SubParsersAction[argparse.ArgumentParser], private in typeshed


def campaign_id(text: str) -> str:
    """A campaign id argument, checked by the services' own rule (common/validation.py) before anything starts."""
    from common.errors import InvalidArgument
    from common.validation import check_id

    try:
        return check_id("campaign id", text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _handler(p: argparse.ArgumentParser, handler: str) -> None:
    p.set_defaults(handler=handler)


def _suite_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store-url", help="campaign store (default sqlite:///runs/store/gauntlet.db)")
    p.add_argument(
        "--model-root",
        type=Path,
        help="models folder for the local agent service (manifest.yaml + <name>/model.zip; default: the bundled zoo)",
    )
    p.add_argument(
        "--generator",
        type=endpoint_type("--generator"),
        help="host:port of a running generator service (skip the local suite)",
    )
    p.add_argument(
        "--analysis",
        type=endpoint_type("--analysis"),
        help="host:port of a running analysis service (with --generator)",
    )
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


def add_run(sub: Subparsers) -> None:
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
    p.add_argument(
        "--filmstrips",
        type=int,
        default=0,
        metavar="N",
        help="show the first N distinct failures of each campaign as filmstrips in the report, each replayed "
        "through the suite (0..10, default 0)",
    )
    p.add_argument(
        "--shrink",
        type=int,
        metavar="N",
        help="shrink the first N distinct failures at the campaign's end (1..100; sets the file's shrink.first; "
        "see gauntlet shrink)",
    )
    _suite_arguments(p)
    _handler(p, "cli.commands:cmd_run")


def add_resume(sub: Subparsers) -> None:
    p = sub.add_parser(
        "resume",
        help="continue an interrupted or cancelled campaign",
        description="Continues a stored campaign where it stopped. " + EXIT_CODES_HELP + ".",
    )
    p.add_argument("campaign_id", type=campaign_id)
    _suite_arguments(p)
    _handler(p, "cli.commands:cmd_resume")


def add_report(sub: Subparsers) -> None:
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
        "--filmstrips",
        type=int,
        default=0,
        metavar="N",
        help="show the first N distinct failures of each campaign as filmstrips in the report, each replayed "
        "through the suite (0..10, default 0)",
    )
    p.add_argument(
        "--baseline", help="with --compare: the strategy the others are tested against (default random, else the first)"
    )
    p.add_argument(
        "--alternative",
        choices=["two-sided", "greater", "less"],
        default="two-sided",
        help="with --compare: Mann-Whitney U alternative (greater = the other strategy's values are larger)",
    )
    _suite_arguments(p)
    _handler(p, "cli.commands:cmd_report")


def test_case_id(text: str) -> str:
    """A stored test case id (t0000079), checked by the services' id rule."""
    from common.errors import InvalidArgument
    from common.validation import check_id

    try:
        return check_id("test case id", text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_replay(sub: Subparsers) -> None:
    p = sub.add_parser(
        "replay",
        help="run one stored execution again, check its verdict, optionally write its animation",
        description="Runs a stored test case of a campaign again with the campaign's subject, model, oracle and "
        "episode seeds (derived from the campaign seed and the test case id), and compares the verdict with the "
        "stored one: exit 0 when it is the same, 1 when it differs, 2 for an error. Every failure line of "
        "`gauntlet run` and every failure of a report names this command.",
    )
    p.add_argument("campaign_id", type=campaign_id)
    p.add_argument("test_case_id", type=test_case_id, help="the stored id, e.g. t0000079")
    p.add_argument(
        "--render",
        type=Path,
        metavar="FILE",
        help="also write the episode as an animation or a video: FILE.gif, FILE.webp or FILE.mp4 (frames from the "
        "simulator's RenderEpisode; the first failing repetition's episode)",
    )
    p.add_argument("--max-frames", type=int, help="at most this many frames, 1..1000 (default 300)")
    _suite_arguments(p)
    _handler(p, "cli.failure_commands:cmd_replay")


def add_export(sub: Subparsers) -> None:
    p = sub.add_parser(
        "export",
        help="write a regression campaign that reruns a campaign's failures with their seeds",
        description="Writes a campaign file (strategy `replay`) that runs the stored inputs of CAMPAIGN again, each "
        "with the episode seeds it had there. `gauntlet run FILE` then exits 0 when every input passes and 1 "
        "naming those that still fail: a gate for a retrained model (--model).",
    )
    p.add_argument("campaign_id", type=campaign_id)
    p.add_argument("--failures", action="store_true", help="only the failing executions (default: every judged one)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE.yaml", help="the campaign file to write")
    p.add_argument("--model", help="the model the regression campaign tests (default: the campaign's)")
    _suite_arguments(p)
    _handler(p, "cli.failure_commands:cmd_export")


def add_failures(sub: Subparsers) -> None:
    p = sub.add_parser(
        "failures",
        help="list a campaign's distinct failures, each new or seen before in an earlier campaign",
        description="Lists the distinct failures of CAMPAIGN, each marked 'seen before' when a failure of an earlier "
        "campaign on the same subject falls in its cluster (the failing inputs of all of them clustered together by "
        "the analysis service's ClusterFailures), else 'new'.",
    )
    p.add_argument("campaign_id", type=campaign_id)
    p.add_argument(
        "--against",
        nargs="+",
        type=campaign_id,
        default=[],
        metavar="CAMPAIGN",
        help="the earlier campaigns (default: every stored campaign on the same subject created before it)",
    )
    _suite_arguments(p)
    _handler(p, "cli.failure_commands:cmd_failures")


def add_shrink(sub: Subparsers) -> None:
    p = sub.add_parser(
        "shrink",
        help="reduce failures to minimal failing inputs (near the space's centre, few parameters moved)",
        description="For each failure (the given ids, else the first --first distinct ones), searches for a "
        "failing input as close to the nominal point of the space (the centre of every numeric range) with as few "
        "parameters moved as it can, every candidate run under the failure's own episode seed, and prints it beside "
        "the original with the executions it took.",
    )
    p.add_argument("campaign_id", type=campaign_id)
    p.add_argument("test_case_ids", nargs="*", type=test_case_id, help="failing ids, e.g. t0000079")
    p.add_argument("--first", type=int, default=5, help="without ids: the first N distinct failures (default 5)")
    p.add_argument("--max-executions", type=int, default=60, help="executions per failure, 1..1000 (default 60)")
    _suite_arguments(p)
    _handler(p, "cli.failure_commands:cmd_shrink")


def add_rerun(sub: Subparsers) -> None:
    p = sub.add_parser(
        "rerun",
        help="run failures again with fresh seeds: failure probability, interval, flaky or not",
        description="Runs each failure (the given ids, else the first --first distinct ones) again --runs times, "
        "each episode with a fresh seed, and prints how often it fails with its Wilson 95 %% interval; a failure "
        "that fails in some reruns but not all is flaky (a stochastic subject or model).",
    )
    p.add_argument("campaign_id", type=campaign_id)
    p.add_argument("test_case_ids", nargs="*", type=test_case_id, help="ids, e.g. t0000079")
    p.add_argument("--runs", type=int, default=20, help="fresh episodes per failure, 2..100 (default 20)")
    p.add_argument("--first", type=int, default=5, help="without ids: the first N distinct failures (default 5)")
    _suite_arguments(p)
    _handler(p, "cli.failure_commands:cmd_rerun")


def add_up(sub: Subparsers) -> None:
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
    _handler(p, "cli.commands:cmd_up")


def add_certs(sub: Subparsers) -> None:
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
    _handler(p, "cli.commands:cmd_certs")


def add_train(sub: Subparsers) -> None:
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
    _handler(p, "cli.commands:cmd_train")


def add_evaluate(sub: Subparsers) -> None:
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
    p.add_argument(
        "--model-root",
        type=Path,
        help="models folder (default: the bundled zoo); when given, a random-input measurement is written into "
        "its manifest entry (eval_tests, eval_failures, eval_errors, eval_seed, success_rate, eval_failure_rate, "
        "eval_failure_rate_ci95) unless that entry holds one on more inputs",
    )
    _handler(p, "cli.commands:cmd_evaluate")


def add_surrogate(sub: Subparsers) -> None:
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
    t.add_argument(
        "--features",
        choices=["config", "scene"],
        default="config",
        help="what the network reads: the encoded configuration (default, the paper's) or that plus the scene it "
        "implies (goal relative to the agent, the goal's neighbours; Parking only; a documented deviation)",
    )
    t.add_argument("--out", type=Path, help="artifact folder (default runs/surrogates/<model>-<kind>-<timestamp>)")
    t.add_argument("--model-root", type=Path, help="models folder of --model (default: the bundled zoo)")
    s = actions.add_parser("show", help="print what a surrogate artifact is and how well it predicts")
    s.add_argument("dir", type=Path, help="artifact folder (with surrogate.json)")
    s.add_argument("--json", action="store_true", help="print surrogate.json as is")
    _handler(p, "cli.surrogate_commands:run_surrogate")


def _listing(sub: Subparsers, name: str, role: str, flag: str, what: str) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=f"list what a suite's {role} service serves: {what}",
        description=f"Lists the {what} that the {role} service at {flag} serves; without {flag}, that one service "
        "is started on loopback for the listing and stopped afterwards. Names are printed whole.",
    )
    p.add_argument(
        flag, type=endpoint_type(flag), help=f"host:port of a running {role} service (`gauntlet up` prints it)"
    )
    p.add_argument("--json", action="store_true", help="print the service's answer as JSON, for scripts")
    add_client_arguments(p, f"credentials for {flag} (TLS, mTLS, token)")
    add_token_arguments(p, f"{flag} requires")
    _handler(p, f"cli.listings:cmd_{name}")
    return p


def add_environments(sub: Subparsers) -> None:
    p = _listing(sub, "environments", "simulator", "--simulator", "subjects (environment, parameter space, oracle)")
    p.add_argument(
        "name",
        nargs="?",
        help="one subject to show in full: parameters with units and meaning, validity rules, oracle (margin, "
        "descriptors, signals it reads), recorded signals",
    )
    p.add_argument(
        "--oracle",
        type=endpoint_type("--oracle"),
        help="host:port of a running oracle service, for NAME's oracle descriptors (default: one started locally)",
    )


def add_models(sub: Subparsers) -> None:
    p = _listing(sub, "models", "agent", "--agent", "models under test")
    p.add_argument("--model-root", type=Path, help="models folder of the local agent service (default: the zoo)")


def add_strategies(sub: Subparsers) -> None:
    _listing(sub, "strategies", "generator", "--generator", "test-generation strategies and their parameters")


def add_dashboard(sub: Subparsers) -> None:
    p = sub.add_parser(
        "dashboard",
        help="a local web page showing campaigns live (executions, failures, replay commands)",
        description="Serves a web page on loopback that lists the campaigns of a store, running and finished, "
        "refreshed every second, with a campaign's cumulative failures and its failing inputs with their "
        "`gauntlet replay` commands. It reads them through the generator at --generator, or through a generator "
        "started locally over --store-url that takes over no campaign.",
    )
    p.add_argument("--store-url", help="campaign store (default sqlite:///runs/store/gauntlet.db)")
    p.add_argument("--generator", type=endpoint_type("--generator"), help="host:port of a running generator service")
    p.add_argument("--host", default="127.0.0.1", help="address to serve the page on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port to serve the page on (default 8765; 0: any free)")
    add_client_arguments(p, "credentials for --generator (TLS, mTLS, token)")
    add_token_arguments(p, "--generator requires")
    _handler(p, "cli.dashboard:cmd_dashboard")


def add_oracles(sub: Subparsers) -> None:
    _listing(sub, "oracles", "oracle", "--oracle", "oracles and the signals they need")


def add_designate(sub: Subparsers) -> None:
    from cli.designate_commands import add_parser

    add_parser(sub)


# In `gauntlet --help` order.
COMMANDS = (
    add_run,
    add_resume,
    add_report,
    add_replay,
    add_export,
    add_failures,
    add_shrink,
    add_rerun,
    add_dashboard,
    add_up,
    add_certs,
    add_environments,
    add_models,
    add_strategies,
    add_oracles,
    add_train,
    add_evaluate,
    add_surrogate,
    add_designate,
)
