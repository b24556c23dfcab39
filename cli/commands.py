"""Implementations of the gauntlet subcommands that run campaigns, start the suite and work offline (their
arguments are in cli/arguments.py; the listings are in cli/listings.py)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import json
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.certificates import SuiteCredentials, create_suite_credentials, write_credentials
from cli.endpoints import check_endpoint, reach
from cli.errors import CampaignNotCompleted, UserError
from cli.follow import LostCampaign, Pace, campaign_events, outcome, retrying
from cli.launcher import (
    ROLES,
    LaunchError,
    LocalSuite,
    available_environments,
    campaign_roles,
    environments_for,
    report_roles,
)
from cli.regression import REPLAY_STRATEGY, check_regression
from cli.shrinking import print_stored_shrinks
from cli.supervisor import RestartPolicy
from common.credentials import ClientCredentials, CredentialError, client_credentials, store_url
from common.generated.gauntlet.v1 import (
    analysis_pb2,
    analysis_pb2_grpc,
    generator_pb2,
    generator_pb2_grpc,
)
from common.remote import describe
from common.server import client_channel
from generator_service.config import MAX_SHRINK_FIRST, CampaignConfig, explain
from generator_service.store import default_store_url

console = Console()
# Notes beside a command's machine-readable stdout (e.g. evaluate's JSON) go to stderr, so stdout parses whole.
notes = Console(stderr=True)
__all__ = ["CampaignNotCompleted", "UserError", "load_campaign_file"]  # and the cmd_* handlers


# -- campaign files ---------------------------------------------------------------------------------
def load_campaign_file(path: Path) -> tuple[CampaignConfig, dict[str, Any]]:
    if not path.exists():
        examples = ", ".join(sorted(str(p) for p in Path("examples").glob("*.yaml")))
        raise UserError(f"campaign file {path} does not exist (examples: {examples})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or "campaign" not in data:
        raise UserError(f"{path}: expected a mapping with a 'campaign' section (and optional 'endpoints', 'store_url')")
    unknown = set(data) - {"campaign", "endpoints", "store_url"}
    if unknown:
        raise UserError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; allowed: campaign, endpoints, store_url"
        )
    try:
        config = CampaignConfig.model_validate(data["campaign"])
    except ValidationError as exc:
        raise UserError(f"{path}: {explain(exc, prefix='campaign.')}") from None
    return config, data


SECURE_ROOT = Path("runs/secure")  # `--secure`: one throwaway folder of certificates and token per suite


@dataclass(frozen=True)
class Connection:
    """The generator and analysis services a command talks to, and the credentials it presents to them."""

    generator_endpoint: str
    analysis_endpoint: str
    credentials: ClientCredentials
    local: LocalSuite | None = None  # the suite started for this command, if any

    def generator(self) -> generator_pb2_grpc.GeneratorServiceStub:
        return generator_pb2_grpc.GeneratorServiceStub(client_channel(self.generator_endpoint, self.credentials))

    def analysis(self) -> analysis_pb2_grpc.AnalysisServiceStub:
        return analysis_pb2_grpc.AnalysisServiceStub(client_channel(self.analysis_endpoint, self.credentials))

    def reach(self) -> None:
        """Both services answer within seconds, or UserError naming the one that does not and its endpoint."""
        for service, endpoint in (("generator", self.generator_endpoint), ("analysis", self.analysis_endpoint)):
            with client_channel(endpoint, self.credentials) as channel:
                reach(channel, service, endpoint, plaintext=self.credentials.ca is None)


def resolve_store_url(args: argparse.Namespace, file_url: str | None = None) -> str:
    """--store-url (never with a password), else the campaign file's, else $GAUNTLET_STORE_URL(_FILE), else SQLite."""
    flag = getattr(args, "store_url", None)
    try:
        from_flag = store_url(flag) if flag else None  # refuses a password on the command line
        return from_flag or file_url or store_url(None) or default_store_url()
    except CredentialError as exc:
        raise UserError(str(exc)) from None


def remote_credentials(args: argparse.Namespace) -> ClientCredentials:
    """--ca/--client-cert/--client-key/--token-file, each defaulting to its GAUNTLET_* variable."""
    try:
        return client_credentials(args)
    except CredentialError as exc:
        raise UserError(str(exc)) from None


def secure_credentials(secure: bool) -> SuiteCredentials | None:
    """With --secure, a throwaway CA, certificates and token under runs/secure for this command's local suite;
    removed when the command exits (they would open nothing afterwards: the suite is gone, the CA key never saved)."""
    if not secure:
        return None
    stop_on_sigterm()  # a `kill` (systemd, a script) removes them too: atexit runs only when Python exits itself
    created = create_suite_credentials(SECURE_ROOT)
    atexit.register(shutil.rmtree, created.folder, ignore_errors=True)
    return created


def stop_on_sigterm() -> None:
    """SIGTERM ends the command as Ctrl-C does (finally blocks stop the local suite, atexit removes runs/secure's
    keys and token), with exit status 143; by default Python dies on it at once and runs neither."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second one must not cut the orderly stop short
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def suite(
    args: argparse.Namespace,
    file_store_url: str | None = None,
    subjects: tuple[str, ...] = (),
    roles: frozenset[str] | None = None,
    origin: str = "",
    models: tuple[str, ...] | None = None,
) -> Iterator[Connection]:
    """The given generator and analysis endpoints (each reached within seconds), or a local suite started for this
    command (--secure: mTLS) with the given roles (None: every service); a local suite also starts the simulator
    environments that `subjects` need (e.g. Mario's, in .venv-mario), and its agent preloads `models` (None: all).
    `origin` says where endpoints came from when they did not come from flags (a campaign file's endpoints:
    section)."""
    if getattr(args, "generator", None) or getattr(args, "analysis", None):
        if not args.generator:
            raise UserError(f"--analysis needs --generator too{f' ({origin})' if origin else ''}")
        if not args.analysis:
            raise UserError("--generator needs --analysis too (the report is rendered by the analysis service)")
        if getattr(args, "secure", False):
            raise UserError("--secure starts a local suite; for remote services give --ca, --client-cert, --token-file")
        connection = Connection(
            check_endpoint("generator", args.generator, origin),
            check_endpoint("analysis", args.analysis, origin),
            remote_credentials(args),
        )
        connection.reach()
        yield connection
        return
    url = resolve_store_url(args, file_store_url)
    security = secure_credentials(getattr(args, "secure", False))
    try:
        with starting(roles or frozenset(ROLES)) as announce:
            local = LocalSuite(
                store_url=url,
                model_root=getattr(args, "model_root", None),
                security=security,
                # the local analysis service writes where the user asked: its report root is that folder
                report_root=getattr(args, "report_dir", None) or Path("runs/reports"),
                restart_policy=RestartPolicy(),  # a crashed service comes back on its port; the campaign goes on
                resume_on_start=False,  # this command's campaign only: older interrupted ones wait for `resume`
                environments=environments_for(list(subjects)),
                roles=roles,
                on_ready=announce,
                agent_models=models,
            ).start()
    except LaunchError as exc:
        raise UserError(str(exc)) from None
    args.report_dir = None  # a request's output_dir is relative to the report root, which is the folder already
    try:
        credentials = security.client_credentials() if security else ClientCredentials()
        yield Connection(local.endpoint("generator"), local.endpoint("analysis"), credentials, local)
    finally:
        with console.status("stopping the services..."):
            local.stop()


@contextlib.contextmanager
def starting(roles: frozenset[str], what: str = "the Gauntlet services") -> Iterator[Callable[[str, float], None]]:
    """Progress of a local suite's start: a spinner naming the services not up yet (on a terminal) and one line
    per service as it answers, with its seconds (plain lines, no spinner, where the output is not a terminal)."""
    waiting = [r for r in ROLES if r in roles]
    started = time.monotonic()

    def announce(role: str, seconds: float) -> None:
        if role in waiting:
            waiting.remove(role)
        console.print(f"  {role} ready ({seconds:.1f} s)", highlight=False)
        if waiting:
            spinner.update(f"starting {what} on loopback: waiting for {', '.join(waiting)}...")

    if not console.is_terminal:  # no spinner says what starts: one line before the services' lines
        console.print(f"starting {what} on loopback: {', '.join(waiting)}", highlight=False)
    with console.status(f"starting {what} on loopback: {', '.join(waiting)}...") as spinner:
        yield announce
    console.print(f"  all ready in {time.monotonic() - started:.1f} s", highlight=False)


def _rpc(call: Any, *a: Any, **kw: Any) -> Any:
    try:
        return call(*a, **kw)
    except grpc.RpcError as exc:
        raise UserError(describe(exc)) from None


# -- run / resume / report ------------------------------------------------------------------------------
SHOWN_FAILURES = 10  # failures printed as they are found; the report lists them all


def replay_command(campaign_id: str, test_case_id: str) -> str:
    """The command that runs a stored execution again (`gauntlet replay`; the reports print the same)."""
    return f"gauntlet replay {campaign_id} {test_case_id}"


def _watch(
    generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, total: int
) -> generator_pb2.CampaignStatus:
    status = None
    shown = 0
    pace = Pace(time.monotonic())
    with Progress(  # valid executions of the budget; invalid inputs beside them (they are not executions)
        BarColumn(bar_width=16),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failures]} failures"),
        TextColumn("[yellow]{task.fields[invalid]} invalid"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        console=console,
    ) as bar:
        task = bar.add_task(campaign_id, total=total or None, failures=0, invalid=0, rate="-/s", eta="")
        for event in _followed(generator, campaign_id, lambda line: bar.console.print(f"  [dim]{escape(line)}[/]")):
            status = event.status
            pace_now = pace.fields(status.executions, total, time.monotonic())
            bar.update(
                task,
                completed=status.executions,
                failures=status.failures,
                invalid=status.invalid_inputs,
                rate=pace_now["rate"],
                eta=pace_now["eta"],
            )
            if event.kind == "failure":
                shown += 1
                if shown <= SHOWN_FAILURES:  # "t0000002: pole angle left its limit at step 22", and how to replay it
                    bar.console.print(f"  [red]failure[/red] {escape(event.message)}", highlight=False)
                    test_id = event.message.partition(":")[0]
                    bar.console.print(f"    [dim]{escape(replay_command(campaign_id, test_id))}[/]", highlight=False)
                elif shown == SHOWN_FAILURES + 1:
                    bar.console.print("  [red]...[/red] more failures: see the report")
            elif event.message:
                bar.console.print(f"  [{'red' if event.kind == 'error' else 'dim'}]{event.message}[/]")
    assert status is not None
    return status


def _followed(
    generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, note: Any
) -> Iterator[generator_pb2.WatchCampaignResponse]:
    """The campaign's progress events, reconnecting to a restarted generator (cli/follow.py)."""
    try:
        yield from campaign_events(generator, campaign_id, note)
    except LostCampaign as exc:
        raise UserError(str(exc)) from None


def _finish(status: generator_pb2.CampaignStatus, report: analysis_pb2.RenderReportResponse) -> None:
    """Prints the report's summary; a campaign that did not complete then ends the command with its exit code and
    one line saying how it ended (`error: campaign ... failed: <reason>`, cli/main.py)."""
    code, line = outcome(status)
    _summary(report)
    if code:
        raise CampaignNotCompleted(line, code)


def _report(
    analysis: analysis_pb2_grpc.AnalysisServiceStub, ids: list[str], out: Path | None, filmstrips: int = 0
) -> analysis_pb2.RenderReportResponse:
    """Renders on the analysis host, into `out` relative to its --report-root (None: the root itself); with
    `filmstrips`, the first N distinct failures of each campaign replayed as filmstrips."""
    with console.status("rendering the report..."):
        request = analysis_pb2.RenderReportRequest(
            campaign_ids=ids, output_dir=str(out) if out else "", failure_filmstrips=filmstrips
        )
        return _rpc(retrying, lambda: analysis.RenderReport(request, timeout=300))  # rendering again is harmless


def _report_readable(
    analysis: analysis_pb2_grpc.AnalysisServiceStub, ids: list[str], out: Path | None
) -> analysis_pb2.RenderReportResponse:
    """_report() for a bulk selection (--match): a campaign the store answers DATA_LOSS for (a row it cannot read)
    is left out and listed with the rows it names, and the others are rendered."""
    left = list(ids)
    while True:
        try:
            with console.status("rendering the report..."):
                request = analysis_pb2.RenderReportRequest(campaign_ids=left, output_dir=str(out) if out else "")
                return retrying(functools.partial(analysis.RenderReport, request, timeout=300))
        except grpc.RpcError as exc:
            details = (exc.details() if callable(getattr(exc, "details", None)) else "") or ""
            unreadable = exc.code() == grpc.StatusCode.DATA_LOSS
            bad = [cid for cid in left if unreadable and f"campaign {cid!r}" in details]
            if not bad:
                raise UserError(describe(exc)) from None
            console.print(f"[yellow]left out of the report[/yellow]: {escape(details)}")
            left = [cid for cid in left if cid not in bad]
            if not left:
                raise UserError("no selected campaign can be read; their unreadable rows are listed above") from None


def _summary(report: analysis_pb2.RenderReportResponse) -> None:
    """One column per campaign, one row per metric (reads well in an 80-column terminal)."""
    data = json.loads(report.json)
    table = Table(title="Campaign summary")
    table.add_column("")
    for c in data["campaigns"]:
        table.add_column(c["info"]["campaign_id"])
    rows: dict[str, list[str]] = {
        k: []
        for k in (
            "subject / model",
            "strategy (seed)",
            "executions",
            "failures",
            "distinct failing inputs",
            "first failure",
            "failure rate (95% CI)",
            "input entropy (k=10)",
            "final-state sparsity FS / FFS",
            "simulated steps",
            "stopped by",
        )
    }
    for c in data["campaigns"]:
        info, m = c["info"], c["metrics"]
        rows["subject / model"].append(f"{info['subject']} / {info['model']}")
        rows["strategy (seed)"].append(f"{info['strategy']} ({info['seed']})")
        rows["executions"].append(str(m["executions"]))
        rows["failures"].append(f"[red]{m['failures']}[/red]" if m["failures"] else "0")
        rows["distinct failing inputs"].append(str(m["distinct_failures"]))
        first: dict[str, Any] = next(
            iter(c.get("failures") or []), {}
        )  # sorted by asking position: the first failing test
        first_id = first.get("test_case_id") or f"test {m['tests_to_first_failure']}"
        rows["first failure"].append(
            f"{first_id} after {m['seconds_to_first_failure']:.1f} s" if m["failures"] else "none"
        )
        rows["failure rate (95% CI)"].append(
            f"{100 * m['failure_rate']:.2f} % [{100 * m['failure_rate_low']:.2f}, {100 * m['failure_rate_high']:.2f}]"
        )
        diversity = c.get("diversity") or {}
        entropy = diversity.get("input_entropy")
        rows["input entropy (k=10)"].append("-" if entropy is None else f"{entropy:.3f}")
        fs, ffs = diversity.get("final_state_sparsity"), diversity.get("failure_state_sparsity")
        rows["final-state sparsity FS / FFS"].append(
            "-" if fs is None else f"{fs:.3f} / {'-' if ffs is None else f'{ffs:.3f}'}"
        )
        rows["simulated steps"].append(f"{m['steps']:,}")
        rows["stopped by"].append(info["stop_reason"] or info["state"])
    for name, values in rows.items():
        table.add_row(name, *values)
    console.print(table)
    for c in data["campaigns"]:
        first = next(iter(c.get("failures") or []), {})
        if first.get("replay"):  # every failure's command is in the report; the first one here
            console.print(f"replay the first failure: {escape(first['replay'])} --render {first['test_case_id']}.gif")
    console.print(f"report: [bold]{report.html_path}[/bold]\n        {report.json_path}")


def cmd_run(args: argparse.Namespace) -> None:
    if args.shrink is not None and not 1 <= args.shrink <= MAX_SHRINK_FIRST:
        raise UserError(f"--shrink must be in [1, {MAX_SHRINK_FIRST}] (got {args.shrink})")
    check_filmstrips(args.filmstrips)
    config, data = load_campaign_file(args.campaign)
    if args.shrink:  # the flag is the campaign file's shrink.first (its max_executions, if any, stays)
        config = config.model_copy(update={"shrink": config.shrink.model_copy(update={"first": args.shrink})})
    endpoints = data.get("endpoints") or {}
    origin = ""
    if endpoints and not args.generator:
        args.generator, args.analysis = endpoints.get("generator"), endpoints.get("analysis")
        origin = f"{args.campaign}: endpoints"
    # only what this campaign calls (no translator for an RL subject), and the agent loads only its model
    roles = campaign_roles(config.subject, config.observation_translator)
    with suite(
        args, data.get("store_url"), (config.subject,), roles=roles, origin=origin, models=(config.model,)
    ) as connection:
        generator = connection.generator()
        # the id is chosen here, so a StartCampaign retried after a lost answer cannot start a second campaign
        request = generator_pb2.StartCampaignRequest(
            campaign_id=args.id or uuid.uuid4().hex[:12], spec=config.to_proto()
        )
        started = _rpc(retrying, lambda: generator.StartCampaign(request, timeout=300)).status
        console.print(
            f"campaign [bold]{started.campaign_id}[/bold]: {config.strategy} on {config.subject} "
            f"with {config.model}, seed {config.seed}"
        )
        status = _watch(generator, started.campaign_id, config.budget.max_executions)
        _finish(status, _report(connection.analysis(), [started.campaign_id], args.report_dir, args.filmstrips))
        if config.shrink.first:  # shrunk by the generator at the campaign's end: each beside its original
            _rpc(print_stored_shrinks, console, generator, started.campaign_id)
        if config.strategy == REPLAY_STRATEGY:  # a regression campaign: exit 1 naming the inputs that still fail
            total = len(config.strategy_params.get("cases") or [])
            console.print(_rpc(check_regression, generator, started.campaign_id, total))


def cmd_resume(args: argparse.Namespace) -> None:
    with suite(args) as connection:
        generator = connection.generator()
        request = generator_pb2.ResumeCampaignRequest(campaign_id=args.campaign_id)
        status = _rpc(retrying, lambda: generator.ResumeCampaign(request, timeout=60)).status  # idempotent
        status = _watch(generator, args.campaign_id, status.spec.budget.max_executions)
        _finish(status, _report(connection.analysis(), [args.campaign_id], args.report_dir))


def check_filmstrips(n: int) -> None:
    if not 0 <= n <= 10:
        raise UserError(f"--filmstrips must be in [0, 10] (got {n})")


def cmd_report(args: argparse.Namespace) -> None:
    check_filmstrips(args.filmstrips)
    if args.filmstrips and (args.compare or args.match):
        raise UserError("--filmstrips applies to the report of named campaigns, not to --compare or --match")
    if not args.campaign_ids and not args.match:
        raise UserError("name at least one campaign id, or select stored campaigns with --match GLOB")
    if not args.compare and (args.baseline or args.alternative != "two-sided"):
        raise UserError("--baseline and --alternative apply to --compare only")
    # a local suite for a report: the store's reader (generator) and the analysis service; the simulator, agent,
    # oracle and translator only when the report calls them (images to re-render, failures to replay: _render_roles)
    with suite(args, roles=REPORT_ROLES) as connection:
        ids = list(args.campaign_ids)
        if args.match:
            ids += matching_campaigns(connection.generator(), args.match)
        ids = list(dict.fromkeys(ids))
        if connection.local is not None:
            _start_render_roles(connection.local, connection, ids, args.filmstrips)
        analysis = connection.analysis()
        if args.compare:
            _comparison_summary(_compare(analysis, ids, args))
        else:
            if args.match:
                _summary(_report_readable(analysis, ids, args.report_dir))
            else:
                _summary(_report(analysis, ids, args.report_dir, args.filmstrips))


REPORT_ROLES = frozenset({"generator", "analysis"})


def _start_render_roles(local: LocalSuite, connection: Connection, ids: list[str], filmstrips: int) -> None:
    """Starts the services a local report calls beyond REPORT_ROLES (cli.launcher.report_roles): for an image
    subject's archive and for filmstrips. A campaign that cannot be read adds nothing: RenderReport says what is
    wrong with it."""
    generator = connection.generator()
    campaigns: list[tuple[str, str]] = []
    for cid in ids:
        with contextlib.suppress(grpc.RpcError):
            spec = generator.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=cid), timeout=30).status.spec
            campaigns.append((spec.subject, spec.observation_translator))
    more = report_roles(campaigns, filmstrips) - REPORT_ROLES
    if not more:
        return
    local.environments = environments_for([subject for subject, _ in campaigns])  # e.g. Mario's simulator
    try:
        with starting(more, "the services the report replays through") as announce:
            local.on_ready = announce
            local.start_roles(more)
    except LaunchError as exc:
        raise UserError(str(exc)) from None


def matching_campaigns(generator: generator_pb2_grpc.GeneratorServiceStub, pattern: str) -> list[str]:
    """Ids of stored campaigns whose name matches a shell-style pattern, oldest first."""
    import fnmatch

    listed = _rpc(generator.ListCampaigns, generator_pb2.ListCampaignsRequest(), timeout=60).campaigns
    for unreadable in (c for c in listed if c.read_error):  # its name is unknown: say so instead of hiding it
        console.print(f"[yellow]skipped[/yellow] {escape(unreadable.read_error)}", highlight=False)
    listed = [c for c in listed if not c.read_error]
    ids = [
        c.campaign_id for c in sorted(listed, key=lambda c: c.created_at) if fnmatch.fnmatchcase(c.spec.name, pattern)
    ]
    if not ids:
        names = sorted({c.spec.name for c in listed})
        shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
        raise UserError(f"--match {pattern!r} matches no stored campaign name; stored: {shown or 'none'}")
    return ids


def _compare(
    analysis: analysis_pb2_grpc.AnalysisServiceStub, ids: list[str], args: argparse.Namespace
) -> analysis_pb2.CompareResponse:
    if len(ids) < 2:
        raise UserError(f"--compare needs at least 2 campaigns, got {len(ids)}")
    out = args.report_dir
    with console.status(f"comparing {len(ids)} campaigns..."):
        return _rpc(
            analysis.Compare,
            analysis_pb2.CompareRequest(
                campaign_ids=ids,
                output_dir=str(out) if out else "",
                baseline=args.baseline or "",
                alternative=args.alternative,
            ),
            timeout=600,
        )


def _comparison_summary(done: analysis_pb2.CompareResponse) -> None:
    """Per strategy: median [Q1, Q3] of the main metrics and Â12 / p against the baseline."""
    data = json.loads(done.json)
    keys = ("faults", "tests_to_first_failure", "failing_behaviour_cells", "input_entropy")
    labels = {m["key"]: m["label"] for m in data["metrics"]}
    table = Table(title=f"Comparison of {len(data['campaigns'])} campaigns (baseline {data['baseline']})")
    for col in ("strategy", "runs (failed)", *(labels[k] for k in keys)):
        table.add_column(col)
    for s in data["strategies"]:
        cells = []
        for k in keys:
            q = s["summary"][k]
            text = "-" if not q.get("n") else f"{q['median']:.3g} [{q['q1']:.3g}, {q['q3']:.3g}]"
            t = (s.get("versus_baseline") or {}).get(k)
            if t is not None and t["p_value"] is not None:
                text += f"\nÂ12 {t['a12']:.2f} p {t['p_value']:.3f}"
            cells.append(text)
        table.add_row(s["strategy"], f"{s['campaigns']} ({s['found_failure']})", *cells)
    console.print(table)
    console.print(f"report: [bold]{done.html_path}[/bold]\n        {done.json_path}")


def cmd_up(args: argparse.Namespace) -> None:
    # Ctrl-C is how the suite stops: Python leaves SIGINT ignored when the parent ignored it (a job started with `&`
    # from a script, nohup), and then nothing could stop the suite in order
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_on_sigterm()
    # a line per service as it answers (not with --json, whose stdout is one JSON document)
    progress = contextlib.nullcontext(None) if args.json else starting(frozenset(ROLES))
    try:
        with progress as announce:
            local = LocalSuite(
                store_url=resolve_store_url(args),
                model_root=args.model_root,
                security=secure_credentials(args.secure),
                restart_policy=RestartPolicy(),
                simulators=args.simulators,
                environments=available_environments(),  # e.g. Mario's simulator, where .venv-mario is built
                on_ready=announce,
            ).start()
    except LaunchError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(json.dumps({**suite_description(local), **credentials_description(local)}), flush=True)
    else:
        print_suite(local)
    try:
        raise UserError(local.wait())  # returns only when the supervisor gave up on a service
    finally:
        local.stop()


def suite_description(local: LocalSuite) -> dict[str, dict[str, Any]]:
    """service -> endpoint, metrics URL, log path and pid (what `gauntlet up --json` prints)."""
    scheme = "https" if local.security else "http"
    return {
        s.name: {
            "endpoint": s.endpoint,
            # --secure: HTTPS with the client certificate and the token, as the gRPC port (common/metrics_server.py)
            "metrics": f"{scheme}://127.0.0.1:{s.metrics_port}/metrics" if s.metrics_port >= 0 else None,
            "log": str(s.log_path.resolve()),
            "pid": s.process.pid,
        }
        for s in local.services.values()
    }


def credentials_description(local: LocalSuite) -> dict[str, dict[str, str]]:
    """With --secure, {"credentials": {variable: path}}: what a client sets to connect (the --json form)."""
    return {"credentials": local.security.env()} if local.security else {}


def connection_hint(local: LocalSuite) -> list[str]:
    """How a client connects to a --secure suite: the variables to export and a command that uses them."""
    if local.security is None:
        return []
    exports = " ".join(f"{k}={v}" for k, v in local.security.env().items())
    endpoints = f"--generator {local.endpoint('generator')} --analysis {local.endpoint('analysis')}"
    return [
        "mTLS and a bearer token on every link; clients connect with (removed when the suite stops):",
        f"  export {exports}",
        f"  gauntlet run CAMPAIGN.yaml {endpoints}",
        "metrics (https) need the same: curl --cacert $GAUNTLET_CA --cert $GAUNTLET_CLIENT_CERT --key "
        '$GAUNTLET_CLIENT_KEY -H "Authorization: Bearer $(cat $GAUNTLET_TOKEN_FILE)" URL',
    ]


def print_suite(local: LocalSuite) -> None:
    """One block per service, every value whole: a table cut endpoints and paths with '…' in 80 columns."""
    described = suite_description(local)
    width = max(map(len, described))
    lines = ["Gauntlet services on loopback:"]
    for name, d in described.items():
        lines.append(f"  {name:<{width}}  {d['endpoint']}  (pid {d['pid']})")
        lines.append(f"  {'':<{width}}  metrics {d['metrics'] or 'off'}")
        lines.append(f"  {'':<{width}}  log     {d['log']}")
    lines += connection_hint(local)
    lines.append("A service that crashes is restarted on its port. Ctrl-C stops the suite.")
    # plain print: a terminal wraps a long path at its edge instead of a renderer cutting or splitting it
    print("\n".join(lines), flush=True)


def cmd_certs(args: argparse.Namespace) -> None:
    if args.dir.exists() and any(args.dir.iterdir()):
        raise UserError(f"{args.dir} is not empty: give a new or empty folder (nothing is overwritten)")
    args.dir.mkdir(parents=True, exist_ok=True)
    args.dir.chmod(0o700)
    written = write_credentials(args.dir, args.host)
    print(f"wrote {', '.join(p.name for p in written.files())} in {args.dir} (0600; the CA key was not kept)")
    print(f"server certificate valid for: {', '.join(written.hosts())}")


def cmd_train(args: argparse.Namespace) -> None:
    from agent_service.algorithms import model_file_name
    from common.errors import InvalidArgument
    from common.validation import check_id
    from generator_service.surrogates.interaction_log import LOG_NAME
    from offline.training import RECIPES, RecipeError, get_recipe, register_model, train
    from simulator_service.subject import SubjectError, get_subject

    for flag, value in (
        ("--timesteps", args.timesteps),
        ("--stop-at", args.stop_at),
        ("--checkpoint-every", args.checkpoint_every),
    ):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be >= 1 (got {value})")
    try:  # the name becomes the model's folder and the agent service's model name
        check_id("recipe name", args.name)
        recipe = get_recipe(args.name, args.recipe or RECIPES)
        get_subject(recipe.subject)  # a subject of your own: a YAML file in a folder on $GAUNTLET_SUBJECT_PATH
    except (InvalidArgument, RecipeError, SubjectError) as exc:
        raise UserError(str(exc)) from None
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    out = args.model_root / args.name if args.model_root else args.out or Path("runs/zoo") / args.name
    budget = args.timesteps or recipe.timesteps
    with Progress(
        TextColumn(f"[bold]training {args.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("episodes {task.fields[episodes]} failures {task.fields[failures]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("train", total=budget or None, episodes=0, failures=0)  # None: no step budget (QLEARNING)
        try:
            meta = train(
                recipe,
                out,
                timesteps=budget,
                progress=lambda t, b, log: bar.update(task, completed=t, episodes=log.episodes, failures=log.failures),
                resume=args.resume,
                stop_at=args.stop_at,
                checkpoint_every=args.checkpoint_every,
            )
        except (SubjectError, RecipeError) as exc:  # its first observation does not fit; no checkpoint to resume
            raise UserError(str(exc)) from None
    if meta.get("finished") is False:
        where = f"--model-root {args.model_root}" if args.model_root else f"--out {out}"
        console.print(
            f"stopped at {meta['num_timesteps']} of {budget} steps (checkpoint: {out / 'resume'}); continue with: "
            f"gauntlet train {args.name} {where} --resume" + (f" --recipe {args.recipe}" if args.recipe else "")
        )
        console.print_json(json.dumps(meta))
        return
    console.print(f"model: {out / model_file_name(recipe.algorithm)}\ninteraction log: {out / LOG_NAME}")
    if args.model_root:
        console.print(f"listed in {register_model(args.model_root, recipe, meta)}")
    console.print_json(json.dumps(meta))


def cmd_evaluate(args: argparse.Namespace) -> None:
    from agent_service.registry import DEFAULT_MODEL_ROOT, ModelRegistry
    from analysis_service.metrics import wilson_interval
    from common.errors import ServiceError
    from offline.evaluation import JournalMismatch, evaluate_model, read_inputs
    from simulator_service.subject import get_subject

    for flag, value in (
        ("--tests", args.tests),
        ("--parallelism", args.parallelism),
        ("--workers", args.workers),
        ("--chunk", args.chunk),
    ):
        if value < 1:
            raise UserError(f"{flag} must be >= 1 (got {value})")
    root = args.model_root or DEFAULT_MODEL_ROOT
    registry = ModelRegistry(root)
    try:
        entry = registry.entry(args.model)
        registry.load(args.model)
        subject = get_subject(entry.subject)
    except (ServiceError, KeyError) as exc:
        raise UserError(str(exc.args[0]) if exc.args else str(exc)) from None
    inputs = None
    if args.inputs:
        try:
            inputs = read_inputs(args.inputs, subject)
        except (OSError, ValueError) as exc:
            raise UserError(str(exc)) from None
    tests = len(inputs) if inputs is not None else args.tests
    started = time.time()
    with Progress(
        TextColumn(f"[bold]evaluating {args.model} on {subject.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=notes,
    ) as bar:
        task = bar.add_task("eval", total=tests)
        try:
            result = evaluate_model(
                root,
                args.model,
                args.tests,
                args.seed,
                workers=args.workers,
                chunk=args.chunk,
                parallelism=args.parallelism,
                journal=args.journal,
                progress=lambda done: bar.update(task, completed=done),
                inputs=inputs,
            )
        except JournalMismatch as exc:
            raise UserError(str(exc)) from None
    judged = result.tests - result.errors
    low, high = wilson_interval(result.failures, judged) if judged else (float("nan"), float("nan"))
    summary = {
        "model": args.model,
        "subject": subject.name,
        "eval_tests": result.tests,
        "eval_seed": args.seed,
        "eval_failures": result.failures,
        "eval_errors": result.errors,
        "success_rate": round(result.success_rate, 5),
        "failure_rate_ci95": [round(low, 5), round(high, 5)],
        "wall_seconds": round(time.time() - started, 1),
        "failed_test_indices": list(result.failed_indices[:50]),
    }
    if inputs is not None:
        summary["inputs"] = str(args.inputs)
        summary["failed_test_ids"] = [inputs[i].id for i in result.failed_indices[:50]]
    if args.journal:
        summary["journal"] = str(args.journal)
    if result.tests >= 100_000:
        summary["prt_well_trained"] = 1 <= result.failures * 100_000 / result.tests < 500
    console.print_json(json.dumps(summary))
    if args.model_root and inputs is None and judged:
        notes.print(_record_evaluation(root, args.model, entry.metadata, summary, result.failures / judged))


def _record_evaluation(
    root: Path, model: str, listed: Mapping[str, Any], summary: Mapping[str, Any], rate: float
) -> str:
    """Writes the measurement's eval_* fields into `root`'s manifest entry of `model` (what --model-root promises),
    unless the entry holds a measurement on more inputs, which stays; returns what was done, in words."""
    from offline.manifest import update_model_fields

    before = listed.get("eval_tests")
    if isinstance(before, int) and before > summary["eval_tests"]:
        return (
            f"not written to {root / 'manifest.yaml'}: its entry {model} holds a measurement on {before:,} inputs, "
            f"more than these {summary['eval_tests']:,}"
        )
    fields: dict[str, Any] = {
        key: summary[key] for key in ("eval_tests", "eval_failures", "eval_errors", "eval_seed", "success_rate")
    }
    fields["eval_failure_rate"] = round(rate, 5)
    fields["eval_failure_rate_ci95"] = summary["failure_rate_ci95"]
    if "prt_well_trained" in summary:
        fields["prt_well_trained"] = summary["prt_well_trained"]
    try:
        path = update_model_fields(root, model, fields)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return f"written to {path}: " + ", ".join(f"{k} {v}" for k, v in fields.items())
