"""Donkey track generation: acceptance rate and speed of the random valid-track generator, and the validity rate
of Indago's mutation and crossover on valid tracks.

The generator draws grammatical candidates (rules 0-2 and 4 hold by construction) and rejects those breaking
rule 3 (self-intersection) or 5 (curve count, hardest curve); this bench counts which rule rejects how often,
for the paper's main rules and the RQ4 variant. It uses CPU seconds of this process (a shared machine disturbs
them less) and prints wall seconds beside them. Every number printed goes to results/bench/donkey_tracks.json.

    python bench/donkey_tracks.py [--seconds 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import BenchRecord
from subjects.donkey.track import (
    TrackOperators,
    TrackRules,
    draw_candidate,
    is_valid,
    random_track,
    violations,
)

SETTINGS = {"main": TrackRules(), "rq4": TrackRules(min_curves=2, max_turn_deg=130, min_hardest_deg=0)}


def generation(rules: TrackRules, seconds: float, rng: np.random.Generator) -> dict[str, float]:
    drawn = accepted = 0
    rejected_by: dict[str, int] = {}
    cpu, wall = time.process_time(), time.perf_counter()
    while time.process_time() - cpu < seconds:
        problems = violations(draw_candidate(rng, rules), rules)
        drawn += 1
        accepted += not problems
        for rule in {p.split("rule ")[1][0] for p in problems}:
            rejected_by[rule] = rejected_by.get(rule, 0) + 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "drawn": drawn,
        "accepted": accepted,
        "rate": accepted / drawn,
        "valid_per_cpu_s": accepted / cpu,
        "wall_s": wall,
        "cpu_s": cpu,
        **{f"rule_{k}": v for k, v in sorted(rejected_by.items())},
    }


def operators(rules: TrackRules, rng: np.random.Generator, n: int = 300) -> dict[str, float]:
    ops = TrackOperators(rules)
    tracks = [random_track(rng, rules) for _ in range(40)]
    mutants = [ops.mutate(tracks[i % len(tracks)], rng) for i in range(n)]
    every = TrackOperators(rules, pairs="all")
    all_pairs = [every.mutate(tracks[i % len(tracks)], rng) for i in range(n)]
    one_shot = TrackOperators(rules, crossover_tries=1)
    crossed = [one_shot.crossover(tracks[i % 40], tracks[(i + 1) % 40], rng) for i in range(n)]
    retried = [ops.crossover(tracks[i % 40], tracks[(i + 1) % 40], rng) for i in range(n // 3)]
    return {
        "mutation_one_valid": np.mean([is_valid(m, rules) for m in mutants]),
        "mutation_all_valid": np.mean([is_valid(m, rules) for m in all_pairs]),
        "crossover_single_try_valid": np.mean([c is not None for c in crossed]),
        "crossover_20_tries_valid": np.mean([c is not None for c in retried]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="CPU seconds of generation per setting")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with BenchRecord("donkey_tracks") as record:
        m = record.metrics
        m.update(seconds=args.seconds, seed=args.seed, crossover_tries=TrackOperators(TrackRules()).crossover_tries)
        for name, rules in SETTINGS.items():
            rng = np.random.default_rng(args.seed)
            gen = generation(rules, args.seconds, rng)
            ops = operators(rules, rng)
            m.update({f"{name}_{k}": round(float(v), 3) for k, v in (gen | ops).items()})
            m[f"{name}_valid_per_cpu_s"] = round(gen["valid_per_cpu_s"])
            rejections = ", ".join(f"{k}={int(v)}" for k, v in gen.items() if k.startswith("rule_"))
            print(
                f"{name}: acceptance {gen['accepted']}/{gen['drawn']} = {gen['rate']:.3f}; "
                f"{gen['valid_per_cpu_s']:.0f} valid tracks per CPU-second ({gen['cpu_s']:.1f} CPU-s, "
                f"{gen['wall_s']:.1f} wall-s); rejected by {rejections}"
            )
            print(
                f"{name}: valid after one mutation: one pair {ops['mutation_one_valid']:.2f}, every pair "
                f"{ops['mutation_all_valid']:.2f}; crossover gives two valid children: one try "
                f"{ops['crossover_single_try_valid']:.2f}, within {m['crossover_tries']} tries "
                f"{ops['crossover_20_tries_valid']:.2f}"
            )


if __name__ == "__main__":
    main()
