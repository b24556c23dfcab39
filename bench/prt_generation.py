"""Generation cost of Prior Random Testing: time for N tests in 4-D (CartPole) and 47-D (Humanoid).

The paper's realization (Sec. 3.6, Eq. 9) makes N tests cost O(M N^2): the k-th test costs O(k). This bench
times the "prt" strategy on the CartPole and Humanoid subjects' spaces, generation only (nothing is
executed). It uses CPU seconds of this process, so other jobs on a shared machine disturb it less, and
prints wall seconds beside them. For each dimension it prints:

* the exponent b of total time ~ N^b (least squares over the sizes);
* a straight-line fit of the marginal cost (CPU ms per test over the last TAIL tests) against N: a fixed
  part plus a part per 1,000 earlier tests. A straight line means a test costs O(k), and the total is then
  O(N^2) asymptotically;
* the share of a two-term fit T = a*N + c*N^2 at the largest N that the N^2 term carries. The a*N term is
  the fixed cost of a test (about M steps of a few numpy calls each). It dominates in 4-D at these sizes,
  so the total exponent there stays well below 2 even though the per-test cost grows linearly.

It ends with ``prt_generation_exponent_4d=<x> prt_generation_exponent_47d=<y>`` (the total-time exponents) and
writes every number it prints to results/bench/prt_generation.json.

47-D is slow on this project's shared 2-core machine: about 30 CPU-seconds for N=5,000 and about 90 for
N=10,000, which took 130 s of wall time under load. With N=10,000 the whole run would exceed three minutes,
so the default stops 47-D at N=5,000 (``--max-n 5000``). Run with ``--max-n 10000`` for the full table.

    python bench/prt_generation.py [--sizes 1000,5000,10000] [--max-n 5000] [--variant paper|authors_code]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import BenchRecord
from common.space import ParameterSpace
from generator_service.api import make_strategy
from simulator_service.api import get_subject

SUBJECTS = {4: "cartpole", 47: "humanoid"}
TAIL = 100  # tests timed at the end of each run for the marginal cost


def time_generation(space: ParameterSpace, n: int, seed: int, variant: str) -> tuple[float, float, float]:
    """CPU seconds and wall seconds for n tests, and the CPU milliseconds per test over the last TAIL."""
    strategy = make_strategy("prt", space, seed, {"variant": variant})
    head = max(n - TAIL, 0)
    cpu, wall = time.process_time(), time.perf_counter()
    strategy.ask(head)
    tail_cpu = time.process_time()
    strategy.ask(n - head)
    done_cpu, done_wall = time.process_time(), time.perf_counter()
    return done_cpu - cpu, done_wall - wall, (done_cpu - tail_cpu) / max(n - head, 1) * 1e3


def slope(x: list[float], y: list[float]) -> float:
    if len(x) < 2:
        return float("nan")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def line(x: list[int], y: list[float]) -> tuple[float, float]:
    """Intercept and slope of the least-squares line y = a + b*x."""
    if len(x) < 2:
        return float("nan"), float("nan")
    b, a = np.polyfit(np.asarray(x, dtype=float), np.asarray(y), 1)
    return float(a), float(b)


def quadratic_share(sizes: list[int], seconds: list[float]) -> float:
    """Share of the c*N^2 term at the largest N in the least-squares fit T = a*N + c*N^2."""
    if len(sizes) < 2:
        return float("nan")
    n = np.asarray(sizes, dtype=float)
    (a, c), *_ = np.linalg.lstsq(np.column_stack([n, n**2]), np.asarray(seconds), rcond=None)
    big = n.max()
    return float(c * big**2 / (a * big + c * big**2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000", help="comma-separated N values (default 1000,5000,10000)")
    parser.add_argument(
        "--max-n",
        type=int,
        default=5000,
        help="leave out 47-D sizes above this (default 5000; 10000 adds about 90 CPU-seconds)",
    )
    parser.add_argument("--variant", default="paper", choices=["paper", "authors_code"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    with BenchRecord("prt_generation") as record:
        m = record.metrics
        m.update({"tail": TAIL, "max_n": args.max_n, "seed": args.seed})
        m.update({f"n_{n}": n for n in sizes} | {f"dims_{d}": d for d in SUBJECTS})
        print(f"PRT generation cost, variant={args.variant} (CPU seconds of this process; wall beside)")
        print(
            f"{'dims':>4} {'subject':>9} {'N':>7} {'cpu s':>8} {'wall s':>8} "
            f"{'ms/test mean':>13} {f'ms/test last {TAIL}':>17}"
        )
        exponents: dict[int, float] = {}
        for dims, subject in SUBJECTS.items():
            space = get_subject(subject).space
            assert len(space.parameters) == dims
            used, seconds, marginal = [], [], []
            for n in sizes:
                if dims == 47 and n > args.max_n:
                    print(f"{dims:>4} {subject:>9} {n:>7}   skipped (above --max-n {args.max_n})")
                    continue
                cpu, wall, tail = time_generation(space, n, args.seed, args.variant)
                key = f"{dims}d_n{n}"
                m[f"cpu_s_{key}"], m[f"wall_s_{key}"] = round(cpu, 2), round(wall, 2)
                m[f"ms_per_test_mean_{key}"], m[f"ms_per_test_last_{key}"] = round(cpu / n * 1e3, 3), round(tail, 3)
                used.append(n)
                seconds.append(cpu)
                marginal.append(tail)
                print(
                    f"{dims:>4} {subject:>9} {n:>7} {cpu:>8.2f} {wall:>8.2f} {cpu / n * 1e3:>13.3f} {tail:>17.3f}",
                    flush=True,
                )
            exponents[dims] = slope(used, seconds)
            m[f"prt_generation_exponent_{dims}d"] = round(exponents[dims], 2)
            if len(used) < 2:
                continue
            fixed, per_k = line(used, marginal)
            m[f"marginal_fixed_ms_{dims}d"], m[f"marginal_ms_per_1k_{dims}d"] = round(fixed, 3), round(per_k * 1e3, 3)
            m[f"quadratic_share_pct_{dims}d"] = round(100 * quadratic_share(used, seconds))
            print(
                f"     {dims}-D over N={used}: total-time exponent {exponents[dims]:.2f}; marginal cost "
                f"{fixed:.3f} ms + {per_k * 1e3:.3f} ms per 1,000 earlier tests; N^2 term's share of "
                f"T = aN + cN^2 at N={used[-1] if used else 0}: {quadratic_share(used, seconds):.0%}",
                flush=True,
            )
        print(f"prt_generation_exponent_4d={exponents[4]:.2f} prt_generation_exponent_47d={exponents[47]:.2f}")


if __name__ == "__main__":
    main()
