"""replications/replicate_qd.py split over processes: two one-seed shares summarised together equal one two-seed
table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMON = [
    "--subject",
    "taxi_large",
    "--budget",
    "50",
    "--batch",
    "25",
    "--methods",
    "random,map_elites",
    "--initial",
    "25",
    "--no-final-states",
]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "replications/replicate_qd.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_split_seeds_merge_into_one_table(tmp_path: Path) -> None:
    shares = []
    for first in (0, 1):
        out = _bench(*COMMON, "--seeds", "1", "--first-seed", str(first), "--out", str(tmp_path / f"s{first}"))
        assert out.returncode == 0, out.stderr[-2000:]
        assert "summarise with --from-runs" in out.stdout  # one seed: runs saved, no table
        saved = tmp_path / f"s{first}" / "qd_taxi_large.runs.jsonl"
        rows = [json.loads(line) for line in saved.read_text().splitlines()]
        assert sorted(r["method"] for r in rows) == ["map_elites", "random"]
        assert {r["seed"] for r in rows} == {first} and all(r["budget"] == 50 and r["tests"] == 50 for r in rows)
        shares.append(saved)
    # The command line's budget differs on purpose: the table must state the runs' own settings.
    out = _bench(
        "--subject", "taxi_large", "--budget", "5000", "--from-runs", *map(str, shares), "--out", str(tmp_path)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "qd_taxi_large.md").read_text()
    assert "5 seeds" not in table and "2 seeds x 50+ tests per method" in table
    assert "--seeds 2 --budget 50 --batch 25 --initial 25 --methods random,map_elites --no-final-states" in table
    stored = json.loads((tmp_path / "qd_taxi_large.json").read_text())
    assert [r["seed"] for r in stored["runs"]["random"]] == [0, 1]

    # Runs made with other settings are not silently mixed.
    mixed = tmp_path / "mixed.jsonl"
    other = json.loads(shares[1].read_text().splitlines()[0]) | {"budget": 100}
    mixed.write_text(shares[0].read_text() + json.dumps(other) + "\n")
    out = _bench("--subject", "taxi_large", "--from-runs", str(mixed), "--out", str(tmp_path))
    assert out.returncode == 1 and f"{mixed}:3: budget is 100 but earlier runs have 50" in out.stderr
    assert "Traceback" not in out.stderr
    # Overlapping shares, a cut-off line and an unreadable file are named, never a traceback.
    twice = tmp_path / "twice.jsonl"
    twice.write_text(shares[0].read_text() * 2)
    out = _bench("--subject", "taxi_large", "--from-runs", str(twice), "--out", str(tmp_path))
    assert out.returncode == 1 and f"{twice}:3: random seed 0 is saved twice" in out.stderr
    cut = tmp_path / "cut.jsonl"
    cut.write_text(shares[0].read_text()[:-40])
    out = _bench("--subject", "taxi_large", "--from-runs", str(cut), "--out", str(tmp_path))
    assert out.returncode == 1 and f"{cut}:2: not a saved run" in out.stderr and "Traceback" not in out.stderr
    out = _bench("--subject", "taxi_large", "--from-runs", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path))
    assert out.returncode == 1 and "cannot read saved runs" in out.stderr and "Traceback" not in out.stderr


def test_ffs_is_averaged_over_the_runs_that_have_one_and_the_table_says_how_many() -> None:
    from replications.replicate_qd import summarise

    def run(seed: int, fs: float, ffs: float) -> dict:
        return {
            "seed": seed,
            "checkpoints": [50, 100],
            "faults": [1, 4],
            "bs": [10, 20],
            "fbs": [1, 4],
            "fs": [fs, fs],
            "ffs": [float("nan"), ffs],
            "campaign_seconds": 1.0,
            "invalid": 0,
        }

    nan = float("nan")
    results = {"random": [run(0, 2.0, 1.0), run(1, 2.0, nan)], "map_elites": [run(0, 1.0, 3.0), run(1, 3.0, 1.0)]}
    text, summary = summarise("taxi_large", results)
    # random's mean FFS is its one defined run (1.0); map_elites' is (3 + 1) / 2 = 2.0.
    assert summary["map_elites"]["ffs"]["relative_final"] == 2.0
    assert summary["random"]["ffs"]["runs_defined_at_end"] == 1
    assert summary["map_elites"]["ffs"]["runs_defined_at_end"] == 2
    assert summary["map_elites"]["fs"]["relative_final"] == 1.0
    assert "| random | 1.00 | 1.00 |  | 1.00 | 1.00 | 1/2 |  |" in text
    assert "| map_elites | 1.00 | 1.00 | ≈0 | 2.00 | 2.00 | 2/2 |" in text


def test_from_runs_can_summarise_a_subset_of_methods_under_a_tag(tmp_path: Path) -> None:
    """Seeds only random and MAP-Elites finished count when --methods names just them; the table and the runs it
    counts go to qd_<subject>_<tag>.*, and the command that summarised them is in the table."""
    shares = []
    for first in (0, 1):
        out = _bench(*COMMON, "--seeds", "1", "--first-seed", str(first), "--out", str(tmp_path / f"s{first}"))
        assert out.returncode == 0, out.stderr[-2000:]
        shares.append(tmp_path / f"s{first}" / "qd_taxi_large.runs.jsonl")
    # a third method that only seed 0 has: without --methods, seed 1 is not complete and no table can be made
    extra = tmp_path / "extra.jsonl"
    row = json.loads(shares[0].read_text().splitlines()[0]) | {"method": "novelty_search"}
    extra.write_text(json.dumps(row) + "\n")
    paths = [*map(str, shares), str(extra)]
    out = _bench("--subject", "taxi_large", "--from-runs", *paths, "--out", str(tmp_path))
    assert out.returncode == 1 and "at least 2 seeds" in out.stderr
    out = _bench(
        "--subject", "taxi_large", "--from-runs", *paths, "--methods", "random,map_elites", "--tag", "two",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "qd_taxi_large_two.md").read_text()
    assert "2 seeds x 50+ tests per method" in table and "novelty_search" not in table
    assert "--methods random,map_elites --tag two`" in table
    counted = [json.loads(line) for line in (tmp_path / "qd_taxi_large_two.runs.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["seed"]) for r in counted) == [
        ("map_elites", 0), ("map_elites", 1), ("random", 0), ("random", 1)
    ]  # fmt: skip
    out = _bench("--subject", "taxi_large", "--from-runs", *paths, "--methods", "random,fuzzer", "--out", str(tmp_path))
    assert out.returncode == 1 and "no saved runs of fuzzer" in out.stderr
