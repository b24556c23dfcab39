"""Where users wait: time to the first execution of `gauntlet run`, time of `gauntlet report`, and the campaign
loop's per-execution cost at one-step episodes, for the code at a git ref ("before") and this working tree ("after").

Both versions run in the same bench run, interleaved, on the same machine load: the ref's tracked files are
extracted with `git archive` into a scratch folder and put first on PYTHONPATH (services inherit it), so each side
runs its own CLI, launcher and services. Every command is the user's: `gauntlet run FILE` / `gauntlet report ID`
as a subprocess in a scratch folder with its own SQLite store (runs/store/gauntlet.db).

- time to first execution: from the command's start until the store holds the campaign's first execution (the
  store is polled every 10 ms, read-only), for the README's CartPole campaign (random, batch 10); median of the
  repeats. The command's whole wall time (suite stop and report included) is kept too.
- report: `gauntlet report ID` of the per-execution campaign below, whole wall time; median of the repeats.
- CPU: the loop campaign's whole `gauntlet run` (suite start, executions, report, stop), every process summed
  (getrusage of the finished children), divided by its executions.
- per-execution cost: one campaign of --executions one-step CartPole episodes (the subject of
  bench/campaign_overhead.py, max_steps: 1), strategy random, seed 7, batch 500, parallelism 512; microseconds per
  execution from the stored elapsed_seconds of executions 1,001..N (whole batches, after a warm-up thousand).
  Its stored rows (values, verdict, margin, steps, reward, descriptors, reason) must be identical on both sides,
  else the bench fails; so must those of a 256-execution fuzzer campaign on CartPole (a strategy that chooses
  its next inputs from the margins it is told), run once per side.

Prints one line:
    first_execution: ttfe_before_s=<a> ttfe_after_s=<b> per_execution_us_before=<c> per_execution_us_after=<d>
and writes results/bench/first_execution.json (bench/results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import ONE_STEP_CARTPOLE
from bench.results import BenchRecord

FIRST_CAMPAIGN = """campaign:
  name: first-execution
  subject: cartpole
  model: cartpole-ppo
  strategy: random
  seed: 7
  budget: {max_executions: 20}
  batch_size: 10
  parallelism: 10
"""
LOOP_CAMPAIGN = """campaign:
  name: loop-cost
  subject: cartpole_1step
  model: cartpole-ppo
  strategy: random
  seed: 7
  budget: {max_executions: %d}
  batch_size: 500
  parallelism: 512
"""
# a strategy that learns from what it is told (the fuzzer picks parents by margin): its stored rows show that
# what the strategy hears is unchanged too
TELL_CAMPAIGN = """campaign:
  name: tell
  subject: cartpole
  model: cartpole-ppo
  strategy: fuzzer
  seed: 7
  budget: {max_executions: 256}
  batch_size: 32
  parallelism: 32
"""
BATCH = 500
ROW_COLUMNS = 'idx, batch, "values", verdict, margin, steps, total_reward, descriptors, reason, repetitions'
# a user's shell settings that would point the commands elsewhere
_CLEARED = ("GAUNTLET_STORE_URL", "GAUNTLET_STORE_URL_FILE", "GAUNTLET_TOKEN_FILE", "GAUNTLET_CA")


def extract(ref: str, into: Path) -> str:
    """The tracked files of `ref` under `into`; returns the full commit hash."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = into.with_suffix(".tar")
    subprocess.run(["git", "archive", "--output", str(archive), commit], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return commit


def gauntlet(tree: Path, cwd: Path, *argv: str, subjects: Path | None = None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(PYTHONPATH=str(tree), COLUMNS="100", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if subjects is not None:
        env["GAUNTLET_SUBJECT_PATH"] = str(subjects)
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen[str], what: str, timeout: float = 900) -> str:
    out, _ = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise SystemExit(f"error: {what} exited {process.returncode}:\n{out[-3000:]}")
    return out


def children_cpu() -> float:
    """CPU seconds of this process's finished children and theirs (a command and the services it started and
    waited for): the difference across one command is what that command cost, every process summed."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stored_count(database: Path) -> int:
    """Executions in the store now; 0 while the store or its tables do not exist yet."""
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=0.05) as db:
            return int(db.execute("SELECT count(*) FROM executions").fetchone()[0])
    except sqlite3.Error:  # the generator is creating the schema
        return 0


def time_to_first_execution(tree: Path, scratch: Path) -> dict[str, float]:
    (scratch / "c.yaml").write_text(FIRST_CAMPAIGN)
    database = scratch / "runs" / "store" / "gauntlet.db"
    started = time.perf_counter()
    process = gauntlet(tree, scratch, "run", "c.yaml", "--id", "first")
    first = float("nan")
    while process.poll() is None:
        if stored_count(database) > 0:
            first = time.perf_counter() - started
            break
        time.sleep(0.01)
    finish(process, "gauntlet run (first execution)")
    if first != first:
        raise SystemExit("error: gauntlet run ended before an execution was seen in the store")
    return {"ttfe_s": first, "run_s": time.perf_counter() - started}


def loop_cost(tree: Path, scratch: Path, subjects: Path, n: int) -> tuple[dict[str, float], list[tuple[Any, ...]]]:
    (scratch / "loop.yaml").write_text(LOOP_CAMPAIGN % n)
    cpu = children_cpu()
    finish(gauntlet(tree, scratch, "run", "loop.yaml", "--id", "loop", subjects=subjects), "gauntlet run (loop)")
    cpu = children_cpu() - cpu
    with sqlite3.connect(f"file:{scratch / 'runs' / 'store' / 'gauntlet.db'}?mode=ro", uri=True) as db:
        rows = db.execute(f"SELECT {ROW_COLUMNS} FROM executions WHERE campaign_id='loop' ORDER BY idx").fetchall()
        elapsed = db.execute(
            "SELECT batch, max(elapsed_seconds) FROM executions WHERE campaign_id='loop' GROUP BY batch"
        ).fetchall()
    if len(rows) != n:
        raise SystemExit(f"error: the loop campaign stored {len(rows)} executions, not {n}")
    end = dict(elapsed)
    first, last = 1_001 // BATCH + 1, n // BATCH  # batches 3..N/500: executions 1,001..N
    per_us = (end[last] - end[first - 1]) / (n - 1_000) * 1e6
    started = time.perf_counter()
    finish(gauntlet(tree, scratch, "report", "loop", subjects=subjects), "gauntlet report")
    # the whole command's CPU (suite start, N executions, report, stop), every process summed, per execution
    measured = {"per_execution_us": per_us, "run_cpu_us_per_execution": cpu / n * 1e6}
    return {**measured, "report_s": time.perf_counter() - started}, rows


def tell_rows(tree: Path, scratch: Path) -> list[tuple[Any, ...]]:
    (scratch / "tell.yaml").write_text(TELL_CAMPAIGN)
    finish(gauntlet(tree, scratch, "run", "tell.yaml", "--id", "tell"), "gauntlet run (tell)")
    with sqlite3.connect(f"file:{scratch / 'runs' / 'store' / 'gauntlet.db'}?mode=ro", uri=True) as db:
        return db.execute(f"SELECT {ROW_COLUMNS} FROM executions WHERE campaign_id='tell' ORDER BY idx").fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git ref of the 'before' code (e.g. a commit hash)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement per side (1..10)")
    parser.add_argument("--executions", type=int, default=5_000, help="loop campaign length (multiple of 500)")
    args = parser.parse_args()
    if not 1 <= args.repeats <= 10:
        raise SystemExit(f"error: --repeats must be in [1, 10], got {args.repeats}")
    if args.executions < 2_000 or args.executions % BATCH or args.executions > 100_000:
        raise SystemExit(f"error: --executions must be a multiple of {BATCH} in [2000, 100000]")
    with BenchRecord("first_execution") as record, tempfile.TemporaryDirectory(prefix="gauntlet-wait-") as tmp:
        root = Path(tmp)
        subjects = root / "subjects"
        subjects.mkdir()
        (subjects / "cartpole_1step.yaml").write_text(ONE_STEP_CARTPOLE)
        before_commit = extract(args.before, root / "before")
        trees = {"before": root / "before", "after": ROOT}
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        stored: dict[str, list[tuple[Any, ...]]] = {}
        for repeat in range(args.repeats):
            for side, tree in trees.items():  # interleaved: both sides see the same load drift
                scratch = root / f"{side}-{repeat}"
                scratch.mkdir()
                measured = time_to_first_execution(tree, scratch)
                cost, rows = loop_cost(tree, scratch, subjects, args.executions)
                runs[side].append({**measured, **cost})
                if stored.setdefault(side, rows) != rows:
                    raise SystemExit(f"error: the {side} side stored different rows on repeat {repeat + 1}")
                if repeat == 0:
                    stored[f"tell-{side}"] = tell_rows(tree, scratch)
                print(f"{side} {repeat + 1}: " + " ".join(f"{k}={v:.3f}" for k, v in runs[side][-1].items()))
        for campaign, before, after in (("loop", "before", "after"), ("tell", "tell-before", "tell-after")):
            if stored[before] != stored[after]:
                differ = sum(a != b for a, b in zip(stored[before], stored[after], strict=False))
                raise SystemExit(
                    f"error: the {campaign} campaign's stored rows differ between before and after: {differ} of "
                    f"{len(stored[before])} (after: {len(stored[after])} rows)"
                )
        medians = {s: {k: statistics.median(r[k] for r in runs[s]) for k in runs[s][0]} for s in runs}
        for side in trees:
            record.metrics[f"ttfe_{side}_s"] = round(medians[side]["ttfe_s"], 2)
            record.metrics[f"run_{side}_s"] = round(medians[side]["run_s"], 2)
            record.metrics[f"report_{side}_s"] = round(medians[side]["report_s"], 2)
            record.metrics[f"per_execution_us_{side}"] = round(medians[side]["per_execution_us"], 1)
            record.metrics[f"run_cpu_us_per_execution_{side}"] = round(medians[side]["run_cpu_us_per_execution"], 1)
        record.metrics["rows_identical"] = "yes"  # both campaigns; the bench fails otherwise
        record.metrics["tell_rows"] = len(stored["tell-after"])
        record.details = {
            "before_commit": before_commit,
            "after": "working tree at "
            + subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip(),
            "repeats": args.repeats,
            "executions": args.executions,
            "runs": runs,
            "campaigns": {"first": FIRST_CAMPAIGN, "loop": LOOP_CAMPAIGN % args.executions, "tell": TELL_CAMPAIGN},
        }
    m = record.metrics
    print(
        f"first_execution: ttfe_before_s={m['ttfe_before_s']} ttfe_after_s={m['ttfe_after_s']} "
        f"per_execution_us_before={m['per_execution_us_before']} per_execution_us_after={m['per_execution_us_after']}",
        flush=True,
    )
    print(json.dumps(m), flush=True)


if __name__ == "__main__":
    main()
