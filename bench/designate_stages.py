"""Evaluations per second of a DESIGNATE campaign through the suite, against an in-process loop of the same stages.

One DESIGNATE campaign (NSGA-II, population 12: one generation is one lock-step of 12 poses) runs on a fresh local
suite (oracle, agent, translator, simulator, generator; BLAS/OpenMP threads pinned to one, no GPU) after a small
warm-up campaign that loads the models and fills the simulator's environment pool. Then the very poses the
campaign evaluated, in the same lock-steps of 12, run through the same code in this one process (no gRPC, one
torch thread), timing each stage:

* render    the simulator's RGB image and ground truth (subjects/urban/backend.py);
* translate the label maps to realistic images (translator_service: one batched call per lock-step);
* segment   the DNN on the simulator images AND on the realistic ones (agent_service/segmentation.py: one batch
            of 2 x 12 images, as the simulator's image stage sends it in one Act);
* features  the DNN encoder's feature vectors of the realistic images (the Embed RPC's work, one per lock-step);
* oracle    IoU_car / mIoU with the relevance rules (subjects/urban/oracle.py).

Through the suite each stage is one process, so its cost there is that process's CPU time per evaluation (user +
system from /proc/<pid>/stat): simulator = render plus the image stage's marshalling, translator = translate,
agent = segment + features, oracle = oracle, generator = the strategy and the store. The agent's metrics give
its Act calls per lock-step (1: the lock-step group is one batched call, not one per image) and images per call.

It also prints the in-process loop's CPU time, and CPU per evaluation in process / suite: on a machine loaded by
other work the suite's several processes win a larger share of the cores than the one in-process loop, which the
wall-time ratio counts in the suite's favour; the CPU ratio does not.

Only evaluations that ran count (an input the subject declares invalid is recorded without running), the same
number both ways. Writes results/bench/designate_stages.json (bench/results.py) and ends with

    designate_stages: suite/in_process=<suite evaluations per second / in-process evaluations per second>

    python bench/designate_stages.py [--subject urban|mars] [--generations 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import torch
import yaml

from agent_service.api import SegmentationModel
from bench.harness import PINNED_ENVIRONMENT, campaign_executions, cpu_seconds, run_campaign
from bench.results import BenchRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2_grpc
from common.server import client_channel
from common.space import case_values
from generator_service.api import CampaignConfig
from oracle_service.api import Episode, get_oracle
from simulator_service.api import get_subject, make_env
from translator_service.api import translate

STAGES = ("render", "translate", "segment", "features", "oracle")
POPULATION = 12  # DESIGNATE's N (Table I): one generation is one lock-step of this many poses
SEEDING = 5  # r, random populations evaluated before the first generation
# each stage's process in the suite (its CPU time per evaluation is that stage's cost there)
PROCESSES = {
    "simulator": "render",
    "translator": "translate",
    "agent": "segment + features",
    "oracle": "oracle",
    "generator": "strategy, store",
}
ORACLES = {"urban": "iou_car", "mars": "miou"}


def metric(service_metrics_port: int, name: str) -> float:
    """The sum over labels of one Prometheus counter (or a histogram's _count / _sum) a service exposes."""
    with urllib.request.urlopen(f"http://127.0.0.1:{service_metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(text))


def campaign(subject: str, name: str, seed: int, seed_populations: int, generations: int) -> CampaignConfig:
    evaluations = (seed_populations + generations) * POPULATION
    return CampaignConfig.model_validate(
        {
            "name": name,
            "subject": subject,
            "model": f"segnet-{subject}",
            "strategy": "designate",
            "strategy_params": {"seed_populations": seed_populations, "generations": generations},
            "oracle": ORACLES[subject],
            "seed": seed,
            "budget": {"max_executions": evaluations},
            "batch_size": seed_populations * POPULATION,  # the seeding phase in one ask; a generation asks 12
            "parallelism": POPULATION,
        }
    )


def through_suite(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the warm-up and the timed campaign; returns wall seconds, the evaluated poses (lock-step order) and
    per-process CPU seconds and the agent's call counts during the timed one."""
    os.environ.update(PINNED_ENVIRONMENT)  # the services inherit this process's environment
    roles = frozenset({"oracle", "agent", "translator", "simulator", "generator"})
    with tempfile.TemporaryDirectory(prefix="gauntlet-designate-") as tmp:
        with LocalSuite(
            store_url=f"sqlite:///{tmp}/bench.db",
            log_dir=Path(tmp) / "logs",
            report_root=Path(tmp) / "reports",
            artifact_root=Path(tmp),
            roles=roles,
        ) as local:
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            run_campaign(gen, campaign(args.subject, "designate-warmup", args.seed + 1, 1, 1))
            pids = {name: s.process.pid for name, s in local.services.items()}
            agent_metrics = local.services["agent"].metrics_port
            simulator_metrics = local.services["simulator"].metrics_port
            steps_before = metric(simulator_metrics, "gauntlet_simulator_act_wait_seconds_count")
            calls_before = metric(agent_metrics, "gauntlet_agent_act_seconds_count")
            images_before = metric(agent_metrics, "gauntlet_agent_observations_total")
            before = {name: cpu_seconds([pid]) for name, pid in pids.items()}
            started = time.perf_counter()
            status = run_campaign(gen, campaign(args.subject, "designate", args.seed, SEEDING, args.generations))
            seconds = time.perf_counter() - started
            cpu = {name: cpu_seconds([pid]) - before[name] for name, pid in pids.items()}
            calls = metric(agent_metrics, "gauntlet_agent_act_seconds_count") - calls_before
            lock_steps = metric(simulator_metrics, "gauntlet_simulator_act_wait_seconds_count") - steps_before
            images = metric(agent_metrics, "gauntlet_agent_observations_total") - images_before
            rows = campaign_executions(gen, status.campaign_id)
    ran = [dict(case_values(r.test_case)) for r in rows if r.steps > 0]  # invalid inputs are recorded unrun
    return {
        "seconds": seconds,
        "poses": ran,
        "cpu": cpu,
        "act_calls": calls,
        "images": images,
        "lock_steps": lock_steps,
    }


def in_process(subject_name: str, poses: list[dict[str, Any]]) -> tuple[dict[str, float], float]:
    """Seconds per stage for `poses` in lock-steps of POPULATION, all in this process on one torch thread (a first
    lock-step, not counted, warms up lazy initialisation), and the CPU seconds the counted ones used."""
    torch.set_num_threads(1)
    subject = get_subject(subject_name)
    dnn = SegmentationModel.load(ROOT / "agent_service/zoo" / f"segnet-{subject_name}" / "model.pt")
    root = ROOT / "translator_service/models"
    entry = (yaml.safe_load((root / "manifest.yaml").read_text())["translators"])[f"pix2pix-{subject_name}"]
    generator = torch.jit.load(str(root / f"pix2pix-{subject_name}" / "generator.pt")).eval()
    oracle = get_oracle(ORACLES[subject_name])
    envs: list[Any] = [make_env(subject) for _ in range(POPULATION)]  # image envs: attach_views, signal
    spent = dict.fromkeys(STAGES, 0.0)
    steps = [poses[:POPULATION]] + [poses[i : i + POPULATION] for i in range(0, len(poses), POPULATION)]
    cpu = 0.0
    for n, cases in enumerate(steps):
        used = envs[: len(cases)]
        c0 = time.process_time()
        t0 = time.perf_counter()
        sim = np.stack([env.reset(seed=0, options={"values": case})[0] for env, case in zip(used, cases)])
        maps = np.stack([env.translator_input() for env in used])
        t1 = time.perf_counter()
        realistic = translate(entry, generator, maps)
        t2 = time.perf_counter()
        predictions = dnn.segment(np.concatenate([sim, realistic]))
        t3 = time.perf_counter()
        features = dnn.embed(realistic)
        t4 = time.perf_counter()
        for i, env in enumerate(used):
            env.attach_views(realistic[i], features[i])
            env.step(np.stack([predictions[i], predictions[len(used) + i]]))
            signals = {name: env.signal(name) for name in oracle.required_signals}
            oracle.evaluate(Episode(1, 0.0, True, False, signals))
        t5 = time.perf_counter()
        if n == 0:
            continue
        cpu += time.process_time() - c0
        for stage, seconds in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            spent[stage] += seconds
    return spent, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", default="urban", choices=["urban", "mars"])
    parser.add_argument(
        "--generations", type=int, default=40, help="NSGA-II generations after the 5 seed populations (1..500)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.generations <= 500:
        parser.error("--generations: in [1, 500]")

    with BenchRecord("designate_stages") as record:
        suite = through_suite(args)
        poses = suite["poses"]
        n = len(poses)
        if n == 0:
            raise SystemExit("the campaign evaluated no valid pose")
        local, local_cpu = in_process(args.subject, poses)
        suite_rate = n / suite["seconds"]
        local_seconds = sum(local.values())
        local_rate = n / local_seconds
        per_call = suite["images"] / suite["act_calls"] if suite["act_calls"] else 0.0
        lock_steps = suite["lock_steps"]
        load = os.getloadavg()[0]

        print(
            f"DESIGNATE on {args.subject}, seed {args.seed}: {n} evaluations of valid poses ({SEEDING} seed "
            f"populations + {args.generations} generations of {POPULATION}); one torch/BLAS thread per process"
        )
        print(f"suite:      {suite['seconds']:6.1f} s  {suite_rate:6.1f} evaluations/s")
        for process, stage in PROCESSES.items():
            ms = 1000.0 * suite["cpu"].get(process, 0.0) / n
            print(f"  {f'{process} ({stage})':<32}{ms:7.2f} CPU ms per evaluation")
        suite_cpu_ms = 1000.0 * sum(suite["cpu"].values()) / n
        print(f"  {'all processes':<32}{suite_cpu_ms:7.2f} CPU ms per evaluation")
        print(
            f"  agent Act calls: {suite['act_calls']:.0f} for the simulator's {lock_steps:.0f} lock-steps of up to "
            f"{POPULATION} poses ({per_call:.1f} images per call)"
        )
        print(f"in process: {local_seconds:6.1f} s  {local_rate:6.1f} evaluations/s")
        local_cpu_ms = 1000.0 * local_cpu / n
        print(f"  {'CPU time':<32}{local_cpu_ms:7.2f} CPU ms per evaluation")
        for stage in STAGES:
            print(f"  {stage:<32}{1000.0 * local[stage] / n:7.2f} ms per evaluation")
        ratio = suite_rate / local_rate
        print(
            f"CPU per evaluation, in process / suite: {local_cpu_ms / suite_cpu_ms:.2f}; load average (1 min) "
            f"{load:.1f} on {len(os.sched_getaffinity(0))} cores"
        )
        record.metrics.update(
            {
                "suite_over_in_process": round(ratio, 2),
                # the settings and conditions the output states, so every printed number is in this file
                "seed_populations": SEEDING,
                "generations": args.generations,
                "population": POPULATION,
                "suite_seconds": round(suite["seconds"], 1),
                "in_process_seconds": round(local_seconds, 1),
                "load_average_1min": round(load, 1),
                "cores": len(os.sched_getaffinity(0)),
                "cpu_in_process_over_suite": round(local_cpu_ms / suite_cpu_ms, 2),
                "evaluations": n,
                "suite_evaluations_per_s": round(suite_rate, 1),
                "in_process_evaluations_per_s": round(local_rate, 1),
                "suite_cpu_ms_per_evaluation": round(suite_cpu_ms, 2),
                "in_process_cpu_ms_per_evaluation": round(local_cpu_ms, 2),
                "act_calls": int(suite["act_calls"]),
                "lock_steps": int(lock_steps),
                "images_per_act_call": round(per_call, 1),
                **{f"in_process_{s}_ms": round(1000.0 * local[s] / n, 2) for s in STAGES},
                **{f"suite_{p}_cpu_ms": round(1000.0 * suite["cpu"].get(p, 0.0) / n, 2) for p in PROCESSES},
            }
        )
        record.details.update(
            {
                "subject": args.subject,
                "generations": args.generations,
                "seed": args.seed,
                "suite_seconds": round(suite["seconds"], 2),
                "in_process_seconds": round(local_seconds, 2),
                "suite_cpu_s": {k: round(v, 2) for k, v in suite["cpu"].items()},
            }
        )
    print(f"designate_stages: suite/in_process={ratio:.2f}")


if __name__ == "__main__":
    main()
