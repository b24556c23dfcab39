"""One campaign spread over one and then two simulator processes: does a second simulator speed it up?

The same campaign (subject, model, seed, strategy, budget) runs twice, each time on a fresh local suite: once
with one simulator process, once with two (`gauntlet up --simulators 2`), where the generator splits every batch
into one RunEpisodes stream per simulator. The subject is simulator-bound: on BipedalWalker's hardcore terrain a
Box2D step (terrain, lidar) costs far more than the PPO policy's share of a batched forward pass, so the
simulator, not the agent, is what a second process can relieve.

Prints each run's wall time and throughput, the CPU seconds each service process used during the campaign (from
/proc/<pid>/stat, user + system; startup excluded) and its share of one core, checks that both runs stored the same
executions (test-case ids, verdicts, margins, episode lengths: the seed fixes every episode whichever simulator
runs it), and ends with

    scaling: two_simulators/one_simulator=<ratio of executions per second>

A ratio well above 1 needs a free core for the second simulator: on a 2-core machine shared with other work the
agent, generator and oracle compete for the same cores, and the ratio is noisy.

    python bench/scaling.py [--executions 128] [--batch-size 64] [--parallelism 32] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_service.api import DEFAULT_MODEL_ROOT
from bench.harness import campaign_executions, run_campaign
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2_grpc, oracle_pb2
from common.server import client_channel
from generator_service.api import CampaignConfig

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
Outcome = tuple[str, str, float, int]  # test-case id, verdict, margin, steps


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (fields 14 and 15 of /proc/<pid>/stat, after the command name,
    which may itself hold spaces)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class Run:
    simulators: int
    seconds: float
    steps: int
    outcomes: list[Outcome]
    cpu: dict[str, float]  # service name -> CPU seconds during the campaign

    @property
    def per_second(self) -> float:
        return len(self.outcomes) / self.seconds


def run(config: CampaignConfig, simulators: int, model_root: Path) -> Run:
    with tempfile.TemporaryDirectory(prefix="gauntlet-scaling-") as tmp:
        with LocalSuite(
            store_url=f"sqlite:///{tmp}/bench.db",
            log_dir=Path(tmp) / "logs",
            report_root=Path(tmp) / "reports",
            model_root=model_root,
            simulators=simulators,
        ) as local:
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            pids = {name: s.process.pid for name, s in local.services.items()}
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.perf_counter()
            status = run_campaign(gen, config)
            seconds = time.perf_counter() - started
            cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            rows = campaign_executions(gen, status.campaign_id)
    outcomes = [(e.test_case.id, oracle_pb2.VerdictKind.Name(e.verdict), e.margin, e.steps) for e in rows]
    return Run(simulators, seconds, int(status.steps), outcomes, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", default="bipedalwalker_obstacles")
    parser.add_argument("--model", default="bipedalwalker-obstacles-ppo")
    parser.add_argument("--strategy", default="random")
    parser.add_argument("--executions", type=int, default=128, help="campaign budget (default 128)")
    parser.add_argument("--batch-size", type=int, default=64, help="test cases per batch (default 64)")
    parser.add_argument(
        "--parallelism", type=int, default=32, help="environments in lock-step per RunEpisodes stream (default 32)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-root", type=Path, default=DEFAULT_MODEL_ROOT, help="zoo folder (default: bundled)")
    args = parser.parse_args()

    config = CampaignConfig(
        name="scaling",
        subject=args.subject,
        model=args.model,
        strategy=args.strategy,
        seed=args.seed,
        budget={"max_executions": args.executions},
        batch_size=args.batch_size,
        parallelism=args.parallelism,
    )
    runs = [run(config, n, args.model_root) for n in (1, 2)]

    print(f"{args.subject} / {args.model}, {args.executions} executions, batch {args.batch_size}, seed {args.seed}")
    print(f"{'simulators':>10s} {'seconds':>8s} {'executions/s':>13s} {'steps/s':>8s}   CPU s during the campaign")
    for r in runs:
        cpu = ", ".join(f"{name} {s:.1f} ({100 * s / r.seconds:.0f}%)" for name, s in r.cpu.items())
        print(f"{r.simulators:>10d} {r.seconds:8.1f} {r.per_second:13.2f} {r.steps / r.seconds:8.0f}   {cpu}")
    print(f"cores: {os.cpu_count()}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)")

    one, two = runs
    failures = sum(o[1] == "VERDICT_KIND_FAIL" for o in one.outcomes)
    same = one.outcomes == two.outcomes
    print(
        f"verdicts identical: {'yes' if same else 'NO'} ({len(one.outcomes)} executions, {failures} failures; "
        "ids, verdicts, margins and episode lengths compared)"
    )
    print(f"scaling: two_simulators/one_simulator={two.per_second / one.per_second:.2f}")
    if not same:
        differ = [(a, b) for a, b in zip(one.outcomes, two.outcomes, strict=False) if a != b]
        print(f"first difference (one simulator, two): {differ[:1] or 'lengths differ'}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
