"""The Indago Table 2 bench: its summary, ratios and argument checks, and a tiny run through the real suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.generated.gauntlet.v1 import simulator_pb2
from replications.replicate_indago import (
    APPROACHES,
    BenchSpec,
    failure_ratios,
    output_signal,
    parse_args,
    ratio_intervals,
    render,
    replicate,
    strategy_for,
    summarise,
)


def fake_runs(failures: dict[str, list[int]]) -> list[dict[str, Any]]:
    runs = []
    for r in range(len(next(iter(failures.values())))):
        runs.append(
            {
                "run": r + 1,
                "input_k": 2.0,
                "output_k": 2.0,
                "gini": {},
                "approaches": {
                    a: {
                        "failures": f[r],
                        "in_coverage": 50.0 * f[r] / max(max(f), 1),
                        "in_entropy": 0.0,
                        "out_coverage": 0.0,
                        "out_entropy": 0.0,
                        "replay_mismatches": 0,
                    }
                    for a, f in failures.items()
                },
            }
        )
    return runs


def test_summary_compares_every_setting_with_both_baselines() -> None:
    runs = fake_runs({"random": [0, 1, 0, 0], "sampling": [3, 2, 4, 3], "hc_rnd": [5, 6, 7, 8], "ga_rnd": [0, 0, 1, 0]})
    summary = summarise(runs, ["random", "sampling", "hc_rnd", "ga_rnd"])
    assert summary["means"]["hc_rnd"]["failures"] == 6.5
    hc = summary["tests"]["hc_rnd"]
    assert hc["random"]["failures"]["a12"] == 1.0 and hc["random"]["failures"]["p"] < 0.05
    assert hc["sampling"]["failures"]["a12"] == 1.0
    assert summary["tests"]["ga_rnd"]["sampling"]["failures"]["p"] > 0.9  # ga_rnd is not greater than sampling
    best, ratios, notes = failure_ratios(summary)
    assert best == "hc_rnd" and ratios["random"] == pytest.approx(6.5 / 0.25)
    assert ratios["sampling"] == pytest.approx(6.5 / 3.0) and not notes


def test_a_baseline_without_failures_gives_a_declared_smoothed_ratio() -> None:
    summary = summarise(
        fake_runs({"random": [0, 0], "sampling": [1, 1], "hc_sal+fail": [3, 1]}), ["random", "sampling", "hc_sal+fail"]
    )
    best, ratios, notes = failure_ratios(summary)
    assert ratios["random"] == pytest.approx((2 + 1) / (0 + 1))
    assert len(notes) == 1 and "smoothed" in notes[0] and "random" in notes[0]


def test_every_ratio_has_a_bootstrap_interval_and_the_regressor_setting_competes() -> None:
    runs = fake_runs({"random": [1, 2, 0, 1], "sampling": [2, 3, 2, 1], "hc_sal+rnd_reg": [6, 8, 7, 5]})
    summary = summarise(runs, ["random", "sampling", "hc_sal+rnd_reg"])
    best, ratios, notes = failure_ratios(summary)
    assert best == "hc_sal+rnd_reg" and "hc_sal+rnd_reg" in summary["tests"]
    intervals = ratio_intervals(summary, best, notes)
    for base in ("random", "sampling"):
        low, high = intervals[base]
        assert low < ratios[base] < high, base
    assert intervals == ratio_intervals(summary, best, notes)  # seeded: the same interval every time
    # a baseline with no failure: the interval is of the smoothed ratio, like the point estimate
    zero = summarise(fake_runs({"random": [0, 0, 0], "hc_rnd": [2, 3, 4]}), ["random", "hc_rnd"])
    best, ratios, notes = failure_ratios(zero)
    assert ratio_intervals(zero, best, notes)["random"] == (pytest.approx(3.0), pytest.approx(5.0))
    # a baseline that found failures in some runs only: resamples of its zero runs give an infinite ratio, so
    # the upper end is inf (it was nan: interpolating between two infinite resamples), the lower end finite
    some = summarise(fake_runs({"sampling": [0, 2], "hc_sal+fail": [8, 7]}), ["sampling", "hc_sal+fail"])
    best, ratios, notes = failure_ratios(some)
    low, high = ratio_intervals(some, best, notes)["sampling"]
    assert not notes and ratios["sampling"] == 7.5 and low == pytest.approx(3.5) and high == np.inf
    # the regressor setting runs hc_sal+rnd on the regressor artifact
    strategy, params = strategy_for("hc_sal+rnd_reg", {"classifier": "c", "regressor": "r"}, {})
    assert strategy == "indago" and params == {"surrogate": "r", "setting": "hc_sal+rnd"}
    with pytest.raises(ValueError, match="needs a regressor surrogate"):
        strategy_for("hc_sal+rnd_reg", {"classifier": "c"}, {})


def test_trajectory_signal_choice() -> None:
    assert output_signal("parking", [])[0] == "ego_xy"
    assert output_signal("lunarlander", [])[:2] == ("observations", (0, 1))
    declared = [
        simulator_pb2.SignalInfo(name="crashed", granularity="episode"),
        simulator_pb2.SignalInfo(name="car_pos", granularity="step", description="car position"),
    ]
    assert output_signal("new_subject", declared)[0] == "car_pos"
    assert output_signal("other", [])[:2] == ("observations", None)  # documented fallback


def test_bad_arguments_are_named() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--subject", "cartpole", "--runs", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--subject", "cartpole", "--approaches", "random,hc_nope"])
    with pytest.raises(SystemExit):
        parse_args(["--subject", "cartpole", "--approaches", "random,sampling"])  # no Indago setting
    args = parse_args(["--subject", "cartpole"])
    assert args.approaches == tuple(APPROACHES) and len(APPROACHES) == 12


def test_the_bench_trains_and_caches_a_scene_surrogate_apart_from_the_config_one(tmp_path: Path) -> None:
    """--features scene: the bench trains the classifier on the scene features and caches it under its own name,
    so a config surrogate of the same log and grid is never taken for it (nor it for one)."""
    import json

    from replications.replicate_indago import cached_surrogate

    said: list[str] = []
    scene = cached_surrogate("parking-her-tqc", "tiny", said.append, root=tmp_path, features="scene")
    assert "-classifier-tiny-scene-" in scene.name
    assert json.loads((scene / "surrogate.json").read_text())["features"]["kind"] == "scene"
    assert cached_surrogate("parking-her-tqc", "tiny", said.append, root=tmp_path, features="scene") == scene
    assert said[-1] == f"surrogate: cached {scene}"
    config = cached_surrogate("parking-her-tqc", "tiny", said.append, root=tmp_path)
    assert config != scene and "-scene-" not in config.name
    config_features = json.loads((config / "surrogate.json").read_text()).get("features")
    assert (config_features or {"kind": "config"})["kind"] == "config"
    assert parse_args(["--subject", "parking"]).features == "config"
    with pytest.raises(SystemExit):
        parse_args(["--subject", "parking", "--features", "pixels"])


def test_tiny_replication_through_the_suite(suite: Any, tmp_path: Path) -> None:
    """1 run x 3 approaches x 6 inputs on Parking (its agent fails on ~35 % of random inputs; the LunarLander
    agents now fail too rarely for 6 inputs), the whole path: campaigns, trajectory re-runs, clustering, the table."""
    from offline.surrogate_training import TuningGrid, train_zoo_surrogate
    from replications.harness import Clients

    # under the generator's artifact root: a campaign can name no surrogate elsewhere
    surrogate = train_zoo_surrogate(
        "parking-her-sac", grid=TuningGrid("one", (5.0,), (1,), 1), out_dir=suite.artifact_root / "tiny-replication"
    )
    spec = BenchSpec(
        subject="parking",
        model="parking-her-sac",
        surrogate=surrogate,
        runs=1,
        configs=6,
        approaches=("random", "hc_rnd", "train_fail"),
        batch=6,
        clusterings=2,
        search_params={"max_iterations": 5},
    )
    result = replicate(Clients.of(suite), spec, say=lambda _: None)
    run = result["runs"][0]["approaches"]
    assert set(run) == {"random", "hc_rnd", "train_fail"}
    for cell in run.values():
        # Parking rejects inputs that break its validity rules; those are stored (as invalid) beside the 6 run tests
        assert cell["executions"] >= 6 and 0 <= cell["failures"] <= 6
        assert cell["replay_mismatches"] == 0  # Parking is deterministic: every re-run fails again
        assert (cell["in_coverage"] > 0) == (cell["failures"] > 0)
    assert sum(c["failures"] for c in run.values()) >= 2
    assert result["runs"][0]["input_k"] >= 1 and result["output_signal"]["signal"] == "ego_xy"
    text = render(result, {"metrics": {}}, 1.0)
    assert "| hc_rnd |" in text and "Mean k* per run" in text
    assert np.isfinite(result["summary"]["means"]["hc_rnd"]["in_coverage"])


def test_resume_keeps_runs_made_with_the_same_settings_only(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from replications.replicate_indago import resumable_runs

    spec = BenchSpec(
        subject="cartpole",
        model="cartpole-ppo",
        surrogate=tmp_path / "s",
        runs=4,
        approaches=("random", "sampling", "hc_rnd"),
    )
    stored = {
        "spec": {**asdict(spec), "surrogate": str(spec.surrogate), "runs": 4},
        "wall_seconds": 60.0,
        "cpu_seconds": {"total": 90.0},
        "runs": fake_runs({"random": [0, 1], "sampling": [1, 2], "hc_rnd": [3, 4]}),
    }
    path = tmp_path / "indago_table2_cartpole.json"
    path.write_text(json.dumps(stored))
    runs, sessions = resumable_runs(path, spec)
    assert [r["run"] for r in runs] == [1, 2] and sessions == [{"runs": 2, "wall_seconds": 60.0, "cpu_seconds": 90.0}]
    other = BenchSpec(
        subject="cartpole",
        model="cartpole-ppo",
        surrogate=tmp_path / "s",
        runs=4,
        configs=50,
        approaches=("random", "sampling", "hc_rnd"),
    )
    with pytest.raises(SystemExit, match="other settings \\(configs\\)"):
        resumable_runs(path, other)
    with pytest.raises(SystemExit, match="no stored results"):
        resumable_runs(tmp_path / "missing.json", spec)


def test_table4_compares_the_rq4_four_against_random_and_train_fail(tmp_path: Path) -> None:
    """Table 4 (RQ4): its four approaches by default, tested against random and train. fail., and its runs'
    failure counts checked against the Table 2 file of the same campaigns."""
    import json

    from replications.replicate_indago import (
        TABLE4_APPROACHES,
        diversity_lines,
        table2_check,
        table2_check_text,
    )

    args = parse_args(["--subject", "parking", "--table", "4"])
    assert args.approaches == TABLE4_APPROACHES
    with pytest.raises(SystemExit):  # sampling is a Table 2 approach
        parse_args(["--subject", "parking", "--table", "4", "--approaches", "random,sampling,hc_sal+rnd"])
    with pytest.raises(SystemExit):  # no baseline of Table 4
        parse_args(["--subject", "parking", "--table", "4", "--approaches", "hc_sal+rnd"])
    runs = fake_runs(
        {"random": [1, 0, 2], "train_fail": [0, 1, 0], "hc_sal+rnd": [5, 6, 4], "hc_sal+rnd_reg": [2, 1, 1]}
    )
    summary = summarise(runs, TABLE4_APPROACHES, ("random", "train_fail"))
    assert set(summary["tests"]) == {"hc_sal+rnd", "hc_sal+rnd_reg"}
    assert set(summary["tests"]["hc_sal+rnd"]) == {"random", "train_fail"}
    best, ratios, notes = failure_ratios(summary)
    assert best == "hc_sal+rnd" and set(ratios) == {"random", "train_fail"}
    assert ratios["train_fail"] == pytest.approx(5.0 / (1 / 3))
    assert set(ratio_intervals(summary, best, notes)) == {"random", "train_fail"}
    # in_coverage of fake_runs grows with failures: random (mean 50) beats train_fail, so it is the one compared
    line = diversity_lines("parking", summary)[0]
    assert line.startswith("indago_table4_diversity: subject=parking setting=hc_sal+rnd in_coverage=")
    assert "(random " in line.split("in_entropy")[0]
    # the same campaigns as a Table 2 file: counts compared run by run
    spec = {"subject": "parking", "model": "m", "surrogate": "s", "regressor": "r", "configs": 100}
    table2 = tmp_path / "indago_table2_parking.json"
    t2_runs = fake_runs({"random": [1, 0, 2], "hc_sal+rnd": [5, 6, 3], "sampling": [0, 0, 0]})
    table2.write_text(json.dumps({"spec": spec, "runs": t2_runs}))
    check = table2_check(table2, {"spec": spec, "runs": runs})
    assert check is not None and check["compared"] == 6
    assert check["mismatches"] == [{"run": 3, "approach": "hc_sal+rnd", "here": 4, "table2": 3}]
    assert "5 of 6" in table2_check_text(check) and "run 3 hc_sal+rnd 4 vs 3" in table2_check_text(check)
    other = table2_check(table2, {"spec": {**spec, "configs": 50}, "runs": runs})
    assert other is not None and not other["comparable"] and "configs" in table2_check_text(other)
    assert table2_check(tmp_path / "missing.json", {"spec": spec, "runs": runs}) is None
    # a rerun without the regressor setting has no regressor: that does not make its campaigns others
    no_reg = {**spec, "regressor": None, "approaches": ["random", "hc_sal+rnd"]}
    assert table2_check(table2, {"spec": no_reg, "runs": runs})["comparable"]  # type: ignore[index]
    assert not table2_check(table2, {"spec": {**no_reg, "approaches": ["hc_sal+rnd_reg"]}, "runs": runs})["comparable"]  # type: ignore[index]


def test_distinct_failures_count_repeated_inputs_once_and_get_a_column() -> None:
    from replications.replicate_indago import distinct_count

    same = {"pos_ego": [0.5, -1.0], "goal_lane": 3}
    assert distinct_count([same, {"goal_lane": 3, "pos_ego": [0.5, -1.0]}, {**same, "goal_lane": 4}]) == 2
    assert distinct_count([]) == 0
    runs = fake_runs({"random": [2, 1], "hc_rnd": [4, 4]})
    for r, d in zip(runs, (2, 1), strict=True):
        r["approaches"]["random"]["distinct_failures"] = r["approaches"]["random"]["failures"]
        r["approaches"]["hc_rnd"]["distinct_failures"] = d  # hc_rnd repeated inputs
    summary = summarise(runs, ["random", "hc_rnd"])
    assert summary["distinct_failures"] == {"random": 1.5, "hc_rnd": 1.5}
    result = {
        "spec": {"subject": "cartpole", "model": "m", "surrogate": "s", "runs": 2, "configs": 100,
                 "approaches": ["random", "hc_rnd"], "search_params": {}},
        "summary": summary, "runs": runs, "repetitions": 1, "experiment_seconds": 1.0,
        "output_signal": {"what": "x"},
    }  # fmt: skip
    text = render(result, {"metrics": {}}, 1.0)
    assert "| approach | #F | #DF | InC |" in text and "| hc_rnd | 4.0 ± 0.0 | 1.5 |" in text
    from replications.replicate_indago import distinct_lines

    (line,) = distinct_lines("cartpole", runs, summary)
    assert line.startswith("indago_distinct_failures: subject=cartpole best=hc_rnd=1.50 random=1.50 p_random=")
    del runs[0]["approaches"]["hc_rnd"]["distinct_failures"]  # an older results file: no column
    assert "#DF" not in render({**result, "summary": summarise(runs, ["random", "hc_rnd"])}, {"metrics": {}}, 1.0)
    assert distinct_lines("cartpole", runs, summarise(runs, ["random", "hc_rnd"])) == []


def test_summarise_only_rewrites_a_stored_table_with_intervals_and_keeps_its_sessions(tmp_path: Path) -> None:
    """The committed parking-her-sac table was made before the ratio intervals: --summarise-only adds them from
    its stored runs, with the same means and the times and loads of the sessions that made it."""
    import json
    import shutil

    from replications.replicate_indago import main

    source = Path(__file__).resolve().parents[2] / "results" / "parking_her_sac" / "indago_table2_parking.json"
    shutil.copy(source, tmp_path / source.name)
    (tmp_path / "indago_table2_parking.md").write_text("> made with the 50k-step agent\n\nold table\n")
    before = json.loads(source.read_text())
    main(["--subject", "parking", "--out", str(tmp_path), "--summarise-only"])
    after = json.loads((tmp_path / source.name).read_text())
    assert after["runs"] == before["runs"] and after["wall_seconds"] == before["wall_seconds"]
    assert after["load_average_at_end"] == before["load_average_at_end"]
    assert after["summary"]["means"] == before["summary"]["means"]
    assert after["args"]["model"] == before["args"]["model"] and after["args"]["runs"] == 10
    low, high = after["ratio_ci95"]["random"]
    assert low < after["ratios"]["random"] < high
    text = (tmp_path / "indago_table2_parking.md").read_text()
    assert "indago_table2: subject=parking best=hc_sal+rnd vs_random=1.033 (95 % CI " in text
    assert "Not the campaigns" not in text  # no check against another agent's table
    assert text.startswith("> made with the 50k-step agent\n\nIndago Table 2") and "old table" not in text
    with pytest.raises(SystemExit, match="no stored results"):
        main(["--subject", "cartpole", "--out", str(tmp_path), "--summarise-only"])


def test_the_indago_agents_are_in_the_papers_failure_regime_and_the_weak_ones_stay() -> None:
    """Issue 28's subjects, as the zoo manifest records them (written by gauntlet evaluate --model-root): Parking's
    HER + TQC fails on <= 5 % of >= 2,000 random valid inputs, the MuJoCo subject's agent on 1-5 %, both with
    a 95 % interval inside the band; the weak agents they replace stay listed with their measured rates."""
    import yaml

    manifest = yaml.safe_load((Path(__file__).resolve().parents[2] / "agent_service/zoo/manifest.yaml").read_text())
    models = manifest["models"]
    for name, subject, low, high in (
        ("parking-her-tqc", "parking", 0.0, 0.05),
        ("hopper-ppo-wide", "hopper_wide", 0.01, 0.05),
    ):
        entry = models[name]
        assert entry["subject"] == subject and entry["eval_tests"] >= 2000, name
        ci_low, ci_high = entry["eval_failure_rate_ci95"]
        assert low <= ci_low <= entry["eval_failure_rate"] <= ci_high <= high, name
    assert models["parking-her-tqc"]["algorithm"] == "TQC" and models["parking-her-tqc"]["timesteps"] >= 200_000
    for weak in ("parking-her-sac", "humanoid-sac", "hopper-ppo"):  # kept as named (easy / unusable) subjects
        assert models[weak]["eval_tests"] >= 1000 and "eval_failures" in models[weak], weak
