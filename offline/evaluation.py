"""Measures a zoo model's failure rate on test inputs, in process, with the lock-step runner and the oracles.

The episodes run through the same code a campaign's run through (simulator_service.runner, the subject's
environment and trace recorder, oracle_service.oracles), only without the gRPC hops.

A long measurement (PRT's rule asks for 100,000 inputs; a LunarLander input costs 1,000 steps) runs in
chunks: chunks spread over worker processes and, with a journal, a killed run resumes where it stopped.
The inputs are drawn up front from one seeded generator (or read from a file of named inputs), so chunking,
workers and resuming never change which inputs are run or their episode seeds: any split gives the same
count as one process.

Episode seeds: drawn input number i runs with derive_seed(seed, i), the rule the zoo manifest's eval_*
measurements were taken with. A named input (read_inputs) runs with common.seeding.episode_seed(seed, id),
the rule the simulator applies to a campaign's test cases, so a campaign's inputs rerun here with the
campaign's seed replay the campaign's episodes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import queue
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.seeding import derive_seed, episode_seed
from common.space import ParamValue
from oracle_service.api import Episode, get_oracle
from simulator_service.api import Job, Subject, TraceRecorder, make_env, run_lockstep


@dataclass(frozen=True)
class Evaluation:
    tests: int
    failures: int
    errors: int
    failed_indices: tuple[int, ...] = field(default=(), compare=False)

    @property
    def success_rate(self) -> float:
        judged = self.tests - self.errors
        return (judged - self.failures) / judged if judged else float("nan")


@dataclass(frozen=True)
class NamedInput:
    """A test input with its test-case id (the id picks the episode seed, as in a campaign)."""

    id: str
    values: dict[str, ParamValue]


def read_inputs(path: Path, subject: Subject) -> list[NamedInput]:
    """Named test inputs from a JSON-lines file, one ``{"id": "...", "values": {...}}`` a line.

    ValueError names the line and the problem: not JSON, a missing or repeated id, values that are not an
    object or that the subject's parameter space or validators reject.
    """
    inputs: list[NamedInput] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"inputs {path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
            raise ValueError(f'{where}: expected {{"id": "<non-empty string>", "values": {{...}}}}')
        if row["id"] in seen:
            raise ValueError(f"{where}: id {row['id']!r} appears twice; ids name episodes and must be unique")
        values = row.get("values")
        if not isinstance(values, dict):
            raise ValueError(f"{where}: values must be an object of parameter name -> value, got {values!r}")
        problems = subject.violations(values)
        if problems:
            raise ValueError(f"{where}: not a valid input of subject {subject.name}: {'; '.join(problems)}")
        seen.add(row["id"])
        inputs.append(NamedInput(row["id"], values))
    if not inputs:
        raise ValueError(f"inputs {path} holds no test inputs")
    return inputs


def draw_test_cases(
    subject: Subject,
    tests: int,
    seed: int,
    valid: Callable[[Mapping[str, ParamValue]], bool] | None = None,
    max_draws: int = 10_000,
) -> list[dict[str, ParamValue]]:
    """`tests` uniform random test cases the subject's validators accept (e.g. Taxi's passenger != destination)
    and, when given, `valid(values)` holds for; `max_draws` bounds each search."""
    rng = np.random.default_rng(seed)

    def draw() -> dict[str, ParamValue]:
        for _ in range(max_draws):
            values = subject.sample(rng, max_tries=max_draws)
            if valid is None or valid(values):
                return values
        raise ValueError(f"subject {subject.name}: no test case passed the `valid` filter in {max_draws} draws")

    return [draw() for _ in range(tests)]


def run_test_cases(
    subject: Subject,
    predict: Callable[[np.ndarray], np.ndarray],
    cases: Iterable[tuple[int, Mapping[str, ParamValue]]],
    seed: int,
    parallelism: int = 64,
    progress: Callable[[int], Any] | None = None,
    episode_seeds: Mapping[int, int] | None = None,
) -> Evaluation:
    """Runs (index, values) test cases in lock-step; test `index` runs with episode seed
    `episode_seeds[index]` when given, else derive_seed(seed, index)."""
    cases = list(cases)
    oracle = get_oracle(subject.oracle)
    seeds = episode_seeds if episode_seeds is not None else {i: derive_seed(seed, i) for i, _ in cases}
    jobs = (Job(f"eval-{i}", dict(values), seeds[i]) for i, values in cases)
    envs = [make_env(subject) for _ in range(max(1, min(parallelism, len(cases))))]
    failed: list[int] = []
    errors = done = 0
    try:
        for out in run_lockstep(
            lambda: make_env(subject),
            envs,
            jobs,
            predict,
            lambda: TraceRecorder(subject, list(oracle.required_signals)),
        ):
            done += 1
            if out.error:
                errors += 1
            elif oracle.evaluate(
                Episode(out.steps, out.total_reward, out.terminated, out.truncated, out.signals)
            ).failed:
                failed.append(int(out.job.test_case_id.removeprefix("eval-")))
            if progress:
                progress(done)
    finally:
        for env in envs:
            env.close()
    return Evaluation(len(cases), len(failed), errors, tuple(sorted(failed)))


def evaluate_policy(
    subject: Subject,
    predict: Callable[[np.ndarray], np.ndarray],
    tests: int,
    seed: int,
    parallelism: int = 64,
    progress: Callable[[int], Any] | None = None,
    valid: Callable[[Mapping[str, ParamValue]], bool] | None = None,
    max_draws: int = 10_000,
) -> Evaluation:
    """Runs `tests` uniform random test cases of the subject (draw_test_cases) and judges them with its oracle."""
    cases = draw_test_cases(subject, tests, seed, valid, max_draws)
    return run_test_cases(subject, predict, enumerate(cases), seed, parallelism, progress)


class JournalMismatch(ValueError):
    """A journal written by a measurement with other settings (the message names the field)."""


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def evaluate_model(
    model_root: Path,
    model: str,
    tests: int,
    seed: int,
    *,
    workers: int = 1,
    chunk: int = 1000,
    parallelism: int = 64,
    journal: Path | None = None,
    progress: Callable[[int], Any] | None = None,
    inputs: Sequence[NamedInput] | None = None,
) -> Evaluation:
    """Measures zoo model `model` on `tests` random inputs in chunks of `chunk` tests over `workers` processes.

    With `inputs`, measures those named inputs instead (`tests` is then their number; episode seeds follow
    the campaign rule, see the module's docstring); the journal and the failed indices count them in order.
    With `journal`, every finished chunk is appended to it (JSON lines) and chunks already there are skipped,
    so an interrupted measurement continues; a journal of other settings (or another model file) is refused.
    `progress` receives the number of finished tests, resumed ones included.
    """
    from agent_service.api import ModelRegistry, model_file_name
    from simulator_service.api import get_subject

    registry = ModelRegistry(model_root)
    entry = registry.entry(model)
    subject = get_subject(entry.subject)
    if inputs is not None:
        tests = len(inputs)
    header: dict[str, Any] = {
        "model": model,
        "subject": subject.name,
        "tests": tests,
        "seed": seed,
        "chunk": chunk,
        "model_sha256": file_sha256(registry.folder(model) / model_file_name(entry.algorithm)),
    }
    if inputs is not None:
        header["inputs_sha256"] = hashlib.sha256(
            json.dumps([[i.id, i.values] for i in inputs], sort_keys=True).encode()
        ).hexdigest()
    done_chunks = _read_journal(journal, header) if journal else {}
    if journal and not done_chunks and not (journal.exists() and journal.read_text().strip()):
        journal.parent.mkdir(parents=True, exist_ok=True)
        journal.write_text(json.dumps(header) + "\n")
    if inputs is None:
        cases = draw_test_cases(subject, tests, seed)
        seeds = {i: derive_seed(seed, i) for i in range(tests)}
    else:
        cases = [i.values for i in inputs]
        seeds = {n: episode_seed(seed, i.id) for n, i in enumerate(inputs)}
    todo = [(start, min(start + chunk, tests)) for start in range(0, tests, chunk) if start not in done_chunks]
    finished = sum(r["end"] - r["start"] for r in done_chunks.values())
    results = list(done_chunks.values())
    if progress:
        progress(finished)

    def record(start: int, end: int, ev: Evaluation) -> None:
        row = {
            "start": start,
            "end": end,
            "failures": ev.failures,
            "errors": ev.errors,
            "failed": [
                {"index": i, "values": cases[i], **({"id": inputs[i].id} if inputs is not None else {})}
                for i in ev.failed_indices
            ],
        }
        results.append(row)
        if journal:
            with journal.open("a") as f:
                f.write(json.dumps(row) + "\n")

    if workers <= 1:
        _one_torch_thread()
        for start, end in todo:
            base = finished
            ev = run_test_cases(
                subject,
                lambda obs: registry.act(model, obs),
                _indexed(cases, start, end),
                seed,
                parallelism,
                (lambda n, base=base: progress(base + n)) if progress else None,
                seeds,
            )
            finished += end - start
            record(start, end, ev)
    else:
        ctx = mp.get_context("spawn")  # a fresh interpreter per worker: no forked torch or Box2D state
        ticks = ctx.Queue()
        with ctx.Pool(
            workers, initializer=_worker_init, initargs=(str(model_root), model, seed, parallelism, ticks)
        ) as pool:
            pending = pool.imap_unordered(
                _worker_run, [(s, e, _indexed(cases, s, e), {i: seeds[i] for i in range(s, e)}) for s, e in todo]
            )
            for _ in todo:
                while True:
                    try:
                        start, end, ev = pending.next(timeout=0.5)
                        break
                    except mp.TimeoutError:
                        finished += _drain(ticks)
                        if progress:
                            progress(finished)
                finished += _drain(ticks)
                record(start, end, ev)
                if progress:
                    progress(finished)
    failed = tuple(sorted(f["index"] for r in results for f in r["failed"]))
    return Evaluation(tests, sum(r["failures"] for r in results), sum(r["errors"] for r in results), failed)


def _indexed(cases: Sequence[dict[str, ParamValue]], start: int, end: int) -> list[tuple[int, dict[str, ParamValue]]]:
    return [(i, cases[i]) for i in range(start, end)]


def _read_journal(journal: Path, header: dict[str, Any]) -> dict[int, dict[str, Any]]:
    if not journal.exists():
        return {}
    lines = []
    for number, line in enumerate(journal.read_text().splitlines(), 1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise JournalMismatch(
                    f"journal {journal}:{number} is not JSON ({exc.msg}); "
                    "delete that line (a chunk cut off mid-write) to resume"
                ) from None
    if not lines:
        return {}
    for key, value in header.items():
        if lines[0].get(key) != value:
            raise JournalMismatch(
                f"journal {journal} was written with {key}={lines[0].get(key)!r}, this run has "
                f"{key}={value!r}; use another --journal or the same settings"
            )
    return {row["start"]: row for row in lines[1:]}


def _drain(ticks: Any) -> int:
    n = 0
    while True:
        try:
            n += ticks.get_nowait()
        except queue.Empty:
            return n


_WORKER: dict[str, Any] = {}


def _one_torch_thread() -> None:
    # One core per measuring process: the zoo's small MLPs gain nothing from more threads, and a second
    # thread fighting a busy core made inference 3x slower (measured beside two training jobs).
    import torch

    torch.set_num_threads(1)


def _worker_init(model_root: str, model: str, seed: int, parallelism: int, ticks: Any) -> None:
    from agent_service.api import ModelRegistry
    from simulator_service.api import get_subject

    _one_torch_thread()
    registry = ModelRegistry(Path(model_root))
    registry.load(model)
    _WORKER.update(
        registry=registry,
        model=model,
        subject=get_subject(registry.entry(model).subject),
        seed=seed,
        parallelism=parallelism,
        ticks=ticks,
    )


def _worker_run(
    job: tuple[int, int, list[tuple[int, dict[str, ParamValue]]], dict[int, int]],
) -> tuple[int, int, Evaluation]:
    start, end, cases, seeds = job
    w = _WORKER
    reported = 0

    def tick(done: int) -> None:  # batched: a queue message per test would cost more than a CartPole episode
        nonlocal reported
        if done - reported >= 25 or done == len(cases):
            w["ticks"].put(done - reported)
            reported = done

    ev = run_test_cases(
        w["subject"], lambda obs: w["registry"].act(w["model"], obs), cases, w["seed"], w["parallelism"], tick, seeds
    )
    return start, end, ev
