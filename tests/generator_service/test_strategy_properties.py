"""Properties every registered strategy must keep, on every kind of parameter space the subjects declare:
asked inputs lie inside the space, and the same seed asks the same inputs. Plus PRT's λ = 1 uniformity at a
boundary, which complements the interior-gap check in test_prt.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from common.space import ParameterSpace
from generator_service.strategies import Result, make_strategy, strategies
from generator_service.strategies.base import StrategyParamError, TestInput, as_test_case
from generator_service.strategies.prt import PRTGenerator, eq4
from simulator_service.subject import load_subjects

SUBJECTS = load_subjects()
# small initial phases so that 60 asks reach each strategy's search proper; a large mutation scale pushes mutants
# against the bounds, where they must be clipped
PARAMS: dict[str, dict[str, Any]] = {
    "map_elites": {"initial_tests": 15, "mutation_scale": 0.5},
    "novelty_search": {"initial_tests": 15, "population": 10, "mutation_scale": 0.5},
    "fuzzer": {"initial_tests": 10, "mutation_scale": 0.5},
    "mdpfuzz": {"initial_tests": 10, "mutation_scale": 0.5},
    "curefuzz": {"initial_tests": 10, "mutation_scale": 0.5},
    "g_model": {"pretrain_epochs": 2, "pretrain_cases": 50, "round_size": 20, "fresh_cases": 10},
    "indago": {"setting": "ga_sal+fail", "time_budget_s": 0, "max_iterations": 5, "neighbourhood": 8, "population": 8},
    "indago_sampling": {"candidates": 50, "time_budget_s": 0},
    "train_fail_replay": {},
    "designate": {"seed_populations": 2, "population_size": 6},
    "deepjanus": {"population_size": 6},
}
SURROGATE = {"indago", "indago_sampling", "train_fail_replay"}  # need an artifact trained for the subject's space
# (strategy, subject) pairs refused up front today: donkey's `track` is a sequence of records, which the box
# strategies (PRT, G-Model, DESIGNATE's SBX) and mutation.py's mutators cannot search. A refusal not listed here
# fails the test (a strategy that newly refuses a subject it accepted is a regression, not a skip); so does a
# listed pair that is accepted now (remove it, so the list stays exact).
KNOWN_REFUSALS = frozenset(
    {
        ("curefuzz", "donkey"),
        ("deepjanus", "donkey"),
        ("designate", "donkey"),
        ("fuzzer", "donkey"),
        ("g_model", "donkey"),
        ("map_elites", "donkey"),
        ("mdpfuzz", "donkey"),
        ("novelty_search", "donkey"),
        ("prt", "donkey"),
    }
)


def representative_subjects() -> list[str]:
    """One subject per kind of space (real box, integers, mixed, sequences ...) and the widest real space."""
    chosen: dict[tuple[str, ...], str] = {}
    for name, subject in sorted(SUBJECTS.items()):
        kinds = tuple(sorted({p.kind for p in subject.space.parameters}))
        chosen.setdefault(kinds, name)
    widest = max(SUBJECTS, key=lambda n: len(SUBJECTS[n].space.names))
    return sorted(set(chosen.values()) | {widest, "cartpole"})


def evaluate(space: ParameterSpace, values: TestInput, index: int) -> Result:
    """Deterministic stand-in for a simulator: a margin and 2 descriptors from the input's hash and its position."""
    h = abs(hash(json.dumps(values, sort_keys=True, default=str))) % 10_000 / 10_000
    margin = 0.8 - h
    return Result(values, margin < 0, margin, (h, (index % 17) / 17))


def drive(name: str, space: ParameterSpace, seed: int, params: dict[str, Any], total: int = 60) -> list[TestInput]:
    strategy = make_strategy(name, space, seed, params)
    asked: list[TestInput] = []
    while len(asked) < total:
        # a strategy may answer typed test cases (replay's carry their seed origin): their values are the input
        batch = [dict(as_test_case(b).values) for b in strategy.ask(min(7, total - len(asked)))]
        if not batch:  # exhausted (train_fail_replay and replay run a finite set)
            break
        strategy.tell([evaluate(space, v, len(asked) + i) for i, v in enumerate(batch)])
        asked += batch
    return asked


@pytest.fixture(scope="module")
def cartpole_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-run surrogate on a synthetic CartPole training log (failures at large |theta|)."""
    from offline.surrogate_training import TuningGrid, train_surrogate

    space = SUBJECTS["cartpole"].space
    rng = np.random.default_rng(0)
    log = tmp_path_factory.mktemp("log") / "training_log.jsonl.gz"
    with gzip.open(log, "wt") as stream:
        for i in range(300):
            values = space.sample(rng)
            bad = abs(values["theta"]) > 0.04
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
    return train_surrogate(
        log,
        space,
        subject="cartpole",
        grid=TuningGrid("one", (5.0,), (1,), 1),
        out_dir=tmp_path_factory.mktemp("art") / "surrogate",
    )


# Strategies whose inputs are action traces from a DFS reference artifact, not points of the parameter space:
# their properties (suite sizes, well-formed traces, determinism) are tested in
# tests/generator_service/test_search_based.py and tests/system/test_search_based_e2e.py.
TRACE_STRATEGIES = {"search_safety", "trace_fuzzing", "trace_performance"}


def params_for(name: str, subject: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if name in TRACE_STRATEGIES:
        pytest.skip(f"{name} proposes action traces from a DFS artifact; tested in test_search_based*.py")
    params = dict(PARAMS.get(name, {}))
    if name == "replay":  # a regression campaign reruns fixed inputs: a dozen drawn from the subject's space
        rng = np.random.default_rng(1)
        space = SUBJECTS[subject].space
        params["cases"] = [{"id": f"t{i:07d}", "campaign_seed": 3, "values": space.sample(rng)} for i in range(1, 13)]
    if name in SURROGATE:
        if subject != "cartpole":
            pytest.skip(
                f"{name} needs a surrogate trained on {subject}'s space; checked on cartpole (and taxi in "
                "test_indago.py)"
            )
        params["surrogate"] = str(request.getfixturevalue("cartpole_artifact"))
    return params


def test_known_refusals_name_strategies_and_subjects_that_are_tested() -> None:
    """A listed pair that the property test never runs would hide nothing and check nothing."""
    stale = [
        (name, subject)
        for name, subject in sorted(KNOWN_REFUSALS)
        if name not in strategies() or subject not in representative_subjects()
    ]
    assert not stale, f"KNOWN_REFUSALS lists pairs the property test does not run: {stale}"


@pytest.mark.parametrize("subject", representative_subjects())
@pytest.mark.parametrize("name", sorted(strategies()))
def test_every_strategy_asks_inside_the_space_and_repeats_with_its_seed(
    name: str, subject: str, request: pytest.FixtureRequest
) -> None:
    space = SUBJECTS[subject].space
    params = params_for(name, subject, request)
    try:
        first = drive(name, space, 4, params)
    except (StrategyParamError, ValueError) as exc:  # e.g. PRT on a space that is not a box: refused up front
        assert any(repr(p) in str(exc) or p in str(exc) for p in space.names), f"refusal names no parameter: {exc}"
        assert (name, subject) in KNOWN_REFUSALS, (
            f"{name} newly refuses {subject}: {exc} (a deliberate refusal goes in KNOWN_REFUSALS)"
        )
        return  # a known refusal, made up front and naming the parameter: what the strategy should do
    assert (name, subject) not in KNOWN_REFUSALS, f"{name} now accepts {subject}: remove it from KNOWN_REFUSALS"
    assert first, f"{name} asked nothing on {subject}"
    outside = [(v, space.violations(v)) for v in first if space.violations(v)]
    assert not outside, outside[:2]
    assert drive(name, space, 4, params) == first
    # train_fail_replay's order depends on the seed, but a tiny log may not show it in 60 asks; replay reruns its
    # fixed inputs in their listed order whatever the seed
    if name not in ("train_fail_replay", "replay"):
        assert drive(name, space, 5, params) != first


# -- PRT, Eq. 4 with lambda = 1 ------------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(theta=st.floats(0.0, 1.0), lo=st.floats(-10.0, 10.0), width=st.floats(1e-3, 10.0))
def test_eq4_with_lambda_one_is_the_uniform_quantile_function(theta: float, lo: float, width: float) -> None:
    assert eq4(theta, lo, lo + width, 1.0) == pytest.approx(lo + theta * width, abs=1e-9 * (1 + abs(lo) + width))


def test_lambda_one_draws_uniformly_between_the_boundary_and_the_nearest_point() -> None:
    # points {0.6, 1.0}: the left boundary's interval 0.6 beats the interior half-gap 0.2, so the next value is
    # drawn in [0, 0.6]; with lambda = 1 uniformly there
    draws = []
    for seed in range(2000):
        g = PRTGenerator(1, np.random.default_rng(seed), lam=1.0, variant="paper")
        g.add([0.6])
        g.add([1.0])
        draws.append(g.next()[0])
    x = np.array(draws)
    assert x.min() >= 0.0 and x.max() <= 0.6
    assert stats.kstest(x, "uniform", args=(0.0, 0.6)).pvalue > 0.001
