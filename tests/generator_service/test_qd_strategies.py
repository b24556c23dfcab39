"""MAP-Elites, Novelty Search, the Fuzzer and MDPFuzz: determinism, valid inputs, lost results, and synthetic
objectives on which each mechanism must beat random testing at the same budget (fixed seeds, wide margins)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from common.space import ParameterSpace
from generator_service.strategies import Result, make_strategy, strategies
from generator_service.strategies.base import StrategyParamError, TestInput
from simulator_service.subject import load_subjects

SUBJECTS = load_subjects()
QD = ["map_elites", "novelty_search", "fuzzer", "mdpfuzz"]
UNIT_SQUARE = ParameterSpace.from_config([{"name": "x", "low": 0, "high": 1}, {"name": "y", "low": 0, "high": 1}])
# small phases so that a few hundred asks reach the search proper
SMALL = {
    "map_elites": {"initial_tests": 30},
    "novelty_search": {"initial_tests": 30, "population": 20},
    "fuzzer": {"initial_tests": 15},
    "mdpfuzz": {"initial_tests": 15},
}
Evaluator = Callable[[TestInput], Result]


def drive(
    strategy, evaluate: Evaluator, budget: int, batch: int = 10, keep: Callable[[int], list[int]] | None = None
) -> tuple[list[TestInput], list[Result]]:
    """Asks until `budget` inputs were asked; tells the results (only the positions `keep(len)` chooses)."""
    asked: list[TestInput] = []
    told: list[Result] = []
    while len(asked) < budget:
        values = strategy.ask(min(batch, budget - len(asked)))
        assert values, "a strategy must not run dry"
        asked += values
        results = [evaluate(v) for v in values]
        if keep is not None:
            results = [results[i] for i in keep(len(results))]
        strategy.tell(results)
        told += results
    return asked, told


def subject_evaluator(space: ParameterSpace) -> Evaluator:
    """A cheap stand-in for a simulator: 2 descriptors, a margin, failures near the upper corner."""
    low, high = space.bounds()

    def evaluate(values: TestInput) -> Result:
        u = (np.array([values[n] for n in space.names]) - low) / (high - low)
        margin = 1.5 - float(u[:2].sum())
        return Result(values, margin < 0, margin, (float(u[0] * 3 - 1), float(u.mean() ** 2)))

    return evaluate


def cells_covered(results: list[Result], cells: int = 50) -> int:
    """The paper's #BS on a 50 x 50 grid over [0, 1]^2 descriptors: distinct cells among all executed tests."""
    d = np.array([r.descriptors for r in results], dtype=float)
    return len({tuple(c) for c in np.clip((d * cells).astype(int), 0, cells - 1)})


# -- registry ----------------------------------------------------------------------------------------------
def test_listed_with_their_defaults_and_unknown_parameters_are_named() -> None:
    known = strategies()
    assert set(QD) <= set(known)
    assert dict(known["map_elites"].defaults) == {
        "initial_tests": 1000,
        "cells": 50,
        "descriptor_bounds": None,
        "mutation_scale": 0.05,
        "integer_mutation": "shift",
        "mutation_p": 0.1,
    }
    assert dict(known["novelty_search"].defaults)["archive_threshold"] == 0.005
    assert dict(known["novelty_search"].defaults)["neighbours"] == 3
    gmm = {"gmm_components": 10, "density_threshold": 0.01, "update_rate": 0.01}
    assert gmm.items() <= dict(known["mdpfuzz"].defaults).items()
    assert not set(gmm) & set(known["fuzzer"].defaults)  # the plain Fuzzer has no density model to configure
    for name in QD:
        assert known[name].source and known[name].description
        with pytest.raises(StrategyParamError, match="bogus"):
            make_strategy(name, UNIT_SQUARE, 0, {"bogus": 1})


@pytest.mark.parametrize(
    "name,params,named",
    [
        ("map_elites", {"cells": 0}, "cells"),
        ("map_elites", {"descriptor_bounds": [[1, 0], [0, 1]]}, "descriptor_bounds"),
        ("novelty_search", {"archive_threshold": -1}, "archive_threshold"),
        ("novelty_search", {"population": 2.5}, "population"),
        ("fuzzer", {"seed_energy": 0}, "seed_energy"),
        ("mdpfuzz", {"update_rate": 0.0}, "update_rate"),
        ("mdpfuzz", {"mutation_scale": float("nan")}, "mutation_scale"),
    ],
)
def test_bad_values_are_refused_naming_the_parameter(name: str, params: dict, named: str) -> None:
    with pytest.raises(StrategyParamError, match=named):
        make_strategy(name, UNIT_SQUARE, 0, params)


def test_integral_floats_from_the_wire_are_accepted() -> None:
    # a campaign's strategy_params travel as a protobuf Struct, where every number is a float
    s = make_strategy("map_elites", UNIT_SQUARE, 0, {"initial_tests": 5.0, "cells": [10.0, 20.0]})
    drive(s, lambda v: Result(v, False, v["x"], (v["x"], v["y"])), 20)
    assert s.archive.dims.tolist() == [10, 20]


# -- determinism and validity --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", QD)
def test_same_seed_same_asks_other_seed_other_asks(name: str) -> None:
    space = SUBJECTS["lunarlander"].space
    evaluate = subject_evaluator(space)
    runs = [drive(make_strategy(name, space, seed, SMALL[name]), evaluate, 150, batch=7)[0] for seed in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize("subject", ["cartpole", "lunarlander"])
@pytest.mark.parametrize("name", QD)
def test_every_asked_input_fits_the_subjects_space(name: str, subject: str) -> None:
    space = SUBJECTS[subject].space
    # a large mutation scale pushes many mutants against the bounds, where they must be clipped
    s = make_strategy(name, space, 11, {**SMALL[name], "mutation_scale": 0.5})
    asked, _ = drive(s, subject_evaluator(space), 250, batch=9)
    assert len(asked) == 250
    assert all(not space.violations(v) for v in asked), [space.violations(v) for v in asked if space.violations(v)][:3]


@pytest.mark.parametrize("name", QD)
def test_lost_results_and_odd_batches_are_handled(name: str) -> None:
    """After a stop mid-batch tell gets only the executed results (any subset, in order), or none at all."""
    space = SUBJECTS["cartpole"].space
    evaluate = subject_evaluator(space)

    runs = []
    for _ in range(2):
        rng = np.random.default_rng(0)

        def some(n: int, rng: np.random.Generator = rng) -> list[int]:  # this run's rng, bound now
            return sorted(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False).tolist())

        s = make_strategy(name, space, 8, SMALL[name])
        asked, _ = drive(s, evaluate, 120, batch=1)  # single-input batches split the fuzzers' seed/probe pairs
        more, _ = drive(s, evaluate, 200, batch=6, keep=some)
        s.ask(4)  # asked and never told
        runs.append(asked + more + s.ask(5))
        assert all(not space.violations(v) for v in runs[-1])
    assert runs[0] == runs[1]


# -- MAP-Elites ---------------------------------------------------------------------------------------------
def skewed(values: TestInput, power: float = 5.0) -> Result:
    """Descriptors x^5, y^5: random inputs crowd into the low corner of the behaviour space."""
    x, y = values["x"], values["y"]
    return Result(values, x + y > 1.9, 1.9 - x - y, (x**power, y**power))


def test_map_elites_fills_more_cells_than_random() -> None:
    bounds = [[0, 1], [0, 1]]
    for seed in (0, 1, 2):
        _, rt = drive(make_strategy("random", UNIT_SQUARE, seed), skewed, 500)
        me = make_strategy("map_elites", UNIT_SQUARE, seed, {"initial_tests": 50, "descriptor_bounds": bounds})
        _, found = drive(me, skewed, 500)
        assert cells_covered(found) >= 1.2 * cells_covered(rt), (seed, cells_covered(found), cells_covered(rt))


def test_map_elites_keeps_the_lowest_margin_test_of_each_cell_and_mutates_elites() -> None:
    me = make_strategy("map_elites", UNIT_SQUARE, 4, {"initial_tests": 40, "cells": 10})
    _, told = drive(me, skewed, 200)
    archive = me.archive
    best: dict[int, float] = {}
    for r in told:
        cell = int(archive.index_of_single(r.descriptors))
        best[cell] = min(best.get(cell, math.inf), r.margin)
    data = archive.data()
    assert len(data["index"]) == len(best)  # every visited cell is occupied, faults included
    for cell, objective, solution in zip(data["index"], data["objective"], data["solution"]):
        assert objective == -best[int(cell)]
        assert me.elite(int(solution)) in [r.values for r in told]
    # learned bounds: the initial tests' descriptor range
    init = np.array([r.descriptors for r in told[:40]])
    np.testing.assert_allclose(me.behaviour.bounds, np.stack([init.min(0), init.max(0)], axis=1))
    elites = np.array([[e["x"], e["y"]] for e in (me.elite(int(s)) for s in data["solution"])])
    for v in me.ask(30):  # every mutant lies within +-5 % of the range of some elite
        assert np.min(np.max(np.abs(elites - [v["x"], v["y"]]), axis=1)) <= 0.05 + 1e-12


def test_map_elites_refuses_bounds_of_the_wrong_dimension() -> None:
    me = make_strategy("map_elites", UNIT_SQUARE, 0, {"initial_tests": 5, "descriptor_bounds": [[0, 1]]})
    with pytest.raises(StrategyParamError, match="descriptor_bounds"):
        drive(me, skewed, 20)


# -- Novelty Search -------------------------------------------------------------------------------------------
def test_novelty_search_archive_grows_and_covers_more_than_random() -> None:
    bounds = [[0, 1], [0, 1]]
    for seed in (0, 1):
        _, rt = drive(make_strategy("random", UNIT_SQUARE, seed), skewed, 500)
        ns = make_strategy(
            "novelty_search", UNIT_SQUARE, seed, {"initial_tests": 50, "population": 25, "descriptor_bounds": bounds}
        )
        _, found = drive(ns, skewed, 500, batch=8)
        assert ns.generation >= 18 and len(ns.population) == 25
        assert ns.archive_size >= 50 + 150  # the 50 initial behaviours plus most of the 450 offspring
        assert cells_covered(found) >= 1.3 * cells_covered(rt), (seed, cells_covered(found), cells_covered(rt))


def test_novelty_search_starts_from_the_most_novel_initial_tests() -> None:
    ns = make_strategy("novelty_search", UNIT_SQUARE, 0, {"initial_tests": 60, "population": 10})
    _, told = drive(ns, skewed, 60)
    first = ns.ask(10)  # the first generation: one mutant per member of the first population
    assert ns.archive_size == 60 and len(first) == 10
    points = ns.archive
    dist = np.linalg.norm(points[:, None] - points[None], axis=2)
    np.fill_diagonal(dist, np.inf)
    novelty = np.sort(dist, axis=1)[:, :3].mean(axis=1)
    chosen = {(round(v["x"], 12), round(v["y"], 12)) for v in ns.population}
    expected = {(round(told[i].values["x"], 12), round(told[i].values["y"], 12)) for i in np.argsort(-novelty)[:10]}
    assert chosen == expected


# -- Fuzzer and MDPFuzz -------------------------------------------------------------------------------------
def basin(values: TestInput) -> Result:
    """MountainCar-like ("Failure-Based Testing for Deep Reinforcement Learning Agents", Sec. 5.1, Fig. 2): a
    small failure disc (0.8 % of the square) inside a basin where the margin falls towards it; flat margin
    elsewhere. Random inputs rarely fail; margin-guided search should."""
    dist = float(np.hypot(values["x"] - 0.5, values["y"] - 0.5))
    return Result(values, dist < 0.05, min(1.0, (dist - 0.05) / 0.2), (values["x"], values["y"]))


@pytest.mark.parametrize("name", ["fuzzer", "mdpfuzz"])
def test_fuzzers_find_the_failing_region_more_often_than_random(name: str) -> None:
    fuzz_failures, random_failures = 0, 0
    for seed in range(4):
        _, rt = drive(make_strategy("random", UNIT_SQUARE, seed), basin, 400)
        s = make_strategy(name, UNIT_SQUARE, seed, {"initial_tests": 20})
        _, found = drive(s, basin, 400)
        assert all(not r.failed for r in (basin(seed.values) for seed in s.corpus))  # the corpus only passes
        fuzz_failures += sum(r.failed for r in found)
        random_failures += sum(r.failed for r in rt)
    assert fuzz_failures >= 3 * max(random_failures, 5), (fuzz_failures, random_failures)


def test_mdpfuzz_models_the_behaviour_density_and_the_fuzzer_does_not() -> None:
    md = make_strategy("mdpfuzz", UNIT_SQUARE, 1, {"initial_tests": 30})
    plain = make_strategy("fuzzer", UNIT_SQUARE, 1, {"initial_tests": 30})
    for s in (md, plain):
        drive(s, basin, 150)
    assert plain.gmm is None
    assert md.gmm is not None and md.gmm.components == 10
    weights = md.gmm.model.weights_
    assert weights.sum() == pytest.approx(1.0) and np.all(weights >= 0)
    # a behaviour far outside everything seen has a density below the threshold; a component's centre does not
    assert md.gmm.log_density(md.behaviour.normalise(np.array([5.0, 5.0]))) < math.log(0.01)
    assert md.gmm.log_density(md.gmm.model.means_[int(np.argmax(weights))]) > math.log(0.01)
    # after its online updates the model is still a consistent sklearn mixture: same densities both ways
    probe = np.random.default_rng(0).random((20, 2))
    np.testing.assert_allclose([md.gmm.log_density(p) for p in probe], md.gmm.model.score_samples(probe), atol=1e-9)


def test_fuzzer_seed_collection_keeps_only_seeds_whose_probe_passes_too() -> None:
    s = make_strategy("fuzzer", UNIT_SQUARE, 2, {"initial_tests": 25})
    kept = []
    while len(s.corpus) < 25:  # during collection an ask of 2 is one seed and its probe
        seed, probe = s.ask(2)
        assert abs(probe["x"] - seed["x"]) <= 0.05 + 1e-12 and abs(probe["y"] - seed["y"]) <= 0.05 + 1e-12
        rs, rp = (Result(v, v["x"] > 0.5, 0.5 - v["x"], ()) for v in (seed, probe))
        s.tell([rs, rp])
        if not rs.failed and not rp.failed:
            kept.append((seed, abs(rs.margin - rp.margin) + 1e-6))
    assert [(c.values, c.sensitivity) for c in s.corpus] == kept
    assert s.ask(3) and len(s.corpus) <= 25  # fuzzing now: three selections, energy spent, nothing added yet
