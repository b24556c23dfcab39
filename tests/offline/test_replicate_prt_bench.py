"""replications/replicate_prt.py re-renders a stored Table 3 run: table, paper rows, notes and the exact final line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_render_rewrites_a_stored_run_without_running_campaigns(tmp_path: Path) -> None:
    stored = {
        "args": {
            "subject": "mountaincar_continuous",
            "reps": 2,
            "max_tests": 50,
            "batch": 16,
            "strategies": "prt,random,map_elites",
            "me_init": 100,
            "fuzz_init": 100,
        },
        "model": "mountaincar-continuous-sac",
        "wall_seconds": 60.0,
        "results": {
            "prt": {"tests": [3.0, 50.0], "seconds": [1.0, 9.0], "found": [True, False]},
            "random": {"tests": [50.0, 50.0], "seconds": [8.0, 8.5], "found": [False, False]},
            "map_elites": {"tests": [40.0, 20.0], "seconds": [7.0, 4.0], "found": [True, True]},
        },
    }
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(stored))
    out = subprocess.run(
        [sys.executable, "replications/replicate_prt.py", "--render", str(path), "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == f"prt_vs_random_first_failure={26.5 / 50:.3f}"
    table = (tmp_path / "prt_table3_mountaincar_continuous.md").read_text()
    assert "| prt | 1/2 | ≥26.5 ± 33.2 |" in table
    assert "| random | 0/2 | no failure within 50 tests |" in table
    assert "| map_elites | 2/2 | 30.0 ± 14.1 |" in table and "| 656.1 | 4.23 |" in table  # the paper's QD row
    assert "g_model (paper only: not run here)" in table
    assert "random: no failure within 50 tests in any of the 2 runs." in table
    assert "prt: 1 of 2 runs found no failure within 50 tests" in table
    # the command that made the table, with the settings it was measured with (not this command line's defaults)
    command = (
        "python replications/replicate_prt.py --subject mountaincar_continuous --reps 2 --max-tests 50 --batch 16 "
        "--strategies prt,random,map_elites --me-init 100 --fuzz-init 100 --entropy-tests 0"
    )
    assert f"Command: `{command}`" in table.splitlines()
    assert json.loads((tmp_path / "prt_table3_mountaincar_continuous.json").read_text())["command"] == command


def test_bad_options_are_named() -> None:
    out = subprocess.run(
        [sys.executable, "replications/replicate_prt.py", "--strategies", "prt,bogus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "unknown bogus" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run(
        [sys.executable, "replications/replicate_prt.py", "--strategies", "random,map_elites"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "must include prt and random" in out.stderr


def saved_run(strategy: str, seed: int, tests: float, found: bool = True, **settings: object) -> str:
    row = {
        "strategy": strategy,
        "subject": "cartpole",
        "max_tests": 40,
        "batch": 16,
        "me_init": 1000,
        "fuzz_init": 1000,
        "campaign_id": f"c-{strategy}-{seed}",
        "seed": seed,
        "found": found,
        "executions": int(tests),
        "tests": tests,
        "seconds": tests / 10,
        "wall_seconds": tests / 10,
    }
    row.update(settings)
    return json.dumps(row)


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "replications/replicate_prt.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_saved_runs_that_disagree_are_refused_by_name(tmp_path: Path) -> None:
    a, b = tmp_path / "a.runs.jsonl", tmp_path / "b.runs.jsonl"
    a.write_text(saved_run("prt", 0, 5) + "\n" + saved_run("random", 0, 30) + "\n")
    b.write_text(saved_run("random", 1, 20, max_tests=80) + "\n")
    out = bench("--subject", "cartpole", "--from-runs", str(a), str(b), "--out", str(tmp_path))
    assert out.returncode == 1 and "max_tests is 80" in out.stderr and "Traceback" not in out.stderr
    b.write_text(saved_run("random", 0, 20) + "\n")
    out = bench("--subject", "cartpole", "--from-runs", str(a), str(b), "--out", str(tmp_path))
    assert out.returncode == 1 and "random seed 0 is saved twice" in out.stderr
    b.write_text("{not json\n")
    out = bench("--subject", "cartpole", "--from-runs", str(a), str(b), "--out", str(tmp_path))
    assert out.returncode == 1 and f"{b}:1: not a saved run" in out.stderr and "Traceback" not in out.stderr
    out = bench("--subject", "cartpole", "--from-runs", str(b.with_name("missing.jsonl")), "--out", str(tmp_path))
    assert out.returncode == 1 and "cannot read saved runs" in out.stderr
    out = bench("--subject", "cartpole", "--from-runs", str(a), "--report-dir", str(tmp_path))
    assert out.returncode == 2 and "--report-dir" in out.stderr


def test_shares_resume_and_merge_into_one_table(tmp_path: Path) -> None:
    """Two shares run real campaigns (seed 0: prt and random; seed 1: random only), a finished share resumed runs
    nothing, and --from-runs makes the table of both with the ratio of the saved runs' means."""
    common = ["--subject", "cartpole", "--max-tests", "40", "--batch", "16", "--entropy-tests", "0"]
    first = bench(
        *common, "--reps", "1", "--first-rep", "0", "--strategies", "prt,random", "--out", str(tmp_path / "a")
    )
    assert first.returncode == 0, first.stderr
    second = bench(*common, "--reps", "1", "--first-rep", "1", "--strategies", "random", "--out", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    saved_b = tmp_path / "b" / "prt_table3_cartpole.runs.jsonl"
    assert "saved 1 runs" in second.stdout and len(saved_b.read_text().splitlines()) == 1
    again = bench(
        *common, "--reps", "1", "--first-rep", "1", "--strategies", "random", "--out", str(tmp_path / "b"), "--resume"
    )
    assert again.returncode == 0, again.stderr
    assert "resuming: 1 runs" in again.stdout and len(saved_b.read_text().splitlines()) == 1
    clash = bench(
        "--subject",
        "cartpole",
        "--max-tests",
        "41",
        "--batch",
        "16",
        "--reps",
        "1",
        "--first-rep",
        "1",
        "--strategies",
        "random",
        "--out",
        str(tmp_path / "b"),
        "--resume",
    )
    assert clash.returncode == 2 and "max_tests = 40" in clash.stderr
    merged = bench(
        "--from-runs",
        str(tmp_path / "a" / "prt_table3_cartpole.runs.jsonl"),
        str(saved_b),
        "--out",
        str(tmp_path / "merged"),
        "--entropy-tests",
        "0",
    )
    assert merged.returncode == 0, merged.stderr
    runs = [
        json.loads(line)
        for path in (tmp_path / "a" / "prt_table3_cartpole.runs.jsonl", saved_b)
        for line in path.read_text().splitlines()
    ]
    assert sorted((r["strategy"], r["seed"]) for r in runs) == [("prt", 0), ("random", 0), ("random", 1)]
    prt = [r["tests"] for r in runs if r["strategy"] == "prt"]
    random = [r["tests"] for r in runs if r["strategy"] == "random"]
    assert merged.stdout.strip().splitlines()[-1] == f"prt_vs_random_first_failure={prt[0] / (sum(random) / 2):.3f}"
    table = (tmp_path / "merged" / "prt_table3_cartpole.md").read_text()
    assert "runs per strategy as in the table" in table and "campaign walls summed" in table
    assert f"| random | {sum(r['found'] for r in runs if r['strategy'] == 'random')}/2 |" in table


def test_table4_entropy_is_measured_per_strategy_and_kept_by_render(tmp_path: Path) -> None:
    """PRT's Table 4 from generated test cases only (saved runs, no campaign): one value per strategy, PRT's
    sparsest-region filling more diverse than uniform random, and --render reprints the stored values."""
    runs = tmp_path / "a.runs.jsonl"
    names = ("prt", "random", "curefuzz", "g_model")
    runs.write_text("".join(saved_run(name, 0, 10.0 + i) + "\n" for i, name in enumerate(names)))
    out = bench("--from-runs", str(runs), "--out", str(tmp_path), "--entropy-tests", "300", "--entropy-reps", "2")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("prt_entropy: "))
    values = dict(item.split("=") for item in line.removeprefix("prt_entropy: ").split())
    assert list(values) == list(names)
    assert float(values["prt"]) > float(values["random"])
    stored = json.loads((tmp_path / "prt_table3_cartpole.json").read_text())
    assert [len(stored["entropy"][n]["values"]) for n in names] == [2, 2, 2, 2]
    table = (tmp_path / "prt_table3_cartpole.md").read_text()
    assert "| g_model | " in table and "| -22.0423 |" in table  # ours beside the paper's k = 10 value
    assert "g_model (paper only: not run here)" not in table  # measured here, so no paper-only row
    again = bench("--render", str(tmp_path / "prt_table3_cartpole.json"), "--out", str(tmp_path / "r"))
    assert again.returncode == 0, again.stderr
    assert line in again.stdout.splitlines()
