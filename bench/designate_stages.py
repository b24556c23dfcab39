"""Per-stage cost of one DESIGNATE evaluation on this CPU: render, translate, two segmentations, features, oracle.

Runs the very code the services run, in one process (no gRPC), on the urban subject (or `--subject mars`) with the
bundled DNN under test (agent_service/zoo/segnet-<subject>) and translator (translator_service/models/
pix2pix-<subject>): for each of `--batches` batches of `--batch` uniformly drawn valid camera poses it times

* render    the simulator's RGB image and ground truth (subjects/urban/backend.py);
* translate the label maps to realistic images (translator_service/translation.py: one batched call);
* segment   the DNN on the simulator images AND on the realistic ones (agent_service/segmentation.py: one batch
            of 2 x batch images, as the simulator's image stage sends it);
* features  the DNN encoder's feature vectors of the realistic images (the Embed RPC's work);
* oracle    IoU_car / mIoU with the relevance rules (subjects/urban/oracle.py).

The default batch is 12, the population size of DESIGNATE's NSGA-II (one generation = one lock-step).
Prints one line per stage (milliseconds per evaluation, i.e. per image pose) and ends with
    designate_stages: subject=<s> batch=<b> per_evaluation_ms=<total> render=<..> translate=<..> segment=<..>
    features=<..> oracle=<..> load1=<the 1-minute load average while it ran>
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import torch
import yaml

from agent_service.api import SegmentationModel
from oracle_service.api import Episode, get_oracle
from simulator_service.api import get_subject, make_env
from translator_service.api import translate

STAGES = ("render", "translate", "segment", "features", "oracle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subject", default="urban", choices=["urban", "mars"])
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the services' default is 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    subject = get_subject(args.subject)
    dnn = SegmentationModel.load(ROOT / "agent_service/zoo" / f"segnet-{args.subject}" / "model.pt")
    root = ROOT / "translator_service/models"
    entry = (yaml.safe_load((root / "manifest.yaml").read_text())["translators"])[f"pix2pix-{args.subject}"]
    generator = torch.jit.load(str(root / f"pix2pix-{args.subject}" / "generator.pt")).eval()
    oracle = get_oracle(subject.oracle)
    envs = [make_env(subject) for _ in range(args.batch)]
    rng = np.random.default_rng(0)
    spent = dict.fromkeys(STAGES, 0.0)
    evaluations = 0
    for b in range(args.batches + 1):  # batch 0 warms up (lazy initialisation) and is not counted
        cases = [subject.sample(rng) for _ in envs]
        t0 = time.perf_counter()
        sim = np.stack([env.reset(seed=0, options={"values": case})[0] for env, case in zip(envs, cases)])
        maps = np.stack([env.translator_input() for env in envs])
        t1 = time.perf_counter()
        realistic = translate(entry, generator, maps)
        t2 = time.perf_counter()
        predictions = dnn.segment(np.concatenate([sim, realistic]))
        t3 = time.perf_counter()
        features = dnn.embed(realistic)
        t4 = time.perf_counter()
        for i, env in enumerate(envs):
            env.attach_views(realistic[i], features[i])
            env.step(np.stack([predictions[i], predictions[len(envs) + i]]))
            signals = {name: env.signal(name) for name in oracle.required_signals}
            oracle.evaluate(Episode(1, 0.0, True, False, signals))
        t5 = time.perf_counter()
        if b == 0:
            continue
        for stage, seconds in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            spent[stage] += seconds
        evaluations += len(envs)
    per = {stage: 1000.0 * seconds / evaluations for stage, seconds in spent.items()}
    for stage in STAGES:
        print(f"{stage:>10}: {per[stage]:7.2f} ms per evaluation")
    total = sum(per.values())
    parts = " ".join(f"{stage}={per[stage]:.2f}" for stage in STAGES)
    load = os.getloadavg()[0]  # the machine is shared: say how busy it was
    head = f"designate_stages: subject={args.subject} batch={args.batch} per_evaluation_ms={total:.2f}"
    print(f"{head} {parts} load1={load:.1f}")


if __name__ == "__main__":
    main()
