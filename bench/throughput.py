"""Episode throughput on a subject (CartPole by default), measured three ways side by side on the same test cases.

1. suite:   a campaign through the services (generator -> simulator -> agent, oracle), with 64
            environments in lock-step, as the suite runs by default: two pipelined groups of 32, each one
            batched call per step, over a same-host lane (the agent runs on this host); also shown: one group
            of 64 (`--pipeline 1`), and the two groups over gRPC's ActStream (`--agent-lanes off`, the path
            between hosts);
2. naive:   the seed tools' loop, in process: one env, one observation's action at a time;
3. batched: in process, 64 environments in lock-step, one batched action call per step.

Like for like: both in-process loops compute actions with the agent service's own inference function
(agent_service.api.predict_actions: eval mode once, inference_mode, the policy's _predict on padded blocks) on the
model the service's registry loads, and every way's environments are built before its timer starts (the suite's
simulator keeps warm pools; the batched loop builds its 64 once and reuses them).

Every way reports wall time and CPU seconds: for an in-process loop this process's CPU time (one torch thread);
for the suite the CPU time of all its service processes (and their children) plus this client's, from
/proc/<pid>/stat, since the simulator and the agent are separate processes that can use two cores at once.

Each suite way runs --repeats campaigns (default 3) one after another on one fresh suite, and the batched loop
runs as many times; a way's wall and CPU time are the medians, and every run's time is printed too (the first
campaign of a suite includes its warm-up: streams opened, pools filled). The naive loop runs once.
Ends with
    throughput: suite/naive=<a> suite/batched=<b> cpu_suite/batched=<c>
a and b: ratios of episodes per second (wall); c: CPU seconds per step of the batched loop over those of the suite
(above 1: the suite spends less CPU per step). Writes results/bench/throughput.json (throughput_<subject>.json for
another subject) with every number it prints.

    python bench/throughput.py [--episodes 256] [--parallelism 64] [--repeats 3] [--profile DIR]
    python bench/throughput.py --subject lunarlander     # a costlier subject: its zoo model, lunarlander-ppo

With --profile DIR, py-spy (the dev extra) samples the simulator, agent, generator and oracle processes
during the two-group suite run; their collapsed stacks go to DIR/<service>.txt and the busiest frames of
each are printed (they cost the suite some throughput: compare ratios without it).
"""

from __future__ import annotations

import argparse
import collections
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_service.api import DEFAULT_MODEL_ROOT, ModelRegistry, predict_actions
from bench.harness import cpu_seconds
from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.seeding import episode_seed, strategy_seed
from common.server import client_channel
from common.test_case import TestCase
from generator_service.api import CampaignConfig, make_strategy
from simulator_service.api import Job, TraceRecorder, get_subject, make_env, run_lockstep

SIGNALS = ["observations", "actions", "final_observation"]  # what the CartPole oracle asks the simulator for
PROFILED = ("simulator", "agent", "generator", "oracle")
WRAPPERS = ("grpc_method.", "AdmissionLimit.")  # every handler runs inside them: not worth a line of the summary


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_profilers(pids: dict[str, int], folder: Path) -> list[subprocess.Popen[bytes]]:
    """One py-spy sampler per service process (CPU samples only, 100 Hz, collapsed stacks)."""
    folder.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).parent / "py-spy"
    return [
        subprocess.Popen(
            [str(py_spy), "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--format", "raw"]
            + ["--output", str(folder / f"{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]


def stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    for p in profilers:
        p.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
    for p in profilers:
        p.wait(timeout=60)


def flame_summary(path: Path, top: int = 6) -> list[str]:
    """The frames that hold the most samples in a py-spy collapsed-stack file: self time, and inclusive time of
    the project's own functions (file paths shortened). py-spy counts a thread blocked in Condition.wait as busy
    (its timed waits spin in Python), so those lines are hand-offs between threads, not computation."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            if ("_service/" in f or "common/" in f) and not f.startswith(WRAPPERS):
                inclusive[f] += n
    lines = [
        f"{path.stem}: {total} samples; self: "
        + ", ".join(f"{f} {100 * c / total:.0f}%" for f, c in own.most_common(top))
    ]
    lines.append("  within: " + ", ".join(f"{f} {100 * c / total:.0f}%" for f, c in inclusive.most_common(top)))
    return lines


def _short(frame: str) -> str:
    m = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if not m:
        return frame
    return f"{m.group(1)} ({re.sub(r'.*/(site-packages|bench|main)/', '', m.group(2))})"


@dataclass
class Way:
    """One way's runs: wall and CPU seconds of each, and the steps of one run."""

    label: str
    wall: list[float]
    cpu: list[float]
    steps: int

    @property
    def seconds(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_seconds(self) -> float:
        return statistics.median(self.cpu)


def run_suite(
    config: CampaignConfig,
    model_root: Path,
    pipeline: int,
    repeats: int,
    lanes: bool = True,
    profile: Path | None = None,
) -> tuple[list[float], list[float], int, dict[str, float], dict[str, float]]:
    """Wall and CPU seconds of `repeats` campaigns with the same spec, one after another on one fresh suite; CPU is
    every service process's (and its children's) plus this client's during the campaign. Also: each service's
    peak resident memory (MiB), and its CPU seconds over all the campaigns (the client's as "client")."""
    with tempfile.TemporaryDirectory() as tmp:
        with LocalSuite(
            store_url=f"sqlite:///{tmp}/bench.db",
            log_dir=Path(tmp) / "logs",
            model_root=model_root,
            simulator_pipeline=pipeline,
            agent_lanes=lanes,
        ) as local:
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            pids = {name: local.services[name].process.pid for name in PROFILED}
            suite_pids = [s.process.pid for s in local.services.values()]
            profilers = start_profilers(pids, profile) if profile else []
            wall, cpu = [], []
            by_process = {name: -cpu_seconds([s.process.pid]) for name, s in local.services.items()}
            by_process["client"] = -time.process_time()
            for _ in range(repeats):
                cpu_before = cpu_seconds(suite_pids) + time.process_time()
                started = time.perf_counter()
                cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
                status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
                wall.append(time.perf_counter() - started)
                cpu.append(cpu_seconds(suite_pids) + time.process_time() - cpu_before)
            for name, service in local.services.items():
                by_process[name] += cpu_seconds([service.process.pid])
            by_process["client"] += time.process_time()
            stop_profilers(profilers)
            memory = {name: peak_rss_mb(s.process.pid) for name, s in local.services.items()}
    return wall, cpu, int(status.steps), memory, by_process


def run_naive(subject_name: str, jobs: list[Job], model: object) -> tuple[float, float, int]:
    """The seed tools' loop: one env, one observation at a time, through the agent's inference function."""
    env = make_env(get_subject(subject_name))
    steps = 0
    cpu_before, started = time.process_time(), time.perf_counter()
    for job in jobs:
        obs, _ = env.reset(seed=job.seed, options={"values": job.values})
        done = False
        while not done:
            action = predict_actions(model, np.asarray(obs)[None])[0]
            obs, _, terminated, truncated, _ = env.step(action)
            steps += 1
            done = terminated or truncated
    return time.perf_counter() - started, time.process_time() - cpu_before, steps


def run_batched(subject_name: str, jobs: list[Job], model: object, envs: list[Any]) -> tuple[float, float, int]:
    """All environments in lock-step, one call of the agent's inference function per step, on environments built
    before the timer (as the suite's warm pools)."""
    subject = get_subject(subject_name)
    cpu_before, started = time.process_time(), time.perf_counter()
    outcomes = list(
        run_lockstep(
            lambda: make_env(subject),
            envs,
            jobs,
            lambda o: predict_actions(model, o),
            lambda: TraceRecorder(subject, SIGNALS),
        )
    )
    return time.perf_counter() - started, time.process_time() - cpu_before, sum(o.steps for o in outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=256, help="episodes per way (default 256)")
    parser.add_argument("--parallelism", type=int, default=64, help="environments in lock-step (default 64)")
    parser.add_argument("--model-root", type=Path, default=DEFAULT_MODEL_ROOT, help="zoo folder (default: bundled)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=Path, help="sample the services with py-spy during the suite run")
    parser.add_argument("--subject", default="cartpole", help="subject of every episode (default cartpole)")
    parser.add_argument("--model", help="zoo model under test (default: the zoo's first model of the subject)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="campaigns per suite way, one after another on one suite, and batched loops; each way's time is their "
        "median (default 3; the naive loop runs once)",
    )
    args = parser.parse_args()
    models = yaml.safe_load((args.model_root / "manifest.yaml").read_text())["models"]
    name = args.model or next((m for m, e in models.items() if e["subject"] == args.subject), None)
    if name not in models or models[name]["subject"] != args.subject:
        known = ", ".join(m for m, e in models.items() if e["subject"] == args.subject) or "none"
        parser.error(f"--model: no zoo model {name!r} for subject {args.subject!r} (its models: {known})")

    import torch

    torch.set_num_threads(1)  # the agent service runs with one thread too
    config = CampaignConfig(
        name="bench",
        subject=args.subject,
        model=name,
        seed=args.seed,
        budget={"max_executions": args.episodes},
        batch_size=args.episodes,
        parallelism=args.parallelism,
    )
    # the same test cases and episode seeds the campaign will use
    space = get_subject(args.subject).space
    asked = make_strategy("random", space, strategy_seed(args.seed)).ask(args.episodes)
    values = [a.values if isinstance(a, TestCase) else a for a in asked]
    jobs = [Job(f"t{i + 1:07d}", v, episode_seed(args.seed, f"t{i + 1:07d}")) for i, v in enumerate(values)]
    model = ModelRegistry(args.model_root).load(name)  # loaded as the agent service loads it

    record_name = "throughput" if args.subject == "cartpole" else f"throughput_{args.subject}"
    with BenchRecord(record_name) as record:
        repeats = args.repeats
        ways: dict[str, Way] = {}
        wall, cpu, steps, _, _ = run_suite(config, args.model_root, pipeline=1, repeats=repeats)
        ways["one_group"] = Way("suite, one group", wall, cpu, steps)
        wall, cpu, steps, _, _ = run_suite(config, args.model_root, pipeline=2, repeats=repeats, lanes=False)
        ways["actstream"] = Way("suite, 2 groups over ActStream", wall, cpu, steps)
        wall, cpu, steps, memory, by_process = run_suite(config, args.model_root, 2, repeats, profile=args.profile)
        ways["suite"] = Way("suite (2 groups, lane)", wall, cpu, steps)
        naive = run_naive(args.subject, jobs, model)
        ways["naive"] = Way("naive (one observation a step)", [naive[0]], [naive[1]], naive[2])
        subject = get_subject(args.subject)
        envs = [make_env(subject) for _ in range(args.parallelism)]  # outside the timer, reused by every repeat
        batched = [run_batched(args.subject, jobs, model, envs) for _ in range(repeats)]
        ways["batched"] = Way("batched in process", [b[0] for b in batched], [b[1] for b in batched], batched[0][2])
        for env in envs:
            env.close()
        step_counts = {key: way.steps for key, way in ways.items()}
        if len(set(step_counts.values())) != 1:
            print(f"warning: step counts differ: {step_counts}")

        n = args.episodes
        m = record.metrics
        m.update(episodes=n, parallelism=args.parallelism, repeats=repeats, suite_groups=2)
        print(f"{n} episodes, {args.parallelism} environments, {ways['suite'].steps} steps; medians of {repeats} runs")
        head = ("way", "wall s", "CPU s", "episodes/s", "steps/s", "wall s/1k", "CPU s/1k", "cores")
        print(f"{head[0]:32s} " + " ".join(f"{h:>10s}" for h in head[1:]))
        for key, way in ways.items():
            k = way.steps / 1000
            row = {
                "seconds": round(way.seconds, 2),
                "cpu_seconds": round(way.cpu_seconds, 2),
                "episodes_per_s": round(n / way.seconds, 1),
                "steps_per_s": round(way.steps / way.seconds),
                "wall_s_per_1k_steps": round(way.seconds / k, 3),
                "cpu_s_per_1k_steps": round(way.cpu_seconds / k, 3),
                "cores_used": round(way.cpu_seconds / way.seconds, 2),
            }
            m.update({f"{key}_{field}": value for field, value in row.items()})
            m[f"{key}_steps"] = way.steps
            print(
                f"{way.label:32s} {row['seconds']:10.2f} {row['cpu_seconds']:10.2f} {row['episodes_per_s']:10.1f} "
                f"{row['steps_per_s']:10d} {row['wall_s_per_1k_steps']:10.3f} {row['cpu_s_per_1k_steps']:10.3f} "
                f"{row['cores_used']:10.2f}"
            )
        parts = []
        for key, way in ways.items():
            for i, (w, c) in enumerate(zip(way.wall, way.cpu, strict=True)):
                m[f"{key}_run{i + 1}_seconds"] = round(w, 2)
                m[f"{key}_run{i + 1}_cpu_seconds"] = round(c, 2)
            parts.append(f"{key} " + " ".join(f"{w:.2f}/{c:.2f}" for w, c in zip(way.wall, way.cpu, strict=True)))
        print("each run (wall s/CPU s): " + "; ".join(parts))
        for service in PROFILED if args.profile else ():
            print("\n".join(flame_summary(args.profile / f"{service}.txt")))
        shares = {k: round(1000 * v / (repeats * ways["suite"].steps), 3) for k, v in by_process.items()}
        m.update({f"suite_cpu_s_per_1k_steps_{k}": v for k, v in shares.items()})
        print("suite's CPU s per 1k steps by process: " + ", ".join(f"{k} {v:.3f}" for k, v in shares.items()))
        m.update({f"peak_rss_mib_{k}": round(v) for k, v in memory.items()})
        print("peak resident memory per service (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in memory.items()))

        def ratios(key: str) -> tuple[float, float, float]:
            suite = ways[key]
            return (
                round(ways["naive"].seconds / suite.seconds, 2),
                round(ways["batched"].seconds / suite.seconds, 2),
                # CPU per step, batched over suite (steps may differ by a warning's worth)
                round((ways["batched"].cpu_seconds / ways["batched"].steps) / (suite.cpu_seconds / suite.steps), 2),
            )

        for key, label in (("one_group", "one group"), ("actstream", "over ActStream"), ("suite", "throughput")):
            a, b, c = ratios(key)
            prefix = "" if key == "suite" else f"{key}_"
            m.update({f"{prefix}suite_over_naive": a, f"{prefix}suite_over_batched": b})
            m[f"{prefix}cpu_suite_over_batched"] = c
            print(f"{label}: suite/naive={a:.2f} suite/batched={b:.2f} cpu_suite/batched={c:.2f}")
        record.details.update(subject=args.subject, model=name, seed=args.seed, profile=bool(args.profile))


if __name__ == "__main__":
    main()
