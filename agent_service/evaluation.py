"""Measures a zoo model's failure rate on random test inputs, in process, with the lock-step runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from common.seeding import derive_seed
from common.space import ParamValue
from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import make_env
from simulator_service.runner import Job, run_lockstep
from simulator_service.subject import Subject
from simulator_service.trace import TraceRecorder


@dataclass(frozen=True)
class Evaluation:
    tests: int
    failures: int
    errors: int

    @property
    def success_rate(self) -> float:
        judged = self.tests - self.errors
        return (judged - self.failures) / judged if judged else float("nan")


def evaluate_policy(subject: Subject, predict: Callable[[np.ndarray], np.ndarray], tests: int, seed: int,
                    parallelism: int = 64, progress: Callable[[int], Any] | None = None,
                    valid: Callable[[Mapping[str, ParamValue]], bool] | None = None,
                    max_draws: int = 10_000) -> Evaluation:
    """Runs `tests` uniform random test cases of the subject and judges them with its oracle.

    Test cases are drawn until the subject's validators accept them (e.g. Taxi's passenger !=
    destination) and, when given, `valid(values)` is true; `max_draws` bounds each search.
    """
    oracle = get_oracle(subject.oracle)
    rng = np.random.default_rng(seed)

    def draw() -> dict[str, ParamValue]:
        for _ in range(max_draws):
            values = subject.sample(rng, max_tries=max_draws)
            if valid is None or valid(values):
                return values
        raise ValueError(f"subject {subject.name}: no test case passed the `valid` filter in {max_draws} draws")

    jobs = (Job(f"eval-{i}", draw(), derive_seed(seed, i)) for i in range(tests))
    envs = [make_env(subject) for _ in range(min(parallelism, tests))]
    failures = errors = done = 0
    for out in run_lockstep(lambda: make_env(subject), envs, jobs, predict,
                            lambda: TraceRecorder(subject, list(oracle.required_signals))):
        done += 1
        if out.error:
            errors += 1
        else:
            failures += oracle.evaluate(Episode(out.steps, out.total_reward, out.terminated, out.truncated,
                                                out.signals)).failed
        if progress:
            progress(done)
    for env in envs:
        env.close()
    return Evaluation(tests, failures, errors)
