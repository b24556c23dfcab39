"""bench/replicate_prt.py re-renders a stored Table 3 run: table, paper rows, notes and the exact final line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_render_rewrites_a_stored_run_without_running_campaigns(tmp_path: Path) -> None:
    stored = {"args": {"subject": "mountaincar_continuous", "reps": 2, "max_tests": 50, "batch": 16,
                       "strategies": "prt,random,map_elites", "me_init": 100, "fuzz_init": 100},
              "model": "mountaincar-continuous-sac", "wall_seconds": 60.0,
              "results": {"prt": {"tests": [3.0, 50.0], "seconds": [1.0, 9.0], "found": [True, False]},
                          "random": {"tests": [50.0, 50.0], "seconds": [8.0, 8.5], "found": [False, False]},
                          "map_elites": {"tests": [40.0, 20.0], "seconds": [7.0, 4.0], "found": [True, True]}}}
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(stored))
    out = subprocess.run([sys.executable, "bench/replicate_prt.py", "--render", str(path), "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == f"prt_vs_random_first_failure={26.5 / 50:.3f}"
    table = (tmp_path / "prt_table3_mountaincar_continuous.md").read_text()
    assert "| prt | 1/2 | ≥26.5 ± 33.2 |" in table
    assert "| random | 0/2 | no failure within 50 tests |" in table
    assert "| map_elites | 2/2 | 30.0 ± 14.1 |" in table and "| 656.1 | 4.23 |" in table  # the paper's QD row
    assert "g_model (not in Gauntlet)" in table
    assert "random: no failure within 50 tests in any of the 2 runs." in table
    assert "prt: 1 of 2 runs found no failure within 50 tests" in table


def test_bad_options_are_named() -> None:
    out = subprocess.run([sys.executable, "bench/replicate_prt.py", "--strategies", "prt,bogus"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown bogus" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, "bench/replicate_prt.py", "--strategies", "random,map_elites"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "must include prt and random" in out.stderr
