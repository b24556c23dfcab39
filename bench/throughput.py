"""Episode throughput on a subject (CartPole by default), measured three ways side by side on the same test cases.

1. suite:   a campaign through the services (generator -> simulator -> agent, oracle), with 64
            environments in lock-step, as the suite runs by default: two pipelined groups of 32, each one
            batched call per step, over a same-host lane (the agent runs on this host); also shown: one group
            of 64 (`--pipeline 1`), and the two groups over gRPC's ActStream (`--agent-lanes off`, the path
            between hosts);
2. naive:   the seed tools' loop, in process: one env, `model.predict` one step at a time;
3. batched: in process, 64 environments in lock-step, one batched `model.predict` per step.

Each suite way runs --repeats campaigns (default 3) one after another on one fresh suite, and the batched loop
runs as many times; a way's time is the median, and every run's time is printed too (the first campaign of a
suite includes its warm-up: environments built, streams opened). The naive loop runs once (half a minute).
Ends with `throughput: suite/naive=<x> suite/batched=<y>` (ratios of episodes per second)
and prints each service's peak resident memory.

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
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_service.api import DEFAULT_MODEL_ROOT, algorithm_class
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


def run_suite(
    config: CampaignConfig,
    model_root: Path,
    pipeline: int,
    repeats: int,
    lanes: bool = True,
    profile: Path | None = None,
) -> tuple[list[float], int, dict[str, float]]:
    """Seconds of `repeats` campaigns with the same spec, one after another on one fresh suite."""
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
            profilers = start_profilers(pids, profile) if profile else []
            seconds = []
            for _ in range(repeats):
                started = time.perf_counter()
                cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
                status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
                seconds.append(time.perf_counter() - started)
            stop_profilers(profilers)
            memory = {name: peak_rss_mb(s.process.pid) for name, s in local.services.items()}
    return seconds, int(status.steps), memory


def run_naive(subject_name: str, jobs: list[Job], model: object) -> tuple[float, int]:
    subject = get_subject(subject_name)
    env = make_env(subject)
    steps = 0
    started = time.perf_counter()
    for job in jobs:
        obs, _ = env.reset(seed=job.seed, options={"values": job.values})
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)  # type: ignore[attr-defined]
            obs, _, terminated, truncated, _ = env.step(action)
            steps += 1
            done = terminated or truncated
    return time.perf_counter() - started, steps


def run_batched(subject_name: str, jobs: list[Job], model: object, parallelism: int) -> tuple[float, int]:
    subject = get_subject(subject_name)
    started = time.perf_counter()
    outcomes = list(
        run_lockstep(
            lambda: make_env(subject),
            [make_env(subject) for _ in range(parallelism)],
            jobs,
            lambda o: model.predict(o, deterministic=True)[0],  # type: ignore[attr-defined]
            lambda: TraceRecorder(subject, SIGNALS),
        )
    )
    return time.perf_counter() - started, sum(o.steps for o in outcomes)


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
    model = algorithm_class(models[name]["algorithm"]).load(args.model_root / name / "model.zip", device="cpu")

    repeats = args.repeats
    single_all, _, _ = run_suite(config, args.model_root, pipeline=1, repeats=repeats)
    grpc_all, _, _ = run_suite(config, args.model_root, pipeline=2, repeats=repeats, lanes=False)
    suite_all, suite_steps, memory = run_suite(config, args.model_root, 2, repeats, profile=args.profile)
    naive_s, naive_steps = run_naive(args.subject, jobs, model)
    batched = [run_batched(args.subject, jobs, model, args.parallelism) for _ in range(repeats)]
    batched_all, batched_steps = [b[0] for b in batched], batched[0][1]
    single_s, grpc_s, suite_s, batched_s = map(statistics.median, (single_all, grpc_all, suite_all, batched_all))
    if not suite_steps == naive_steps == batched_steps:
        print(f"warning: step counts differ (suite {suite_steps}, naive {naive_steps}, batched {batched_steps})")

    n = args.episodes
    rows = [
        ("suite (64 envs, 2 groups, lane)", suite_s, suite_steps),
        ("suite, one group (1 call per step)", single_s, suite_steps),
        ("suite, 2 groups over ActStream", grpc_s, suite_steps),
        ("naive (predict per step)", naive_s, naive_steps),
        ("batched in process", batched_s, batched_steps),
    ]
    print(f"{'way':34s} {'seconds':>8s} {'episodes/s':>11s} {'steps/s':>10s}")
    for name, seconds, steps in rows:
        print(f"{name:34s} {seconds:8.2f} {n / seconds:11.1f} {steps / seconds:10.0f}")
    runs = {"suite": suite_all, "one group": single_all, "ActStream": grpc_all, "batched": batched_all}
    print("each run (s): " + "; ".join(f"{k} " + " ".join(f"{t:.2f}" for t in v) for k, v in runs.items()))
    for name in PROFILED if args.profile else ():
        print("\n".join(flame_summary(args.profile / f"{name}.txt")))
    print("peak resident memory per service (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in memory.items()))
    print(f"one group: suite/naive={naive_s / single_s:.2f} suite/batched={batched_s / single_s:.2f}")
    print(f"over ActStream: suite/naive={naive_s / grpc_s:.2f} suite/batched={batched_s / grpc_s:.2f}")
    print(f"throughput: suite/naive={naive_s / suite_s:.2f} suite/batched={batched_s / suite_s:.2f}")


if __name__ == "__main__":
    main()
