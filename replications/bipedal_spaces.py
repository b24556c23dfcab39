"""Grid edges for the QD paper's four BipedalWalker behaviour spaces (RQ3), measured on our walker.

The QD fault-diversity paper's RQ3 compares four descriptor pairs (Gupta et al. 2020's features; the authors'
EXPERT_INDICES: distance/hull angle, torque/jump, the hip angles, the hip speeds) on a 50x50 grid each. The paper
gives no edges; the authors' code precomputed them for their faster TQC walker (Distance [9.05, 15.76], Hull angle
[0.0406, 0.3636], Torque [1.569, 2.634], Jump [0.00334, 0.428] for their "both legs in contact" jump). Our walker and
our jump (both legs off the ground, the paper's wording) differ, so this replays uniform random inputs with the zoo
agent in this process, computes the 12 episode-mean features exactly as the oracles do
(subjects/bipedal/oracle.py's bipedal_features), and proposes edges: the random tests' range widened by 20 % of it
on each side (the main space's Distance edges [6.0, 10.0] widen 6.53..9.38 by about as much) but never past a
feature's own range (an absolute value or a fraction is >= 0), rounded outwards.
Writes results/bipedal_spaces.{md,json}:

    python replications/bipedal_spaces.py --inputs 100 --seed 11
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from replications.bipedal_reach import MODEL, Walker
from subjects.bipedal.oracle import BIPEDAL_FEATURES, BIPEDAL_PAIRS, bipedal_features

ROOT = Path(__file__).resolve().parent.parent
PAD = 0.2  # share of the observed range added on each side
# Features that cannot leave a range (absolute values, a fraction of steps, four clipped torques): edges stop there.
DOMAIN = {"distance": (0.0, math.inf), "hull_angle": (0.0, math.inf), "torque": (0.0, 4.0), "jump": (0.0, 1.0)}


def episode_features(walker: Walker, codes: list[int]) -> tuple[dict[str, float], bool]:
    """One deterministic episode's 12 features (as the oracle computes them) and whether it failed."""
    names = walker.subject.space.names
    obs, _ = walker.env.reset(seed=0, options={"values": dict(zip(names, codes))})
    base = walker.env.unwrapped
    observations, actions, xs = [], [], []
    terminated = truncated = False
    while not (terminated or truncated):
        action, _ = walker.model.predict(obs, deterministic=True)
        observations.append(np.asarray(obs, dtype=float))
        actions.append(np.asarray(action, dtype=float))
        obs, _, terminated, truncated, _ = walker.env.step(action)
        xs.append(float(base.hull.position[0]))  # type: ignore[attr-defined]
    failed = bool(base.game_over) or (terminated and xs[-1] < 0)  # type: ignore[attr-defined]
    return bipedal_features(np.asarray(observations), np.asarray(actions), np.asarray(xs)), failed


def _round_out(lo: float, hi: float) -> tuple[float, float]:
    """Edges rounded outwards to 3 significant digits of the span, so the table prints them exactly."""
    span = hi - lo
    if span <= 0:  # a constant feature: a unit-free small window around it
        span = max(abs(lo), 1e-3)
        lo, hi = lo - span / 2, hi + span / 2
    step = 10.0 ** (math.floor(math.log10(span)) - 2)
    return math.floor(lo / step) * step, math.ceil(hi / step) * step


def measure(inputs: int, seed: int, model: str) -> dict[str, Any]:
    walker = Walker(model)
    space = walker.subject.space
    lows = [int(space[n].bounds[0]) for n in space.names]
    highs = [int(space[n].bounds[1]) for n in space.names]
    rng = np.random.default_rng(seed)
    draws = [[int(rng.integers(lo, hi + 1)) for lo, hi in zip(lows, highs)] for _ in range(inputs)]
    started = time.process_time()
    episodes = [episode_features(walker, codes) for codes in draws]
    stats: dict[str, dict[str, float]] = {}
    for name in BIPEDAL_FEATURES:
        values = np.asarray([f[name] for f, _ in episodes])
        lo, hi = float(values.min()), float(values.max())
        floor, ceiling = DOMAIN.get(name, (-math.inf, math.inf))
        edge_lo, edge_hi = _round_out(max(floor, lo - PAD * (hi - lo)), min(ceiling, hi + PAD * (hi - lo)))
        stats[name] = {
            "min": lo,
            "max": hi,
            "p5": float(np.percentile(values, 5)),
            "p95": float(np.percentile(values, 95)),
            "edge_low": round(edge_lo, 10),
            "edge_high": round(edge_hi, 10),
        }
    return {
        "model": model,
        "inputs": inputs,
        "seed": seed,
        "pad": PAD,
        "failures": sum(failed for _, failed in episodes),
        "features": stats,
        "pairs": {k or "distance_hull": list(v) for k, v in BIPEDAL_PAIRS.items()},
        "cpu_seconds": round(time.process_time() - started, 1),
    }


def render(m: dict[str, Any], command: str) -> str:
    lines = [
        f"Episode-mean features of the `{m['model']}` walker over {m['inputs']} uniform random inputs (seed "
        f"{m['seed']}; {m['failures']} failed), and the grid edges they give (range widened by "
        f"{m['pad']:.0%} of it on each side, rounded outwards)",
        "",
        "| feature | min | p5 | p95 | max | edges |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in m["features"].items():
        lines.append(
            f"| {name} | {s['min']:.4g} | {s['p5']:.4g} | {s['p95']:.4g} | {s['max']:.4g} | "
            f"[{s['edge_low']:g}, {s['edge_high']:g}] |"
        )
    lines += ["", f"Command: `{command}`; {m['cpu_seconds']} CPU s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=100, help="random inputs to replay (2..10000)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    if not 2 <= args.inputs <= 10_000 or args.seed < 0:
        raise SystemExit("error: --inputs must be in 2..10000 and --seed >= 0")
    m = measure(args.inputs, args.seed, args.model)
    command = f"python replications/bipedal_spaces.py --inputs {args.inputs} --seed {args.seed}" + (
        f" --model {args.model}" if args.model != MODEL else ""
    )
    text = render(m, command)
    print(text)
    args.out.mkdir(exist_ok=True)
    (args.out / "bipedal_spaces.md").write_text(text + "\n")
    (args.out / "bipedal_spaces.json").write_text(json.dumps({"command": command, **m}, indent=1) + "\n")


if __name__ == "__main__":
    main()
