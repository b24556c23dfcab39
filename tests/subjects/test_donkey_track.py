"""The Donkey track model: geometry, the five validity rules, the generator, Indago's operators, the 24-dim encoding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from generator_service.surrogates.encoding import Encoder
from generator_service.surrogates.search import Budget, Mutator, crossover, genetic, hill_climb, subject_validity
from simulator_service.subject import load_subjects
from subjects.donkey.track import (
    UNIT_LENGTH,
    TrackOperators,
    TrackRules,
    as_records,
    centre_line,
    is_valid,
    parse_track_string,
    random_track,
    track_string,
    violations,
)

# 3 curves: 120 deg left, 60 deg right, 60 deg left; 30 + 12 + ... units, no self-approach
VALID = [
    ("S", 5),
    ("DY", 10),
    ("L", 12),
    ("S", 5),
    ("DY", 10),
    ("R", 6),
    ("S", 3),
    ("DY", 10),
    ("L", 6),
    ("S", 5),
    ("S", 5),
    ("S", 5),
]
RQ4 = TrackRules(min_curves=2, max_turn_deg=130, min_hardest_deg=0)


def with_pair(track: list[tuple[str, float]], i: int, pair: tuple[str, float]) -> list[tuple[str, float]]:
    out = list(track)
    out[i] = pair
    return out


def rules_named(problems: list[str]) -> set[str]:
    return {p.split("rule ")[1][0] for p in problems if "rule " in p}


def test_geometry_units_and_turn_directions() -> None:
    g = centre_line([("S", 3)])
    np.testing.assert_allclose(g.points[-1], [0.0, 3 * UNIT_LENGTH], atol=1e-9)  # north, 2 m per unit
    left = centre_line([("DY", 90), ("L", 1)]).points[-1]
    right = centre_line([("DY", 90), ("R", 1)]).points[-1]
    np.testing.assert_allclose(left, [-UNIT_LENGTH, 0.0], atol=1e-9)  # heading turned before the unit is laid
    np.testing.assert_allclose(right, [UNIT_LENGTH, 0.0], atol=1e-9)
    assert len(centre_line(VALID).points) == 1 + sum(v for c, v in VALID if c != "DY")
    assert centre_line(VALID).segment_pair.tolist()[:6] == [0] * 5 + [2]  # DY lays no road


def test_the_valid_track_passes_every_rule_and_round_trips_as_a_string() -> None:
    assert violations(VALID) == []
    text = track_string(VALID)
    assert text.startswith("S 5@DY 10@L 12@") and len(text.split("@")) == 12
    assert parse_track_string(text) == [(c, float(v)) for c, v in VALID]


@pytest.mark.parametrize(
    "track, rule, where",
    [
        (with_pair(VALID, 4, ("DY", 60.5)), "0", "track[4] (DY 60.5)"),  # DY rate beyond 50
        (with_pair(VALID, 3, ("S", 2.5)), "0", "track[3] (S 2.5)"),  # units must be whole
        (with_pair(VALID, 0, ("DY", 10)), "1", "track[0] is DY"),  # must start with S
        (with_pair(VALID, 11, ("L", 3)), "1", "track[11] is L"),  # must end with S
        (with_pair(VALID, 5, ("S", 6)), "2", "track[4] is DY followed by S"),  # DY then S
        (with_pair(VALID, 4, ("S", 6)), "2", "track[5] is R without a DY"),  # curve without DY
    ],
)
def test_grammar_rules_name_the_pair_and_the_rule(track: list, rule: str, where: str) -> None:
    problems = violations(track)
    assert rule in rules_named(problems), problems
    assert any(where in p for p in problems), problems


def test_rule_3_self_intersection_crossing_and_near_miss() -> None:
    # two 150-deg left turns (270 deg together) send the road back across its first straight
    crossing = [
        ("S", 10),
        ("DY", 30),
        ("L", 5),
        ("DY", 30),
        ("L", 5),
        ("S", 20),
        ("DY", 10),
        ("R", 12),
        ("S", 1),
        ("S", 1),
        ("S", 1),
        ("S", 1),
    ]
    problems = violations(crossing)
    assert rules_named(problems) == {"3"} and "crosses itself" in problems[0], problems
    # a hairpin (two 90-deg curves) whose return leg runs 4.8 m beside the outbound one: no crossing, but two
    # roads 5 m wide would overlap
    beside = [
        ("S", 10),
        ("DY", 45),
        ("L", 2),
        ("DY", 45),
        ("L", 2),
        ("S", 10),
        ("DY", 10),
        ("R", 12),
        ("S", 1),
        ("S", 1),
        ("S", 1),
        ("S", 1),
    ]
    g = centre_line(beside)
    assert abs(g.points[15][0] - g.points[5][0]) == pytest.approx(2 + 2 * math.sqrt(2), abs=1e-6)  # 4.83 m apart
    assert violations(beside, TrackRules(road_width=4.5)) == []  # a narrower road fits
    near = violations(beside)
    assert rules_named(near) == {"3"} and "within 5 m" in near[0], near
    assert "track[" in near[0]


def test_rule_4_no_turn_over_the_limit_and_the_rq4_limit() -> None:
    sharp = with_pair(VALID, 2, ("L", 18))  # 10 deg x 18 = 180 deg
    problems = violations(sharp)
    assert "4" in rules_named(problems) and "track[1]..track[2]" in problems[0] and "180.0 deg" in problems[0]
    assert is_valid(VALID, RQ4)
    wide = with_pair(VALID, 2, ("L", 14))  # 140 deg: fine in the main setting, too sharp for RQ4
    assert is_valid(wide) and violations(wide, RQ4) == [
        "track[1]..track[2] (DY 10, L 14): the curve turns 140.0 deg: rule 4 (no turn over 130 deg)"
    ]


def test_rule_5_curve_count_and_hardest_curve() -> None:
    two_curves = with_pair(with_pair(VALID, 7, ("S", 3)), 8, ("S", 6))
    assert rules_named(violations(two_curves)) == {"5"}
    assert "has 2 curve(s)" in violations(two_curves)[0]
    assert violations(two_curves, RQ4) == []  # RQ4 needs only 2 curves
    gentle = with_pair(VALID, 2, ("L", 11))  # hardest 110 deg
    assert any("hardest curve (track[2]) turns 110.0 deg" in p for p in violations(gentle))
    assert violations(gentle, TrackRules(min_hardest_deg=100)) == []


def test_rules_are_parameters_and_bad_options_are_refused() -> None:
    assert TrackRules.from_options({"min_curves": 2, "max_turn_deg": 130, "min_hardest_deg": 0}) == RQ4
    with pytest.raises(ValueError, match="unknown track rule option"):
        TrackRules.from_options({"min_curve": 2})
    with pytest.raises(ValueError, match="min_hardest_deg <= max_turn_deg"):
        TrackRules(max_turn_deg=100, min_hardest_deg=120)
    assert violations("S 5") == ["a track must be a list of (command, value) pairs, got str"]
    assert "exactly 12" in violations(VALID[:11])[0]


@pytest.mark.parametrize("rules", [TrackRules(), RQ4], ids=["main", "rq4"])
def test_generator_always_valid_and_deterministic(rules: TrackRules) -> None:
    rng = np.random.default_rng(7)
    tracks = [random_track(rng, rules) for _ in range(25)]
    assert all(violations(t, rules) == [] for t in tracks)
    assert len({track_string(t) for t in tracks}) == 25
    assert random_track(np.random.default_rng(7), rules) == tracks[0]


def test_mutation_operators_follow_the_paper_and_valid_mutants_stay_valid() -> None:
    rng = np.random.default_rng(1)
    ops = TrackOperators()
    base = as_records(VALID)
    changed_commands, value_steps = 0, []
    for _ in range(400):
        child = ops.mutate(base, rng)
        diffs = [i for i in range(12) if child[i] != base[i]]
        assert len(diffs) <= 1  # pairs="one"
        for i in diffs:
            before, after = base[i], child[i]
            if before["command"] != after["command"]:
                assert {before["command"], after["command"]} == {"L", "R"} and before["value"] == after["value"]
                changed_commands += 1
            elif before["command"] == "DY":
                assert 1.0 <= after["value"] <= 50.0 and abs(after["value"] - before["value"]) <= 50.0
            else:
                step = abs(after["value"] - before["value"])
                assert isinstance(after["value"], int) and 1 <= after["value"] <= 20 and step <= 20
                value_steps.append(step)
    assert changed_commands > 20 and max(value_steps) > 5
    valid_children = [ops.mutate_valid(base, rng) for _ in range(50)]
    assert all(c is None or is_valid(c) for c in valid_children) and sum(c is not None for c in valid_children) > 25
    every = TrackOperators(pairs="all").mutate(base, np.random.default_rng(2))
    assert sum(a != b for a, b in zip(every, base)) >= 8  # nearly every pair moves
    with pytest.raises(ValueError, match="'one' or 'all'"):
        TrackOperators(pairs="some")


def test_crossover_keeps_validity_or_gives_up_after_the_retry_limit() -> None:
    rng = np.random.default_rng(3)
    ops = TrackOperators(crossover_tries=20)
    parents = [random_track(rng) for _ in range(10)]
    made = 0
    for a, b in zip(parents[::2], parents[1::2]):
        out = ops.crossover(a, b, rng)
        if out is not None:
            made += 1
            c1, c2 = out
            assert is_valid(c1) and is_valid(c2)
            cut = next(i for i in range(12) if c1[i] != a[i]) if c1 != a else None
            assert cut is None or c1[cut:] == b[cut:]
    assert made >= 1
    straight = as_records([("S", 5)] * 12)  # never valid: every child fails rule 5
    assert TrackOperators(crossover_tries=3).crossover(straight, straight, rng) is None


def test_subject_wires_rules_sampling_and_operators() -> None:
    subjects = load_subjects()
    donkey, rq4 = subjects["donkey"], subjects["donkey_rq4"]
    rng = np.random.default_rng(0)
    case = donkey.sample(rng)
    assert donkey.violations(case) == [] and len(case["track"]) == 12
    bad = {"track": as_records(with_pair(VALID, 0, ("DY", 10)))}
    assert any("track: track[0] is DY: rule 1" in p for p in donkey.violations(bad))
    assert any("no turn over 130 deg" in c for c in rq4.space.constraints)
    assert rq4.violations({"track": as_records(with_pair(with_pair(VALID, 7, ("S", 3)), 8, ("S", 6)))}) == []


def test_encoding_is_24_dims_and_round_trips() -> None:
    space = load_subjects()["donkey"].space
    enc = Encoder(space)
    assert enc.n_features == 24
    assert (
        enc.feature_names[:2] == ["track[0].command", "track[1].command"] and enc.feature_names[12] == "track[0].value"
    )
    case = {"track": as_records(VALID)}
    x = enc.encode(case)
    ids = np.round(x[:12] * 3).astype(int)  # S, DY, R, L = 0..3
    assert ids.tolist() == [0, 1, 3, 0, 1, 2, 0, 1, 3, 0, 0, 0]
    np.testing.assert_allclose(x[12:], [(v - 1) / 49 for _, v in VALID])
    back = enc.decode(x)["track"]
    assert [r["command"] for r in back] == [c for c, _ in VALID]
    np.testing.assert_allclose([r["value"] for r in back], [v for _, v in VALID])
    assert Encoder.from_spec(enc.spec()).differences(space) == []
    with pytest.raises(ValueError, match="list of 12 records"):
        enc.encode({"track": as_records(VALID[:5])})


def test_indago_search_uses_the_track_operators_and_keeps_every_candidate_valid() -> None:
    subject = load_subjects()["donkey"]
    space = subject.space
    validity = subject_validity(space, subject.rules)  # the rules as DescribeEnvironment declares them
    assert set(validity.operators) == {"track"}
    rng = np.random.default_rng(5)
    mutator = Mutator(None, validity, rng, "random")
    seed = validity.sample(rng)
    assert validity.ok(seed)

    def hardest(inputs: list) -> np.ndarray:  # a stand-in surrogate: prefers sharp curves
        from subjects.donkey.track import as_pairs, curves

        return np.array([max(abs(t) for _, t in curves(as_pairs(c["track"]))) / 170 for c in inputs])

    found = hill_climb(seed, hardest, mutator, neighbourhood=8, budget=Budget(max_iterations=5, time_budget_s=None))
    assert validity.ok(found.values) and found.score >= hardest([seed])[0]
    pop = [validity.sample(rng) for _ in range(6)]
    ga = genetic(
        pop,
        hardest,
        mutator,
        crossover_rate=0.75,
        elitism=0.2,
        budget=Budget(max_iterations=3, time_budget_s=None),
        reseed=lambda k: [validity.sample(rng)] * k,
    )
    assert validity.ok(ga.values)
    c1, c2 = crossover(pop[0], pop[1], space.names, rng, validity)
    assert validity.ok(c1) and validity.ok(c2)
    assert math.isfinite(ga.score)


class GradientSurrogate:
    """A stand-in surrogate with a fixed gradient over the encoded features (what captum's Saliency returns)."""

    def __init__(self, space, gradient: np.ndarray) -> None:  # type: ignore[no-untyped-def]
        self.encoder = Encoder(space)
        self.gradient = gradient

    def saliency(self, features: np.ndarray) -> np.ndarray:
        return np.tile(self.gradient, (len(features), 1))


def test_saliency_mutation_moves_the_pair_and_direction_the_gradient_names() -> None:
    subject = load_subjects()["donkey"]
    space = subject.space
    validity = subject_validity(space, subject.rules)  # the rules as DescribeEnvironment declares them
    base = {"track": as_records(VALID)}
    rng = np.random.default_rng(9)

    def mutant(gradient: np.ndarray) -> list:
        mutator = Mutator(GradientSurrogate(space, gradient), validity, rng, "saliency")
        child = mutator.mutate(base, mutator.attributions([base])[0])
        assert validity.ok(child)
        return [i for i in range(12) if child["track"][i] != base["track"][i]], child["track"]

    g = np.zeros(24)
    g[12 + 6] = -0.9  # the largest: value of pair 6 (S 3) down
    g[12 + 9] = 0.5  # value of pair 9 (S 5) up, used only if no move of pair 6 is valid
    changed, track = mutant(g)
    assert changed == [6] and 1 <= track[6]["value"] < 3
    g = np.zeros(24)
    g[5] = -1.0  # command id of pair 5 (R = 2) downwards: no command below R is reachable, skipped
    g[2] = -0.5  # command id of pair 2 (L = 3) downwards: L -> R
    changed, track = mutant(g)
    assert changed == [2] and track[2]["command"] == "R"
    ops = TrackOperators()
    assert list(ops.directed(VALID, np.zeros(24), rng)) == []  # no usable attribution: random mutation decides
    with pytest.raises(ValueError, match="24 entries"):
        next(ops.directed(VALID, np.zeros(12), rng))


def test_indago_end_to_end_on_tracks_log_surrogate_and_all_searches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A synthetic Donkey training log (failing = a curve of 150 deg or more) -> a surrogate on the 24 features ->
    Indago's searches and the sampling baseline ask only valid tracks."""
    import gzip
    import json

    from generator_service.strategies import make_strategy
    from generator_service.surrogates.model import TrainSettings
    from offline.surrogate_training import TuningGrid, train_surrogate
    from subjects.donkey.track import as_pairs, curves

    subject = load_subjects()["donkey"]
    rng = np.random.default_rng(0)

    def hardest(values: dict) -> float:
        return max(abs(t) for _, t in curves(as_pairs(values["track"])))

    log = tmp_path / "training_log.jsonl.gz"
    with gzip.open(log, "wt") as stream:
        for i in range(160):
            values = subject.sample(rng)
            bad = hardest(values) >= 150
            stream.write(
                json.dumps(
                    {
                        "episode": i + 1,
                        "timestep": 10 * i,
                        "config": values,
                        "reward": 0.0,
                        "verdict": "fail" if bad else "pass",
                        "margin": -0.5 if bad else 0.5,
                        "steps": 10,
                    }
                )
                + "\n"
            )
    artifact = train_surrogate(
        log,
        subject.space,
        subject="donkey",
        kind="classifier",
        out_dir=tmp_path / "art",
        grid=TuningGrid("one", (5.0,), (1,), 1),
        settings=TrainSettings(learning_rate=3e-3, max_epochs=20),
    )
    fast = {"time_budget_s": 0, "max_iterations": 4, "neighbourhood": 8, "population": 8}
    for setting in ("hc_sal+rnd", "ga_sal+fail"):  # saliency + HC; GA with crossover, failure seeds, reseeding
        params = {"surrogate": str(artifact), "setting": setting, **fast}
        asked = make_strategy("indago", subject.space, 1, params, subject_rules=subject.rules).ask(2)
        assert all(subject.violations(a) == [] for a in asked), setting
    params = {"surrogate": str(artifact), "candidates": 20}
    sampled = make_strategy("indago_sampling", subject.space, 1, params, subject_rules=subject.rules).ask(2)
    assert all(subject.violations(a) == [] for a in sampled)
