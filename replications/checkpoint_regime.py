"""Failure rate on uniform random inputs of each checkpoint of one training run: where an agent's regime lies.

The QD fault-diversity replication needs an agent that random inputs make fail a few per cent of the time (the
paper's regime); the fully trained `lunarlander-qd-ppo` fails on 0.1 %, which leaves the fault counts without
power. A training run keeps checkpoints (`gauntlet train NAME --out DIR`: DIR/checkpoints/ckpt_<steps>_steps.zip);
this runs `--tests` uniform random inputs (offline/evaluation.py's evaluate_policy, drawn from `--seed`: the same
inputs for every checkpoint) on each checkpoint in process and writes results/<subject>_regime.{md,json} with
Wilson 95 % intervals:

    gauntlet train lunarlander-qd-ppo --timesteps 500000 --checkpoint-every 100000 --out runs/zoo/llqd-500k
    python replications/checkpoint_regime.py --subject lunarlander_qd --tests 1000 \\
        --checkpoints runs/zoo/llqd-500k/checkpoints/ckpt_*_steps.zip runs/zoo/llqd-500k/model.zip
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_service.api import algorithm_class, predict_actions
from analysis_service.api import wilson_interval
from offline.evaluation import evaluate_policy
from simulator_service.api import get_subject

ROOT = Path(__file__).resolve().parent.parent


def steps_of(path: Path) -> int | None:
    """The step count in a checkpoint's name (ckpt_<steps>_steps.zip); None for the run's final model.zip."""
    found = re.search(r"_(\d+)_steps", path.name)
    return int(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--algorithm", default="PPO", help="the checkpoints' Stable-Baselines3 algorithm")
    parser.add_argument("--checkpoints", type=Path, nargs="+", required=True)
    parser.add_argument("--tests", type=int, default=1000, help="random inputs per checkpoint (1..100000)")
    parser.add_argument("--seed", type=int, default=100000, help="seed of the input draws (the manifest's)")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    if not 1 <= args.tests <= 100_000 or args.seed < 0:
        raise SystemExit("error: --tests must be in 1..100000 and --seed >= 0")
    missing = [str(p) for p in args.checkpoints if not p.is_file()]
    if missing:
        raise SystemExit(f"error: --checkpoints: no such file: {', '.join(missing)}")
    subject = get_subject(args.subject)
    cls = algorithm_class(args.algorithm)
    rows: list[dict[str, Any]] = []
    for path in sorted(args.checkpoints, key=lambda p: (steps_of(p) is None, steps_of(p) or 0)):
        model = cls.load(str(path), device="cpu")
        started = time.process_time()
        ev = evaluate_policy(subject, partial(predict_actions, model), args.tests, args.seed)
        low, high = wilson_interval(ev.failures, ev.tests - ev.errors)
        rows.append(
            {
                "checkpoint": str(path),
                "steps": steps_of(path),
                "tests": ev.tests,
                "failures": ev.failures,
                "errors": ev.errors,
                "failure_rate": ev.failures / max(ev.tests - ev.errors, 1),
                "ci95": [low, high],
                "cpu_seconds": round(time.process_time() - started, 1),
            }
        )
        print(f"{path}: {ev.failures}/{ev.tests} failures", flush=True)
    command = (
        f"python replications/checkpoint_regime.py --subject {args.subject} --tests {args.tests} --seed {args.seed}"
        f" --checkpoints {' '.join(r['checkpoint'] for r in rows)}"
        + (f" --algorithm {args.algorithm}" if args.algorithm != "PPO" else "")
    )
    lines = [
        f"Failure rate of each checkpoint on `{args.subject}`: {args.tests} uniform random inputs each "
        f"(seed {args.seed}), Wilson 95 % interval",
        "",
        "| checkpoint | steps | failures | rate | 95 % interval |",
        "|---|---|---|---|---|",
        *(
            f"| {Path(r['checkpoint']).name} | {r['steps'] if r['steps'] is not None else 'final'} | "
            f"{r['failures']}/{r['tests']} | {100 * r['failure_rate']:.1f} % | "
            f"{100 * r['ci95'][0]:.1f}–{100 * r['ci95'][1]:.1f} % |"
            for r in rows
        ),
        "",
        f"Command: `{command}`; {sum(r['cpu_seconds'] for r in rows):.0f} CPU s.",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(exist_ok=True)
    (args.out / f"{args.subject}_regime.md").write_text(text + "\n")
    (args.out / f"{args.subject}_regime.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
