"""The search-based replication: its statistics (replications/search_based_statistics.py) and its command line
(replications/replicate_search_based.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from common.generated.gauntlet.v1 import common_pb2, simulator_pb2
from replications.replicate_search_based import main, reuse_reference, suite_settings
from replications.search_based_statistics import (
    agent_units,
    boundary_clusters,
    boundary_vs_random,
    boundary_vs_random_cluster,
    boundary_vs_random_fisher_p,
    boundary_vs_random_p,
    built_from,
    correlation,
    failing_interval,
    load_previous,
    pearson_interval,
    pool_reports,
    sides,
    state_key,
)


def suite(tests: int, invalid: int, failing: int) -> dict:
    valid = tests - invalid
    return {"tests": tests, "invalid": invalid, "failing_tests": failing, "mean_fail_frequency": failing / valid}


def test_the_fisher_test_counts_failing_tests_of_st_against_rs_pooled_over_agents() -> None:
    # the one-agent Mario run: 8 of 22 ST tests failed, 6 of 20 RS tests (two-sided Fisher p about 0.75)
    one = {"agents": {"a": {"suites": {"ST": suite(22, 0, 8), "RS": suite(20, 0, 6)}}}}
    assert boundary_vs_random_fisher_p(one) == pytest.approx(0.7499, abs=1e-3)
    assert boundary_vs_random(one) == pytest.approx((8 / 22) / 0.3)
    # pooled: invalid tests are left out of both counts, and a clear difference is significant
    two = {
        "agents": {
            "a": {"suites": {"ST": suite(22, 2, 15), "RS": suite(22, 0, 2)}},
            "b": {"suites": {"ST": suite(22, 0, 14), "RS": suite(22, 0, 3)}},
        }
    }
    assert boundary_vs_random_fisher_p(two) < 1e-5
    # a report without the RS suite (or from before failing_tests was recorded) has no test
    for test in (boundary_vs_random_fisher_p, boundary_vs_random_p):
        assert math.isnan(test({"agents": {"a": {"suites": {"ST": suite(22, 0, 8)}}}}))
        assert math.isnan(test({"agents": {"a": {"suites": {"ST": {"tests": 1}, "RS": {"tests": 1}}}}}))


def test_each_agent_gets_its_own_fisher_test_and_intervals() -> None:
    report = {
        "agents": {
            "a": {"suites": {"ST": suite(22, 0, 15), "RS": suite(22, 0, 2)}},
            "b": {"suites": {"ST": suite(22, 0, 3), "RS": suite(22, 0, 3)}},
        }
    }
    assert boundary_vs_random_fisher_p(report, "a") < 1e-3
    assert boundary_vs_random_fisher_p(report, "b") == pytest.approx(1.0)
    assert boundary_vs_random_p(report, "a") < 1e-3
    assert boundary_vs_random_p(report, "b") == pytest.approx(1.0)
    assert boundary_vs_random(report, "b") == pytest.approx(1.0)
    low, high = failing_interval(suite(22, 2, 0))  # 0 of 20 valid tests: Wilson's interval is not empty
    assert low == 0.0 and 0.1 < high < 0.2


def with_tests(per_test: dict[str, float]) -> dict:
    failing = sum(1 for f in per_test.values() if f > 0.5)
    return {**suite(len(per_test), 0, failing), "per_test": per_test}


def test_the_permutation_test_shuffles_within_agents_where_the_pooled_fisher_table_mixes_them() -> None:
    # within each agent boundary and random states fail alike (a: 6 of 12 both sides; b never fails), but b has
    # many more boundary tests than random ones: one pooled table sees a difference that no agent has
    report = {
        "agents": {
            "a": {"suites": {"ST": suite(12, 0, 6), "RS": suite(12, 0, 6)}},
            "b": {"suites": {"ST": suite(10, 0, 0), "RS": suite(200, 0, 0)}},
        }
    }
    assert boundary_vs_random_fisher_p(report) < 0.01
    assert boundary_vs_random_p(report) == pytest.approx(1.0)
    assert boundary_vs_random(report) == pytest.approx(1.0)
    # the permutation p is seeded (the same report gives the same p) and resolves to 1 / (permutations + 1)
    clear = {"agents": {"a": {"suites": {"ST": suite(30, 0, 30), "RS": suite(30, 0, 0)}}}}
    assert boundary_vs_random_p(clear) == boundary_vs_random_p(clear) == pytest.approx(1 / 20_001)


def test_a_state_several_boundary_suites_share_is_one_test() -> None:
    reference = [0, 1, 1, 0, 1]
    assert state_key([0, 1, 1], reference) == "3"
    assert state_key([0, 1, 0], reference) == "2+0"
    assert state_key([0, 0, 1], reference) == "1+0,1"
    assert state_key([], reference) == "0"
    # AC(1)'s combination that takes τ_ref's own action is ST's test: counted once on the boundary side
    st = {**with_tests({"3": 1.0, "5": 0.0}), "per_boundary": {0: 1.0, 1: 0.0}}
    ac = with_tests({"3": 1.0, "2+0": 1.0, "5": 0.0, "4+0": 0.0})
    suites = {"ST": st, "AC(1)": ac, "RS": with_tests({"1": 0.0, "4": 1.0})}
    report = {"search": {"boundary_depths": [3, 5]}, "agents": {"a": {"suites": suites}}}
    boundary, random = sides(report, "a")
    assert sorted(boundary) == [0.0, 0.0, 1.0, 1.0] and sorted(random) == [0.0, 1.0]
    # a results file from before per-test records: ST's tests are rebuilt from its boundary states' frequencies
    legacy = {"tests": 2, "invalid": 0, "failing_tests": 1, "mean_fail_frequency": 0.5, "per_boundary": {0: 1.0, 1: 0}}
    suites["ST"] = legacy
    assert sorted(sides(report, "a")[0]) == [0.0, 0.0, 1.0, 1.0]


def test_a_resumed_suite_is_kept_only_under_its_own_settings() -> None:
    previous = {"parameters": {"n": 1, "l": 40, "random_states": 22}}
    assert suite_settings(previous, {"tests": 22}, random=True) == {"n": 1, "l": 40, "count": 22}
    assert suite_settings(previous, {"tests": 22}, random=False) == {"n": 1, "l": 40}
    recorded = {"settings": {"n": 1, "l": 40, "count": 150}}
    assert suite_settings(previous, recorded, random=True) == {"n": 1, "l": 40, "count": 150}


def test_the_correlation_interval_is_fishers_z() -> None:
    low, high = pearson_interval(-0.7, 28)
    assert low == pytest.approx(-0.851, abs=1e-3) and high == pytest.approx(-0.443, abs=1e-3)
    assert all(math.isnan(v) for v in pearson_interval(-0.7, 3))
    rows = {
        m: {"suites": {"ST": {**suite(10, 0, f), "mean_reward": 100.0 - 10 * f}, "RS": suite(10, 0, 1)}}
        for m, f in (("a", 1), ("b", 3), ("c", 5), ("d", 8))
    }
    measured = correlation({"agents": rows})  # RS left out: one point per (agent, stage) here
    assert measured["pairs"] == 4 and measured["agents"] == 4 and measured["pearson_r"] == pytest.approx(-1.0)


def test_a_resumed_results_file_keeps_integer_keys(tmp_path: Path) -> None:
    stored = {
        "agents": {
            "a": {
                "suites": {"ST": {**suite(2, 0, 1), "per_boundary": {"0": 1.0, "1": 0.0}}},
                "performance": {"robust": {"R_a": {"20": 5.0}, "R_t": {"20": 6.0}}},
            }
        }
    }
    path = tmp_path / "search_based_x.json"
    path.write_text(json.dumps(stored))
    report = load_previous(path)
    assert report is not None and report["agents"]["a"]["suites"]["ST"]["per_boundary"] == {0: 1.0, 1: 0.0}
    assert report["agents"]["a"]["performance"]["robust"]["R_a"] == {20: 5.0}
    assert load_previous(tmp_path / "none.json") is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--suites", "ST,XY"], "--suites: unknown XY"),
        (["--repetitions", "0"], "--repetitions must be in 1..1000000"),
        (["--reference", "no-such-file.json"], "--reference: no file"),
        (["--focus-models", "other", "--focus-suites", "IT"], "--focus-models: other not among --model"),
        (["--focus-models", "m", "--focus-suites", "IT,XY"], "--focus-suites: unknown XY"),
        (["--focus-models", "m"], "--focus-models and --focus-suites go together"),
        (["--focus-models", "m", "--focus-suites", "RS", "--focus-random-states", "0"], "--focus-random-states must"),
        (
            ["--reference-rule", "shortest", "--printed-visited-rule"],
            "--reference-rule shortest needs states revisited",
        ),
        (["--reference-rule", "longest"], "argument --reference-rule: invalid choice"),
    ],
)
def test_bad_flags_stop_before_any_service_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--subject", "mario_1_1", "--model", "m", *flags])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_boundary_states_tests_are_its_cluster_and_overlapping_clusters_merge() -> None:
    depths, length = [3, 4, 10], 12
    assert built_from("ST", "4", depths, length) == {1}
    assert built_from("IT(1)", "4", depths, length) == {0, 1}  # 4 is within 1 of depths 3 and 4
    assert built_from("IT(1)", "11", depths, length) == {2}
    assert built_from("AC(2)", "8+1,0", depths, length) == {2}  # 2 actions after depth - 2 = 8
    assert built_from("AC(1)", "9+1", depths, length) == {2}
    assert built_from("AC(2)", "IT(2)#3", depths, length) is None  # no state key: cannot be placed
    suites = {
        "ST": with_tests({"3": 1.0, "4": 1.0, "10": 0.0}),
        "IT(1)": with_tests({"2": 1.0, "3": 1.0, "4": 1.0, "5": 0.0, "9": 0.0, "10": 0.0, "11": 1.0}),
        "AC(1)": with_tests({"2+0": 1.0, "9+1": 0.0}),
        "RS": with_tests({"1": 0.0, "7": 1.0}),
    }
    report = {"search": {"boundary_depths": depths, "reference_length": length}, "agents": {"a": {"suites": suites}}}
    clusters = boundary_clusters(report)
    assert clusters is not None
    assert clusters["a"] == {
        "3": "3-4", "4": "3-4", "10": "10", "2": "3-4", "5": "3-4", "9": "10", "11": "10", "2+0": "3-4", "9+1": "10",
    }  # fmt: skip
    compared = boundary_vs_random_cluster(report, "a")
    assert compared.units == (2, 2)
    assert compared.ratio == pytest.approx(boundary_vs_random(report, "a"))  # the same tests, weighed alike
    legacy = {**report, "agents": {"a": {"suites": {**suites, "IT(1)": suite(7, 0, 4)}}}}
    assert boundary_clusters(legacy) is None and math.isnan(boundary_vs_random_cluster(legacy).p_value)


def clustered_report() -> dict:
    """Four boundary states 100 apart, each with 21 IT(10) tests sharing its outcome (two fail throughout, two
    pass), against 84 random states of which 25 fail: per test 42 of 84 against 25 of 84."""
    depths = [100, 200, 300, 400]
    it = {str(d + o): 1.0 if d < 300 else 0.0 for d in depths for o in range(-10, 11)}
    rs = {str(n): 1.0 if i < 25 else 0.0 for i, n in enumerate(range(500, 584))}
    # per_boundary as the bench records it (load_previous gives every suite one)
    suites = {"IT(10)": {**with_tests(it), "per_boundary": {}}, "RS": {**with_tests(rs), "per_boundary": {}}}
    return {
        "subject": "x",
        "models": ["a"],
        "parameters": {"n": 1},
        "search": {"success": True, "boundary_depths": depths, "reference_length": 600, "samples": 1, "visited": 1,
                   "seconds": 1.0},
        "agents": {"a": {"suites": suites}},
        "complete": True,
    }  # fmt: skip


def test_clustered_tests_that_look_significant_one_by_one_are_not_as_clusters() -> None:
    report = clustered_report()
    assert boundary_vs_random_p(report) < 0.05  # the tests taken as independent (about 0.011)
    compared = boundary_vs_random_cluster(report)
    assert compared.units == (4, 84)
    assert compared.ratio == pytest.approx(boundary_vs_random(report)) == pytest.approx(42 / 25)
    assert compared.p_value > 0.2 and compared.ratio_ci95[0] < 1.0 < compared.ratio_ci95[1]


def test_summarise_only_adds_the_cluster_statistics_to_the_stored_file_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = {**clustered_report(), "command": "python replications/replicate_search_based.py --subject x --model a"}
    path = tmp_path / "search_based_x.json"
    path.write_text(json.dumps(stored, indent=1))
    assert main(["--subject", "x", "--out", str(tmp_path), "--summarise-only"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "boundary_vs_random_state_fail_rate=1.680" in printed
    assert any(line.startswith("boundary_vs_random_cluster_ci95=") for line in printed)
    p = next(line for line in printed if line.startswith("boundary_vs_random_cluster_p="))
    again = json.loads(path.read_text())
    assert float(p.split("=")[1]) == pytest.approx(again["boundary_vs_random_cluster"]["pooled"]["p"], abs=1e-4)
    assert {k: v for k, v in again.items() if k != "boundary_vs_random_cluster"} == stored  # counts unchanged
    md = path.with_suffix(".md").read_text()
    assert stored["command"] in md and "| pooled | 4 | 84 | 1.68 (" in md
    with pytest.raises(SystemExit, match="no stored results"):
        main(["--subject", "y", "--out", str(tmp_path), "--summarise-only"])
    with pytest.raises(SystemExit):  # without --summarise-only a run needs its models
        main(["--subject", "x", "--out", str(tmp_path)])
    assert "--model is required" in capsys.readouterr().err


class DeclaringSimulator:
    """A simulator stub that answers DescribeEnvironment with mario_1_1's search declaration (actions 0, 1 in that
    order, initial test case noop_frames 0, seed 0)."""

    def DescribeEnvironment(self, request: object, timeout: float) -> simulator_pb2.DescribeEnvironmentResponse:
        search = simulator_pb2.SearchDeclaration(actions=[0, 1], agent_actions=2, seed=0)
        search.initial["noop_frames"].CopyFrom(common_pb2.Value(integer=0))
        return simulator_pb2.DescribeEnvironmentResponse(search=search)


def stored_reference(path: Path, actions: list[int], initial: dict) -> Path:
    document = {
        "format": "gauntlet.search_reference.v1", "subject": "mario_1_1", "initial": initial, "seed": 0,
        "search_actions": actions, "agent_actions": 2, "success": True, "reference_actions": [1, 1, 0],
        "reference_rewards": [0.0, 0.0, 1.0], "reference_states": [], "boundary": [{"depth": 1, "state": [0]}],
        "stats": {"samples": 9, "visited": 5, "explored": 2, "seconds": 1.0, "stopped": "goal"},
    }  # fmt: skip
    path.write_text(json.dumps(document))
    return path


def test_a_stored_reference_may_have_searched_the_actions_in_another_order_or_from_another_start(
    tmp_path: Path,
) -> None:
    simulator = DeclaringSimulator()
    reversed_order = stored_reference(tmp_path / "reversed.json", [1, 0], {"noop_frames": 0})
    document = reuse_reference(simulator, "mario_1_1", reversed_order, tmp_path / "copy.json")  # type: ignore[arg-type]
    assert document["search_actions"] == [1, 0] and document["stats"]["declared_search_actions"] == [0, 1]
    assert json.loads((tmp_path / "copy.json").read_text())["search_actions"] == [1, 0]
    later = stored_reference(tmp_path / "later.json", [0, 1], {"noop_frames": 30})
    document = reuse_reference(simulator, "mario_1_1", later, tmp_path / "copy.json")  # type: ignore[arg-type]
    assert document["stats"]["initial"] == {"noop_frames": 30}
    assert document["stats"]["declared_initial"] == {"noop_frames": 0}
    for actions, initial in (([0, 2], {"noop_frames": 0}), ([0], {"noop_frames": 0}), ([0, 1], {"frames": 0})):
        other = stored_reference(tmp_path / "other.json", actions, initial)
        with pytest.raises(SystemExit, match="declares actions \\[0, 1\\] \\(in any order\\)"):
            reuse_reference(simulator, "mario_1_1", other, tmp_path / "copy.json")  # type: ignore[arg-type]


def one_reference(tmp_path: Path, name: str, actions: list[int], rs: dict[str, float], st: dict[str, float]) -> Path:
    """A results file of one agent "a" on a reference trace `actions` with boundary states at depths 3 and 10, and
    the reference document beside it (name.ref.json)."""
    stored_reference(tmp_path / f"{name}.ref.json", [0, 1], {"noop_frames": 0})
    document = json.loads((tmp_path / f"{name}.ref.json").read_text())
    document |= {"reference_actions": actions, "boundary": [{"depth": 3, "state": [0]}, {"depth": 10, "state": [1]}]}
    (tmp_path / f"{name}.ref.json").write_text(json.dumps(document))
    report = {
        "subject": "x",
        "models": ["a"],
        "search": {"boundary_depths": [3, 10], "reference_length": len(actions), "search_actions": [0, 1]},
        "agents": {"a": {"suites": {"ST": with_tests(st), "RS": with_tests(rs)}}},
        "complete": True,
    }
    (tmp_path / f"{name}.json").write_text(json.dumps(report))
    return tmp_path / f"{name}.json"


def test_pooled_references_are_units_of_their_own_except_for_the_states_they_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two traces with a common prefix of 5 actions: states 3 and 5 are the same on both, states 7 and 10 are not
    first_trace, second_trace = [0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0], [0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1]
    first = one_reference(tmp_path, "first", first_trace, {"5": 0.0, "7": 1.0}, {"3": 1.0, "10": 0.0})
    second = one_reference(tmp_path, "second", second_trace, {"5": 0.0, "7": 0.0}, {"3": 1.0, "10": 1.0})
    stored = json.loads(second.read_text())
    stored["agents"]["b"] = stored["agents"]["a"]  # an agent only the second reference tested
    second.write_text(json.dumps(stored))
    paths, references = [first, second], [tmp_path / "first.ref.json", tmp_path / "second.ref.json"]
    pooled = pool_reports(paths, references, "x")
    assert list(pooled["agents"]) == ["a", "b"] and pooled["agents"]["b"] == {"references": ["R2"]}
    assert [r["boundary_states_shared_with_earlier_references"] for r in pooled["references"]] == [0, 1]
    units = agent_units(pooled, "a")
    assert units is not None
    assert units[0] == {"R1:3": (1.0, 1), "R1:10": (0.0, 1), "R2:10": (1.0, 1)}  # the shared state 3 once
    assert set(units[1]) == {"R1:RS 5", "R1:RS 7", "R2:RS 7"}  # the same key, another state: two units
    assert agent_units(pooled, "b") == (
        {"R1:3": (1.0, 1), "R2:10": (1.0, 1)},
        {"R1:RS 5": (0.0, 1), "R2:RS 7": (0.0, 1)},
    )
    assert boundary_vs_random(pooled, "a") == pytest.approx((2 / 3) / (1 / 3))
    compared = boundary_vs_random_cluster(pooled, "a")
    assert compared.units == (3, 3) and compared.ratio == pytest.approx(2.0)
    flags = ["--summarise-only", "--pool", *map(str, paths), "--pool-references", *map(str, references)]
    assert main(["--subject", "x", "--out", str(tmp_path), *flags]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-6].startswith("boundary_vs_random_state_fail_rate=")
    assert printed[-1].startswith("boundary_vs_random_cluster_p=")
    written = json.loads((tmp_path / "search_based_x_pooled.json").read_text())
    assert [r["label"] for r in written["references"]] == ["R1", "R2"] and "sources" not in written
    assert written["boundary_vs_random_cluster"]["agents"]["a"]["boundary_clusters"] == 3
    md = (tmp_path / "search_based_x_pooled.md").read_text()
    assert "| R2 | " in md and "| pooled | " in md
    with pytest.raises(SystemExit, match="not 'y'"):
        pool_reports(paths, references, "y")
    # the sensitivity check: clusters of the two references with boundary states at nearby places merge too
    near = pool_reports(paths, references, "x", merge_within=0.5)  # state 10 is at place 1 on both, state 3 at 0
    assert agent_units(near, "a") == ({"R1:3": (1.0, 1), "R1:10": (1.0, 2)}, agent_units(pooled, "a")[1])  # type: ignore[index]
    wide = pool_reports(paths, references, "x", merge_within=1.0)  # R2:10 is within 1 of both of R1's clusters
    assert agent_units(wide, "a") == ({"R1:3": (2.0, 3)}, agent_units(pooled, "a")[1])  # type: ignore[index]
    assert main(["--subject", "x", "--out", str(tmp_path), *flags, "--pool-merge-within", "0.5"]) == 0
    assert "--pool-merge-within 0.5" in (tmp_path / "search_based_x_pooled_within0.5.md").read_text()
    other = stored_reference(tmp_path / "other.ref.json", [0, 1], {"noop_frames": 0})  # a 3-action trace
    with pytest.raises(SystemExit, match="not the reference trace"):
        pool_reports(paths, [references[0], other], "x")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--pool", "a.json", "b.json"], "--pool pools stored results files: it needs --summarise-only"),
        (["--summarise-only", "--pool", "a.json"], "--pool needs two or more different results files"),
        (["--summarise-only", "--pool", "a.json", "a.json"], "--pool needs two or more different results files"),
        (["--summarise-only", "--pool", "a.json", "b.json"], "--pool-references: one reference document per --pool"),
        (
            ["--summarise-only", "--pool", "a", "b", "--pool-merge-within", "-1"],
            "--pool-merge-within must be a distance",
        ),
    ],
)
def test_bad_pool_flags_stop_before_anything_is_read(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--subject", "x", *flags])
    assert stopped.value.code == 2 and message in capsys.readouterr().err
