"""A scale-out curve at equal total concurrency: one campaign over 1, 2 and 4 simulator processes, and over 2 agents.

For each subject the same campaign (subject, model, seed, strategy, budget) runs once per row, each row on a fresh
local suite of its own:

    simulators  agents
             1       1      the baseline
             2       1      the generator cuts every batch into one RunEpisodes stream per simulator
             4       1
             1       2      the simulator's lock-step groups act with the two agents in turn

Every row holds the same number of environments in flight (`--environments`, default 64): the batch is that many
test cases and each stream gets all of its shard (parallelism = batch), so 1 simulator steps 64 environments, 2
step 32 each and 4 step 16 each. Before the timed campaign a warm-up campaign of one batch (another seed) fills
each simulator's environment pool and the agents' model caches, so no row pays for building environments. Every
service runs with BLAS/OpenMP threads pinned to one (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, ...;
checked in each process's /proc/<pid>/environ) and no GPU visible, so no row gets extra threads a row with
fewer processes did not.

Two subjects:
* simulator-bound: hardcore BipedalWalker with the QD paper's obstacle slots and the bundled PPO walker (Box2D
  stepping and the lidar cost several times the walker's share of a batched forward pass);
* agent-bound: DESIGNATE's urban scenes with the bundled segmentation U-Net: per evaluation the agent segments two
  images (the simulator's and the translated one) and embeds one, about twice the render's cost
  (bench/designate_stages.py). No bundled classic-control agent is agent-bound here: measured on 32 episodes with
  one simulator, Humanoid's SAC agent used 0.4 CPU s against its simulator's 2.2, Parking's 0.4 against 1.6, and
  CartPole's PPO 0.3 against 0.3.

For every row it prints wall time, executions and steps per second, the speed-up over the first row, the
efficiency (speed-up / processes of the role that was multiplied), the CPU seconds each service process used
during the timed campaign (user + system from /proc/<pid>/stat) and their sum per wall second ("cores": how much
of the machine the row got; on a machine loaded by other work, more processes win a larger share of it, which a
speed-up then shows as scaling). It checks that every row stored the same
executions (test-case ids and verdicts; margins and episode lengths too, reported): the seed fixes every episode
whichever process runs it, so a difference is a bug and the bench exits 1. It writes results/bench/scaling.json
(bench/results.py) and ends with

    scaling: efficiency_2=<simulator-bound, 2 simulators> efficiency_4=<simulator-bound, 4 simulators>

An efficiency near 1 needs a free core per process: on a machine with fewer idle cores than processes (4
simulators on 2 cores) the curve measures contention, and the results file holds the core count and the load.

    python bench/scaling.py [--environments 64] [--batches N] [--seed 0] [--subjects both|simulator|agent]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_service.api import DEFAULT_MODEL_ROOT
from bench.harness import PINNED_ENVIRONMENT, campaign_executions, cpu_seconds, run_campaign, unpinned
from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2_grpc, oracle_pb2
from common.server import client_channel
from generator_service.api import CampaignConfig

# every thread pool a numeric library may start, pinned to one thread in every service; no GPU for the agent
ROWS = ((1, 1), (2, 1), (4, 1), (1, 2))  # (simulator processes, agent processes)
Outcome = tuple[str, str, float, int]  # test-case id, verdict, margin, steps


@dataclass(frozen=True)
class Subject:
    subject: str
    model: str
    bound: str  # which process the subject's cost lies in: "simulator" or "agent"
    batches: int  # timed batches by default: enough for the campaign to last about half a minute on 2 cores
    translator: bool = False  # an image subject: the suite needs its translator service


SUBJECTS = {
    "simulator": Subject("bipedalwalker_obstacles", "bipedalwalker-obstacles-ppo", "simulator", batches=2),
    "agent": Subject("urban", "segnet-urban", "agent", batches=4, translator=True),
}


@dataclass
class Row:
    simulators: int
    agents: int
    seconds: float
    steps: int
    outcomes: list[Outcome]
    cpu: dict[str, float]  # service name -> CPU seconds during the timed campaign
    speedup: float = 0.0
    efficiency: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def processes(self) -> int:
        """How many processes of the multiplied role this row runs (1 for the baseline)."""
        return max(self.simulators, self.agents)

    @property
    def cores_used(self) -> float:
        """CPU seconds of all the suite's processes per wall second: how much of the machine this row got."""
        return sum(self.cpu.values()) / self.seconds

    @property
    def per_second(self) -> float:
        return len(self.outcomes) / self.seconds


def start_suite(local: LocalSuite, simulators: int, agents: int, translator: bool) -> str:
    """Starts oracle, `agents` agents, `simulators` simulators (each pointed at every agent) and a generator over
    all the simulators in `local` (its stop() ends them all); returns the generator's endpoint. LocalSuite itself
    starts one agent; a second one needs the simulators' comma-separated --agent-endpoint."""
    local.start_service("oracle", "oracle_service")
    model_root = ["--model-root", str(local.model_root)] if local.model_root else []
    agent_endpoints = [
        local.start_service("agent" if a == 0 else f"agent-{a + 1}", "agent_service", *model_root).endpoint
        for a in range(agents)
    ]
    translator_args = []
    if translator:  # image subjects' GAN stage, one process whatever the row
        translator_args = ["--translator-endpoint", local.start_service("translator", "translator_service").endpoint]
    simulator_endpoints = [
        local.start_service(
            "simulator" if s == 0 else f"simulator-{s + 1}",
            "simulator_service",
            "--agent-endpoint",
            ",".join(agent_endpoints),
            "--pipeline",
            str(local.simulator_pipeline),
            *translator_args,
        ).endpoint
        for s in range(simulators)
    ]
    generator = local.start_service(
        "generator",
        "generator_service",
        "--simulator-endpoint",
        ",".join(simulator_endpoints),
        "--oracle-endpoint",
        local.services["oracle"].endpoint,
        "--artifact-root",
        str(local.artifact_root),
    )
    return generator.endpoint


def run_row(
    config: CampaignConfig, warmup: CampaignConfig, simulators: int, agents: int, translator: bool, model_root: Path
) -> Row:
    with tempfile.TemporaryDirectory(prefix="gauntlet-scaling-") as tmp:
        local = LocalSuite(
            store_url=f"sqlite:///{tmp}/bench.db",
            log_dir=Path(tmp) / "logs",
            report_root=Path(tmp) / "reports",
            artifact_root=Path(tmp),
            model_root=model_root,
        )
        try:
            endpoint = start_suite(local, simulators, agents, translator)
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(endpoint))
            pids = {name: s.process.pid for name, s in local.services.items()}
            if bad := {name: unpinned(pid) for name, pid in pids.items() if unpinned(pid)}:
                raise SystemExit(f"services started without pinned threads: {bad}")
            run_campaign(gen, warmup)  # fills the environment pools; not timed
            before = {name: cpu_seconds([pid]) for name, pid in pids.items()}
            started = time.perf_counter()
            status = run_campaign(gen, config)
            seconds = time.perf_counter() - started
            cpu = {name: cpu_seconds([pid]) - before[name] for name, pid in pids.items()}
            rows = campaign_executions(gen, status.campaign_id)
        finally:
            local.stop()
    outcomes = [(e.test_case.id, oracle_pb2.VerdictKind.Name(e.verdict), e.margin, e.steps) for e in rows]
    return Row(simulators, agents, seconds, int(status.steps), outcomes, cpu)


def curve(subject: Subject, args: argparse.Namespace) -> list[Row]:
    """The four rows for one subject, with speed-up and efficiency against the first."""
    common: dict[str, Any] = {
        "subject": subject.subject,
        "model": subject.model,
        "strategy": args.strategy,
        "batch_size": args.environments,
        "parallelism": args.environments,  # each stream runs its whole shard at once: equal total concurrency
    }
    batches = args.batches or subject.batches
    config = CampaignConfig.model_validate(
        {**common, "name": "scaling", "seed": args.seed, "budget": {"max_executions": args.environments * batches}}
    )
    warmup = CampaignConfig.model_validate(
        {**common, "name": "scaling-warmup", "seed": args.seed + 1, "budget": {"max_executions": args.environments}}
    )
    rows: list[Row] = []
    for simulators, agents in ROWS:
        row = run_row(config, warmup, simulators, agents, subject.translator, args.model_root)
        row.speedup = row.per_second / rows[0].per_second if rows else 1.0
        row.efficiency = row.speedup / row.processes
        rows.append(row)
        print(f"  {subject.subject}: {simulators} simulator(s), {agents} agent(s): {row.seconds:.1f} s", flush=True)
    return rows


def same_outcomes(rows: list[Row]) -> tuple[bool, bool, str]:
    """(verdicts identical, margins and lengths identical too, the first verdict difference or '')."""
    base = rows[0].outcomes
    verdicts = [(o[0], o[1]) for o in base]
    first = ""
    for row in rows[1:]:
        theirs = [(o[0], o[1]) for o in row.outcomes]
        if theirs != verdicts and not first:
            differ = [(a, b) for a, b in zip(verdicts, theirs, strict=False) if a != b]
            first = f"{row.simulators} simulator(s), {row.agents} agent(s): {differ[:1] or 'counts differ'}"
    return not first, all(row.outcomes == base for row in rows[1:]), first


def report(subject: Subject, rows: list[Row]) -> None:
    print(f"\n{subject.subject} / {subject.model} ({subject.bound}-bound)")
    print(
        f"{'sims':>4s} {'agents':>6s} {'seconds':>8s} {'exec/s':>7s} {'steps/s':>8s} {'speed-up':>8s} "
        f"{'effic.':>6s} {'CPU s':>6s} {'cores':>5s}   CPU s per process during the campaign"
    )
    for r in rows:
        per_process = ", ".join(f"{name} {s:.1f}" for name, s in r.cpu.items() if s >= 0.05)
        print(
            f"{r.simulators:>4d} {r.agents:>6d} {r.seconds:8.1f} {r.per_second:7.2f} {r.steps / r.seconds:8.0f} "
            f"{r.speedup:8.2f} {r.efficiency:6.2f} {sum(r.cpu.values()):6.1f} {r.cores_used:5.2f}   {per_process}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subjects", choices=["both", "simulator", "agent"], default="both")
    parser.add_argument("--strategy", default="random")
    parser.add_argument(
        "--environments", type=int, default=64, help="environments in flight in every row (default 64; 8..512)"
    )
    parser.add_argument(
        "--batches", type=int, default=0, help="timed batches per campaign (1..64; default: 2 BipedalWalker, 4 urban)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-root", type=Path, default=DEFAULT_MODEL_ROOT, help="zoo folder (default: bundled)")
    args = parser.parse_args()
    # 4 simulators each need >= 8 environments for two lock-step groups of 8 (the simulator's pipeline)
    if not 8 <= args.environments <= 512 or args.environments % 4:
        parser.error("--environments: a multiple of 4 in [8, 512]")
    if not 0 <= args.batches <= 64:
        parser.error("--batches: in [1, 64]")
    os.environ.update(PINNED_ENVIRONMENT)  # LocalSuite's children inherit this process's environment

    chosen = ["simulator", "agent"] if args.subjects == "both" else [args.subjects]
    cores = len(os.sched_getaffinity(0))
    with BenchRecord("scaling") as record:
        curves = {}
        for key in chosen:
            curves[key] = curve(SUBJECTS[key], args)
        failed = []
        for key, rows in curves.items():
            subject = SUBJECTS[key]
            report(subject, rows)
            verdicts, exact, first = same_outcomes(rows)
            failures = sum(o[1] == "VERDICT_KIND_FAIL" for o in rows[0].outcomes)
            print(
                f"verdicts identical across the curve: {'yes' if verdicts else 'NO'} ({len(rows[0].outcomes)} "
                f"executions, {failures} failures); margins and episode lengths identical: {'yes' if exact else 'no'}"
            )
            if first:
                failed.append(f"{subject.subject}: first difference {first}")
            name = subject.subject
            for r in rows:
                tag = f"{name}.simulators_{r.simulators}.agents_{r.agents}"
                record.metrics[f"{tag}.executions_per_s"] = round(r.per_second, 3)
                record.metrics[f"{tag}.speedup"] = round(r.speedup, 3)
                record.metrics[f"{tag}.efficiency"] = round(r.efficiency, 3)
                record.details[tag] = {
                    "seconds": round(r.seconds, 2),
                    "steps": r.steps,
                    "executions": len(r.outcomes),
                    "cpu_s": {k: round(v, 2) for k, v in r.cpu.items()},
                    "cores_used": round(r.cores_used, 2),
                }
            record.metrics[f"{name}.verdicts_identical"] = int(verdicts)
            record.details[f"{name}.failures"] = failures
            record.details[f"{name}.margins_and_lengths_identical"] = exact
        record.details["settings"] = {
            "environments": args.environments,
            "batches": {SUBJECTS[k].subject: args.batches or SUBJECTS[k].batches for k in chosen},
            "seed": args.seed,
            "strategy": args.strategy,
            "rows": [list(r) for r in ROWS],
            "pinned_environment": PINNED_ENVIRONMENT,
        }
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"\ncores: {cores}, load average {load} (1, 5, 15 min)")
        if failed:
            print("\n".join(failed), file=sys.stderr)
            raise SystemExit(1)  # leaves no results file: BenchRecord writes only a finished run
        # the headline is the simulator-bound subject's simulator rows (the agent-bound one when only it ran)
        head = curves.get("simulator") or curves["agent"]
        e2, e4 = head[1].efficiency, head[2].efficiency
        record.metrics["efficiency_2"] = round(e2, 2)
        record.metrics["efficiency_4"] = round(e4, 2)
        record.metrics["cores"] = cores
        if cores < 4:
            print(f"note: 4 simulators on {cores} cores cannot scale; efficiency_4 measures contention")
    print(f"scaling: efficiency_2={e2:.2f} efficiency_4={e4:.2f}")


if __name__ == "__main__":
    main()
