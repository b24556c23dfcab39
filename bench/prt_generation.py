"""Generation cost of Prior Random Testing: time for N tests in 4-D (CartPole) and 47-D (Humanoid).

The paper's realization (Sec. 3.6, Eq. 9) makes N tests cost O(M N^2). This bench times the "prt"
strategy on the CartPole and Humanoid subjects' spaces for each N. It prints a table and the least-squares
exponent b of time ~ N^b over the sizes, and ends with

    prt_generation_exponent_4d=<x> prt_generation_exponent_47d=<y>

Only generation is timed: nothing is executed. In 4-D the per-test constant (about M Python-level numpy steps)
still weighs on the total at these sizes, so the fitted exponent comes out below 2. The marginal column
(ms per test near the end of the run) grows linearly in N once the O(N) work per test dominates.

    python bench/prt_generation.py [--sizes 1000,5000,10000] [--max-n N] [--variant paper|authors_code]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.space import ParameterSpace  # noqa: E402
from generator_service.strategies import make_strategy  # noqa: E402
from simulator_service.subject import get_subject  # noqa: E402

SUBJECTS = {4: "cartpole", 47: "humanoid"}
TAIL = 50  # tests timed at the end of each run for the marginal cost


def time_generation(space: ParameterSpace, n: int, seed: int, variant: str) -> tuple[float, float]:
    """Seconds to generate n tests, and the marginal milliseconds per test over the last TAIL of them."""
    strategy = make_strategy("prt", space, seed, {"variant": variant})
    head = max(n - TAIL, 0)
    started = time.perf_counter()
    strategy.ask(head)
    tail_started = time.perf_counter()
    strategy.ask(n - head)
    done = time.perf_counter()
    return done - started, (done - tail_started) / max(n - head, 1) * 1e3


def fitted_exponent(sizes: list[int], seconds: list[float]) -> float:
    if len(sizes) < 2:
        return float("nan")
    slope, _ = np.polyfit(np.log(sizes), np.log(seconds), 1)
    return float(slope)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000", help="comma-separated N values (default 1000,5000,10000)")
    parser.add_argument("--max-n", type=int, default=None,
                        help="leave out sizes above this in 47-D (the slow case); default: none left out")
    parser.add_argument("--variant", default="paper", choices=["paper", "authors_code"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    print(f"{'dims':>4} {'subject':>9} {'N':>7} {'seconds':>9} {'ms/test (mean)':>15} {'ms/test (last 50)':>18}")
    exponents: dict[int, float] = {}
    for dims, subject in SUBJECTS.items():
        space = get_subject(subject).space
        assert len(space.parameters) == dims
        used, seconds = [], []
        for n in sizes:
            if dims == 47 and args.max_n is not None and n > args.max_n:
                print(f"{dims:>4} {subject:>9} {n:>7} {'skipped (--max-n)':>9}")
                continue
            total, marginal = time_generation(space, n, args.seed, args.variant)
            used.append(n)
            seconds.append(total)
            print(f"{dims:>4} {subject:>9} {n:>7} {total:>9.2f} {total / n * 1e3:>15.3f} {marginal:>18.3f}", flush=True)
        exponents[dims] = fitted_exponent(used, seconds)
        print(f"     fitted exponent over N={used}: {exponents[dims]:.2f}", flush=True)
    print(f"prt_generation_exponent_4d={exponents[4]:.2f} prt_generation_exponent_47d={exponents[47]:.2f}")


if __name__ == "__main__":
    main()
