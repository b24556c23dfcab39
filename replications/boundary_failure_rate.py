"""How much more often a zoo agent fails on the boundary of its input domain than on uniform inputs.

PRT's prior for a parameter with a `boundary` hint maps random tests towards that parameter's ends, so PRT's
advantage over random testing on a subject is bounded by how concentrated the agent's failures are there.
This draws `--tests` inputs uniformly on the boundary (one parameter, chosen at random, set to its low or high
end; the others uniform), runs them in-process with the subject's oracle, and prints their failure rate beside
the manifest's uniform-input rate, with Wilson 95 % intervals.

    python replications/boundary_failure_rate.py lunarlander-continuous-ppo --tests 2000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from agent_service.api import DEFAULT_MODEL_ROOT, ModelRegistry
from analysis_service.api import wilson_interval
from common.errors import NotFound
from common.space import ParamValue
from offline.evaluation import run_test_cases
from simulator_service.api import Subject, get_subject


def boundary_cases(subject: Subject, tests: int, seed: int) -> list[dict[str, ParamValue]]:
    """`tests` inputs with one parameter at an end of its range, the others uniform (numeric spaces only)."""
    params = subject.space.parameters
    if not subject.space.is_box():
        raise SystemExit(f"error: subject {subject.name} has non-numeric parameters; boundaries need a box")
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(tests):
        values = subject.space.sample(rng)
        edge = params[int(rng.integers(len(params)))]
        values[edge.name] = edge.low if rng.random() < 0.5 else edge.high
        cases.append(values)
    return cases


def _rate(failures: int, judged: int) -> str:
    if judged == 0:
        return "no input was judged (every episode errored)"
    low, high = wilson_interval(failures, judged)
    return (
        f"{failures} failures in {judged} inputs = {100 * failures / judged:.2f} % "
        f"(Wilson 95 % [{100 * low:.2f} %, {100 * high:.2f} %])"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a zoo model (gauntlet models)")
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7, help="seed of the boundary draws and the episodes")
    args = parser.parse_args()
    if args.tests < 1:
        parser.error(f"--tests must be at least 1, got {args.tests}")
    registry = ModelRegistry(DEFAULT_MODEL_ROOT)
    try:
        entry = registry.entry(args.model)
    except NotFound as err:
        parser.error(str(err))
    registry.load(args.model)
    subject = get_subject(entry.subject)
    cases = boundary_cases(subject, args.tests, args.seed)
    ev = run_test_cases(subject, lambda obs: registry.act(args.model, obs), enumerate(cases), args.seed)
    print(f"{args.model} on {subject.name}:")
    print("  boundary: " + _rate(ev.failures, ev.tests - ev.errors) + (f" ({ev.errors} errors)" if ev.errors else ""))
    meta = entry.metadata
    if meta.get("eval_tests"):
        print(
            f"  uniform:  {_rate(int(meta['eval_failures']), int(meta['eval_tests']))} (the manifest's measurement, "
            f"seed {meta.get('eval_seed')})"
        )
    for i in ev.failed_indices[:20]:
        print("  failing:", {k: round(v, 3) if isinstance(v, float) else v for k, v in cases[i].items()})


if __name__ == "__main__":
    main()
