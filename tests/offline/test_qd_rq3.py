"""The QD paper's RQ3 on BipedalWalker: the four behaviour spaces' subjects (replications/replicate_qd.py), their
grid edges (replications/bipedal_spaces.py's results) and the one-table summary (replications/qd_rq3.py)."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from replications.qd_rq3 import SPACES, load_spaces, random_faults_agree, render
from replications.replicate_qd import SUBJECTS, summarise
from subjects.bipedal.oracle import BIPEDAL_PAIRS

ROOT = Path(__file__).resolve().parents[2]


def test_each_space_is_the_walker_with_another_oracle_and_the_measured_edges() -> None:
    measured = json.loads((ROOT / "results" / "bipedal_spaces.json").read_text())["features"]
    oracles = {e.name: e for e in entry_points(group="gauntlet.oracles")}
    for subject in SPACES:
        setup = SUBJECTS[subject]
        space = subject.removeprefix("bipedalwalker_obstacles").removeprefix("_")
        assert (setup.subject or subject) == "bipedalwalker_obstacles" and setup.model == "bipedalwalker-obstacles-ppo"
        if not space:
            continue  # the main space: its own documented edges (Distance ours, Hull angle the authors')
        oracle = oracles[setup.oracle].load()
        assert setup.oracle == f"bipedal_fall_{space}" and oracle.descriptor_names == BIPEDAL_PAIRS[space]
        # the grid is the calibration's edges, feature by feature, so the table's grid note is the measured one
        for axis, feature in enumerate(BIPEDAL_PAIRS[space]):
            assert setup.grid.low[axis] == measured[feature]["edge_low"]
            assert setup.grid.high[axis] == measured[feature]["edge_high"]
            # the random tests' range lies inside the edges
            assert setup.grid.low[axis] <= measured[feature]["min"] <= measured[feature]["max"] <= setup.grid.high[axis]


def _run(seed: int, faults: int, bs: int, budget: int = 300) -> dict[str, Any]:
    return {
        "seed": seed,
        "budget": budget,
        "batch": 50,
        "initial": 60,
        "final_states": False,
        "checkpoints": [50, 100],
        "faults": [1, faults],
        "faults_reachable": [1, 3],
        "bs": [10, bs],
        "fbs": [1, 2],
        "fs": [],
        "ffs": [],
        "campaign_seconds": 1.0,
        "invalid": 0,
        "failing_slots_seen": {"2": faults},
        "replays_not_failing": 0,
    }


def _write(path: Path, rows: list[tuple[str, dict[str, Any]]]) -> Path:
    path.write_text("".join(json.dumps({"method": m, **r}) + "\n" for m, r in rows))
    return path


def test_the_table_keeps_seeds_every_space_finished_and_refuses_other_settings(tmp_path: Path) -> None:
    paths = []
    for i, subject in enumerate(SPACES):
        seeds = range(3 if i == 0 else 2)  # the main space has a seed the others lack
        rows = [("random", _run(s, 10 + s, 50)) for s in seeds]
        rows += [("map_elites", _run(s, 14 + s + i, 52)) for s in seeds]
        paths.append(_write(tmp_path / f"{subject}.jsonl", rows))
    spaces, settings = load_spaces(paths, list(SPACES))
    assert settings["budget"] == 300
    assert all([r["seed"] for r in res["random"]] == [0, 1] for res in spaces.values())
    assert random_faults_agree(spaces)
    summaries = {s: summarise(s, res)[1] for s, res in spaces.items()}
    text = render(spaces, summaries, settings)
    assert "four behaviour spaces, 2 seeds x 300 tests" in text
    assert "| Torque, Jump | map_elites | 16 [15, 16] | +48 |" in text  # median 15.5 (15, 16) vs random's 10.5
    assert text.endswith("seed by seed (same inputs, only descriptors differ): yes")

    # random testing that disagrees across spaces is reported, not hidden
    rows = [("random", _run(s, 99, 50)) for s in range(2)] + [("map_elites", _run(s, 14, 52)) for s in range(2)]
    odd = _write(tmp_path / "odd.jsonl", rows)
    spaces, _ = load_spaces([*paths[:3], odd], list(SPACES))
    assert not random_faults_agree(spaces)

    other = _write(tmp_path / "other.jsonl", [("random", _run(s, 10, 50, budget=500)) for s in range(2)])
    with pytest.raises(SystemExit, match="budget is 500 but the other spaces' runs have 300"):
        load_spaces([*paths[:3], other], list(SPACES))


def test_the_bench_ends_with_map_elites_against_random_and_its_p_value() -> None:
    from replications.replicate_qd import closing_line

    results = {
        "random": [_run(s, 10 + s, 50) for s in range(4)],
        "map_elites": [_run(s, 20 + s, 52) for s in range(4)],
    }
    _, summary = summarise("bipedalwalker_obstacles", results)
    line = closing_line(summary)
    # medians 21.5 and 11.5 (+87 %); every ME run beats every random run: A12 = 1, p = 1/70 for 4 against 4
    assert line == "map_elites_vs_random_faults: map_elites=21.5 random=11.5 (+87 %) p=0.014 a12=1.00"
    assert closing_line({"random": summary["random"]}) == ""
