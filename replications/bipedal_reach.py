"""Which obstacle slots the BipedalWalker reaches: replays inputs with the zoo agent and records the hull's x.

The QD replication's BipedalWalker input is 15 obstacle codes, but the bundled walker covers only the first few
slots in the authors' 300 steps, so "distinct faults" over all 15 codes counts inputs that differ only in
obstacles the walker never met. A slot counts as *seen* in an episode when its obstacle starts within the lidar's
range (Gymnasium's LIDAR_RANGE, 5.33) of the hull's x at some step: only then can its code enter the agent's
observations. It counts as *met* when the hull's x passed the obstacle's start. A fault's reachable key is the
codes of the slots its episode saw.

Run alone, it measures the reach over random inputs and whether a code the walker never sees still changes the
verdict (it can: Gymnasium draws the initial push from the terrain's random stream after the whole terrain, and
the number of draws an obstacle takes depends on its kind), and writes results/bipedal_reach.{md,json}:

    python replications/bipedal_reach.py --inputs 200 --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from gymnasium.envs.box2d.bipedal_walker import LIDAR_RANGE

from agent_service.api import ModelRegistry
from simulator_service.api import load_subjects, make_env
from subjects.bipedal.env import ObstacleBipedalWalker

ROOT = Path(__file__).resolve().parent.parent
SUBJECT = "bipedalwalker_obstacles"
MODEL = "bipedalwalker-obstacles-ppo"


@dataclass(frozen=True)
class Reach:
    seen: int  # leading slots whose obstacle started within lidar range of the hull at some step
    met: int  # leading slots whose start the hull's x passed
    failed: bool  # the subject's fault: the hull touched the ground (or the walker left the terrain's left edge)
    max_x: float
    steps: int


class Walker:
    """The subject's env and the zoo agent, in this process (deterministic: a fresh Box2D world every reset)."""

    def __init__(self, model: str = MODEL) -> None:
        self.subject = load_subjects()[SUBJECT]
        self.env = make_env(self.subject)
        self.model = ModelRegistry().load(model)
        self._cache: dict[tuple[int, ...], Reach] = {}

    def reach(self, codes: Sequence[int]) -> Reach:
        key = tuple(int(c) for c in codes)
        if key not in self._cache:
            self._cache[key] = self._walk(key)
        return self._cache[key]

    def _walk(self, codes: tuple[int, ...]) -> Reach:
        obs, _ = self.env.reset(seed=0, options={"values": dict(zip(self.subject.space.names, codes))})
        base = cast(ObstacleBipedalWalker, self.env.unwrapped)
        hull = base.hull
        assert hull is not None  # reset built the walker
        xs = [float(hull.position[0])]
        steps, terminated, truncated = 0, False, False
        while not (terminated or truncated):
            action, _ = self.model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, _ = self.env.step(action)
            xs.append(float(hull.position[0]))
            steps += 1
        starts = base.obstacle_start_x()  # slot order = x order: the terrain is generated left to right
        top = max(xs)
        return Reach(
            seen=sum(s <= top + LIDAR_RANGE for s in starts),
            met=sum(s <= top for s in starts),
            failed=bool(base.game_over) or (terminated and xs[-1] < 0),
            max_x=top,
            steps=steps,
        )


def reachable_key(codes: Sequence[int], reach: Reach) -> tuple[int, ...]:
    """The codes of the slots the episode saw (the terrain cycles the 15 codes when it has more slots)."""
    return tuple(int(codes[i % len(codes)]) for i in range(reach.seen))


def measure(inputs: int, seed: int, model: str) -> dict[str, Any]:
    walker = Walker(model)
    space = walker.subject.space
    lows = [int(space[n].bounds[0]) for n in space.names]
    highs = [int(space[n].bounds[1]) for n in space.names]
    rng = np.random.default_rng(seed)
    draws = [[int(rng.integers(lo, hi + 1)) for lo, hi in zip(lows, highs)] for _ in range(inputs)]
    started = time.process_time()
    reaches = [walker.reach(c) for c in draws]
    # the last code, which no episode saw, moved to the next code of its range: a second episode per input
    flipped = []
    for codes in draws:
        other = list(codes)
        other[-1] = lows[-1] + (codes[-1] - lows[-1] + 1) % (highs[-1] - lows[-1] + 1)
        flipped.append(walker.reach(other))
    last_seen = max(r.seen for r in reaches + flipped)
    return {
        "subject": SUBJECT,
        "model": model,
        "slots": len(space.names),
        "inputs": inputs,
        "seed": seed,
        "lidar_range": LIDAR_RANGE,
        "failures": sum(r.failed for r in reaches),
        "seen_histogram": dict(sorted(Counter(r.seen for r in reaches).items())),
        "met_histogram": dict(sorted(Counter(r.met for r in reaches).items())),
        "seen_histogram_failures": dict(sorted(Counter(r.seen for r in reaches if r.failed).items())),
        "max_x": max(r.max_x for r in reaches),
        "last_code_never_seen": last_seen < len(space.names),
        "last_code_flip_changed_verdict": sum(a.failed != b.failed for a, b in zip(reaches, flipped)),
        "last_code_flip_changed_max_x": sum(abs(a.max_x - b.max_x) > 1e-9 for a, b in zip(reaches, flipped)),
        "cpu_seconds": round(time.process_time() - started, 1),
        "reaches": [asdict(r) for r in reaches],
    }


def render(m: dict[str, Any], command: str) -> str:
    n = m["inputs"]
    return "\n".join(
        [
            f"Obstacle slots the `{m['model']}` walker reaches on `{m['subject']}` ({n} uniform random inputs, "
            f"seed {m['seed']}; 300-step episodes)",
            "",
            f"- Slots seen (an obstacle starting within the lidar's {m['lidar_range']:.2f} of the hull's x at some "
            f"step), episodes per count: {m['seen_histogram']}; failing episodes only: "
            f"{m['seen_histogram_failures']} ({m['failures']} failures).",
            f"- Slots met (the hull's x passed the obstacle's start): {m['met_histogram']}; largest hull x "
            f"{m['max_x']:.2f}.",
            f"- Changing only the last of the {m['slots']} codes (never seen: {m['last_code_never_seen']}) changed "
            f"the verdict of {m['last_code_flip_changed_verdict']} of {n} inputs and the hull's furthest x of "
            f"{m['last_code_flip_changed_max_x']}: Gymnasium draws the initial push from the terrain's random "
            "stream after the whole terrain, and how many draws an obstacle takes depends on its kind, so every "
            "code moves the push. Distinct inputs that differ only in unseen codes are distinct episodes, but "
            "not distinct obstacle faults.",
            "",
            f"Command: `{command}`; {m['cpu_seconds']} CPU s.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=200, help="random inputs to replay (1..10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    if not 1 <= args.inputs <= 10_000 or args.seed < 0:
        raise SystemExit("error: --inputs must be in 1..10000 and --seed >= 0")
    m = measure(args.inputs, args.seed, args.model)
    command = f"python replications/bipedal_reach.py --inputs {args.inputs} --seed {args.seed}" + (
        f" --model {args.model}" if args.model != MODEL else ""
    )
    text = render(m, command)
    print(text)
    args.out.mkdir(exist_ok=True)
    (args.out / "bipedal_reach.md").write_text(text + "\n")
    (args.out / "bipedal_reach.json").write_text(json.dumps({"command": command, **m}, indent=1) + "\n")


if __name__ == "__main__":
    main()
