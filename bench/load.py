"""Under load: N concurrent campaigns for M minutes on the local suite. Does every campaign progress, does every
service stay SERVING, and does each service's memory stay flat?

Starts the whole suite as separate processes on loopback (cli.launcher.LocalSuite, SQLite store in a scratch
folder), then N campaigns at once (default 8 random campaigns against the bundled CartPole agent, each with a
budget far beyond the run, so all N run the whole time), each with a WatchCampaign stream attached as
`gauntlet run` attaches one. Every --poll-seconds it checks every service's health (grpc.health.v1 Check, 10 s
deadline), reads each service's resident memory (/proc/PID/status VmRSS) and each campaign's executions.

Warm-up is the first --warmup-minutes (default a fifth of the run): models load, environment pools fill, the
store's caches grow. A service's memory rises and falls with the batches in flight, so its level is a median over
a window: the first tenth of the readings after the warm-up (at least three) and the last tenth; the growth is the
second against the first, in per cent.

Passes when: every health check answered SERVING; every campaign executed tests (min over campaigns > 0) and
kept executing after the warm-up (each campaign's count at the end > its count at the end of warm-up); every
service's memory growth <= 10 %. Problems are printed first; the last line is exactly
    load: campaigns=<N> min_progress=<executions> rss_growth_pct=<max over services>
and the exit code is 1 when a check failed. The campaigns are cancelled at the end. Every number printed, and the
problems, go to results/bench/load.json (written whether the checks passed or not).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.api import CampaignConfig

MAX_RSS_GROWTH_PCT = 10.0
HEALTH_DEADLINE_S = 10.0
MIN_WINDOW = 3  # readings per memory median at least (after the warm-up, at the end)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--campaigns", type=int, default=8, help="concurrent campaigns (default 8)")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the run (default 10)")
    parser.add_argument(
        "--warmup-minutes", type=float, help="warm-up before memory and progress baselines (default: minutes / 5)"
    )
    parser.add_argument("--poll-seconds", type=float, default=5.0, help="health/memory/progress period (default 5)")
    parser.add_argument("--subject", default="cartpole", help="subject of every campaign (default cartpole)")
    parser.add_argument("--model", default="cartpole-ppo", help="model under test (default cartpole-ppo)")
    parser.add_argument("--strategy", default="random", help="strategy of every campaign (default random)")
    parser.add_argument("--batch-size", type=int, default=64, help="test cases per batch (default 64)")
    parser.add_argument("--verbose", action="store_true", help="print each poll: seconds, executions, MiB per service")
    args = parser.parse_args(argv)
    if args.campaigns < 1:
        parser.error(f"--campaigns must be >= 1, got {args.campaigns}")
    if args.minutes <= 0 or args.poll_seconds <= 0:
        parser.error("--minutes and --poll-seconds must be > 0")
    if args.warmup_minutes is None:
        args.warmup_minutes = args.minutes / 5
    if not 0 <= args.warmup_minutes < args.minutes:
        parser.error(f"--warmup-minutes must be in [0, --minutes), got {args.warmup_minutes}")
    # the two memory windows need MIN_WINDOW readings each after the warm-up
    if (args.minutes - args.warmup_minutes) * 60 < 2 * MIN_WINDOW * args.poll_seconds:
        parser.error(
            f"the run after the warm-up must span {2 * MIN_WINDOW} polls ({2 * MIN_WINDOW * args.poll_seconds:g} s)"
        )
    return args


def resident_kib(pid: int) -> int:
    """Resident memory of a process in KiB (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


def growth_pct(baseline: Sequence[int], final: Sequence[int]) -> float:
    """Per cent growth of the median of `final` over the median of `baseline` (readings in KiB)."""
    base = statistics.median(baseline)
    return 100.0 * (statistics.median(final) - base) / base if base else float("inf")


def watch(gen: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, stop: threading.Event) -> None:
    """Follows the campaign's events as `gauntlet run` does, until the bench stops (then the stream is cancelled)."""
    stream = gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=campaign_id))
    threading.Thread(target=lambda: (stop.wait(), stream.cancel()), daemon=True).start()
    try:
        for _ in stream:
            pass
    except grpc.RpcError:
        pass  # cancelled at the end; a real failure shows in the progress and health checks


def run(args: argparse.Namespace, record: BenchRecord | None = None) -> int:
    """Runs the campaigns and the checks; returns the exit code. Every number printed goes into record.metrics."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gauntlet-load-") as scratch:
        root = Path(scratch)
        with LocalSuite(
            store_url=f"sqlite:///{root / 'store.db'}", log_dir=root / "logs", report_root=root / "reports"
        ) as suite:
            health = {
                name: health_pb2_grpc.HealthStub(client_channel(service.endpoint))
                for name, service in suite.services.items()
            }
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
            seconds = args.minutes * 60
            ids = []
            for i in range(args.campaigns):
                config = CampaignConfig(
                    name=f"load-{i}",
                    subject=args.subject,
                    model=args.model,
                    strategy=args.strategy,
                    seed=i,
                    budget={"max_executions": 10_000_000, "max_wall_seconds": seconds + 600},
                    batch_size=args.batch_size,
                )
                request = generator_pb2.StartCampaignRequest(spec=config.to_proto())
                ids.append(gen.StartCampaign(request, timeout=300).status.campaign_id)
            stop = threading.Event()
            watchers = [threading.Thread(target=watch, args=(gen, cid, stop), daemon=True) for cid in ids]
            for w in watchers:
                w.start()

            started = time.monotonic()
            warmup_end = started + args.warmup_minutes * 60
            rss: dict[str, list[tuple[float, int]]] = {name: [] for name in suite.services}
            executions: list[tuple[float, list[int]]] = []
            while (now := time.monotonic()) < started + seconds:
                for name, stub in health.items():
                    try:
                        answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=HEALTH_DEADLINE_S)
                        if answer.status != health_pb2.HealthCheckResponse.SERVING:
                            problems.append(f"{now - started:.0f} s: {name} answered {answer.status} to a health check")
                    except grpc.RpcError as exc:
                        problems.append(f"{now - started:.0f} s: {name} health check failed: {exc.code().name}")
                for name, service in suite.services.items():
                    rss[name].append((now, resident_kib(service.process.pid)))
                counts = [
                    gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=cid), timeout=30).status.executions
                    for cid in ids
                ]
                executions.append((now, counts))
                if args.verbose:
                    memory = " ".join(f"{name}={readings[-1][1] / 1024:.0f}" for name, readings in rss.items())
                    print(f"{now - started:6.0f} s  executions {min(counts)}..{max(counts)}  MiB {memory}", flush=True)
                time.sleep(max(0.0, args.poll_seconds - (time.monotonic() - now)))

            stop.set()
            for cid in ids:
                gen.CancelCampaign(generator_pb2.CancelCampaignRequest(campaign_id=cid), timeout=60)
            for w in watchers:
                w.join(timeout=30)

    after_warmup = [i for i, (t, _) in enumerate(executions) if t >= warmup_end]
    first = after_warmup[0]  # parse_args keeps 2 * MIN_WINDOW polls after the warm-up
    window = max(MIN_WINDOW, len(after_warmup) // 10)
    levels = {
        name: (
            [kib for _, kib in readings[first : first + window]],
            [kib for _, kib in readings[-window:]],
        )
        for name, readings in rss.items()
    }
    growth = {name: growth_pct(start, end) for name, (start, end) in levels.items()}
    at_warmup, at_end = executions[first][1], executions[-1][1]
    for i, (before, after) in enumerate(zip(at_warmup, at_end)):
        if after <= before:
            problems.append(f"campaign load-{i} made no progress after the warm-up ({before} -> {after} executions)")
    for name, pct in growth.items():
        if pct > MAX_RSS_GROWTH_PCT:
            problems.append(f"{name} resident memory grew {pct:.1f} % after the warm-up (limit {MAX_RSS_GROWTH_PCT} %)")
    min_progress = min(at_end)
    if min_progress == 0:
        problems.append("a campaign executed nothing")
    for line in problems:
        print(f"problem: {line}", flush=True)
    print(
        "memory after warm-up -> end (MiB): "
        + ", ".join(
            f"{name} {statistics.median(start) / 1024:.0f}->{statistics.median(end) / 1024:.0f}"
            for name, (start, end) in levels.items()
        ),
        flush=True,
    )
    print(f"executions per campaign at the end: {' '.join(map(str, at_end))}", flush=True)
    print(
        f"load: campaigns={args.campaigns} min_progress={min_progress} rss_growth_pct={max(growth.values()):.1f}",
        flush=True,
    )
    if record is not None:
        m = record.metrics
        m.update(campaigns=args.campaigns, minutes=args.minutes, problems=len(problems))
        m.update(min_progress=min_progress, rss_growth_pct=round(max(growth.values()), 1))
        for name, (start, end) in levels.items():
            m[f"rss_mib_after_warmup_{name}"] = round(statistics.median(start) / 1024)
            m[f"rss_mib_at_end_{name}"] = round(statistics.median(end) / 1024)
            m[f"rss_growth_pct_{name}"] = round(growth[name], 1)
        m.update({f"executions_campaign_{i}": count for i, count in enumerate(at_end)})
        record.details["problems"] = problems
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with BenchRecord("load") as record:  # written with the checks' verdict: a failed check is a finished run
        code = run(args, record)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
