"""How often a zoo agent fails as its subject's input domain is widened: the measurement behind a widened subject.

Indago ("Testing of Deep Reinforcement Learning Agents with Surrogate Models", Sec. 5) tests Humanoid on
offsets of ±0.03 around the standing pose, wider than Gymnasium's reset noise, so that random inputs fail
rarely but not never. For a subject whose parameters are offsets centred on 0 (the MuJoCo pose offsets), this
sets every real parameter's bounds to [-w, w] for each candidate width w, runs `--tests` uniform random inputs
of that domain in process (the subject's oracle, the manifest's episode-seed rule), and writes the failure rate
with its Wilson 95 % interval per width to `--out`, with the command that made it.

    python replications/domain_width.py hopper-ppo --widths 0.075 0.1 0.125 0.15 --tests 300 \\
        --out results/domain_width_hopper.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_service.api import DEFAULT_MODEL_ROOT, ModelRegistry
from analysis_service.api import wilson_interval
from common.errors import NotFound
from common.space import ParameterSpace
from offline.evaluation import evaluate_policy
from simulator_service.api import Subject, get_subject


def widened(subject: Subject, width: float) -> Subject:
    """`subject` with every real parameter's bounds set to [-width, width]; refuses offsets not centred on 0."""
    if not width > 0:
        raise ValueError(f"width must be > 0, got {width}")
    params = []
    for p in subject.space.parameters:
        if p.kind != "real" or p.low is None or p.high is None or p.low != -p.high:
            raise ValueError(
                f"subject {subject.name}: parameter {p.name!r} is not a real offset centred on 0 "
                f"({p.domain_text()}); only such domains are widened"
            )
        params.append(dataclasses.replace(p, low=-width, high=width))
    return dataclasses.replace(subject, space=ParameterSpace(tuple(params), subject.space.constraints))


def write(out: Path, subject: str, args: argparse.Namespace, rows: list[dict[str, object]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": "python " + shlex.join(["replications/domain_width.py", *sys.argv[1:]]),
        "model": args.model,
        "subject": subject,
        "seed": args.seed,
        "widths": rows,
    }
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    partial.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a zoo model (gauntlet models)")
    parser.add_argument("--subject", help="subject whose domain is widened (default: the model's)")
    parser.add_argument("--widths", type=float, nargs="+", required=True, help="half-widths w of [-w, w] to try")
    parser.add_argument("--tests", type=int, default=300, help="uniform random inputs per width (default 300)")
    parser.add_argument("--seed", type=int, default=100000, help="seed of the draws and episodes (the manifest's)")
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    args = parser.parse_args()
    if args.tests < 1:
        parser.error(f"--tests must be at least 1, got {args.tests}")
    registry = ModelRegistry(DEFAULT_MODEL_ROOT)
    try:
        entry = registry.entry(args.model)
        registry.load(args.model)
        base = get_subject(args.subject or entry.subject)
        subjects = [(w, widened(base, w)) for w in args.widths]
    except (NotFound, KeyError, ValueError) as err:
        parser.error(str(err.args[0]) if err.args else str(err))
    rows = []
    for width, subject in subjects:
        started = time.time()
        ev = evaluate_policy(subject, lambda obs: registry.act(args.model, obs), args.tests, args.seed)
        judged = ev.tests - ev.errors
        low, high = wilson_interval(ev.failures, judged) if judged else (float("nan"), float("nan"))
        row = {
            "width": width,
            "tests": ev.tests,
            "errors": ev.errors,
            "failures": ev.failures,
            "failure_rate": round(ev.failures / judged, 5) if judged else None,
            "failure_rate_ci95": [round(low, 5), round(high, 5)],
            "wall_seconds": round(time.time() - started, 1),
        }
        rows.append(row)
        write(args.out, base.name, args, rows)  # after each width: a killed sweep keeps what it measured
        print(
            f"±{width:g}: {ev.failures} of {judged} fail = {100 * (row['failure_rate'] or 0):.2f} % "
            f"[{100 * low:.2f}, {100 * high:.2f}] ({row['wall_seconds']} s)",
            flush=True,
        )
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
