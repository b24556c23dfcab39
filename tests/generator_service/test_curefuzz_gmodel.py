"""CureFuzz (curiosity-guided fuzzing) and G-Model (diffusion-model generation): the behaviour their papers
describe, beyond the properties every strategy keeps (tests/generator_service/test_strategy_properties.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.space import Parameter, ParameterSpace
from generator_service.strategies import Result, make_strategy
from generator_service.strategies.base import StrategyParamError, TestInput
from generator_service.strategies.curefuzz import CureFuzz, RandomNetworkDistillation
from generator_service.strategies.g_model import GModel

BOX = ParameterSpace((Parameter("a", "real", low=-1.0, high=1.0), Parameter("b", "real", low=0.0, high=10.0)))


def constant_pass(values: TestInput) -> Result:
    """Every test passes with the same margin and no descriptors (CartPole's flat reward, in the PRT paper)."""
    return Result(values, False, 1.0)


def drive(strategy: Any, total: int, judge: Callable[[TestInput], Result] = constant_pass) -> list[TestInput]:
    asked: list[TestInput] = []
    while len(asked) < total:
        batch = strategy.ask(8)
        strategy.tell([judge(v) for v in batch])
        asked += batch
    return asked


def test_curiosity_falls_for_a_state_the_predictor_learned_and_stays_high_for_a_new_one() -> None:
    rnd = RandomNetworkDistillation(2, 32, 16, 1e-2, seed=0)
    seen, unseen = np.array([0.2, 0.3]), np.array([0.95, 0.9])
    rnd.learn(np.tile(seen, (5, 1)))
    before = rnd.error(seen)
    rnd.learn(np.tile(seen, (200, 1)))
    assert rnd.error(seen) < before / 10
    assert rnd.error(unseen) > 10 * rnd.error(seen)


def test_curefuzz_keeps_curious_mutants_where_a_flat_margin_keeps_none() -> None:
    params = {"initial_tests": 10, "seed_energy": 2}
    cure = make_strategy("curefuzz", BOX, 3, {**params, "curiosity_threshold": 1.0})
    assert isinstance(cure, CureFuzz)
    drive(cure, 200)
    # the plain fuzzer keeps a mutant only when its margin falls, which a flat margin never does; CureFuzz also keeps
    # the mutants whose state (here the normalised input: no descriptors) its curiosity model had not learned yet
    assert cure.rnd is not None and cure.mean_error > 0
    assert cure.kept["curiosity"] > 0 and cure.kept["margin"] == 0


def test_curefuzz_weighs_seeds_closer_to_failure_and_more_curious_higher() -> None:
    cure = make_strategy("curefuzz", BOX, 0, {"initial_tests": 5, "beta": 1.0})
    assert isinstance(cure, CureFuzz)
    cure._see_margin(0.0)
    cure._see_margin(10.0)
    assert cure._weight(0.0, 1.0, 0.0) > cure._weight(10.0, 1.0, 0.0)  # exp(-alpha * margin_norm)
    assert cure._weight(5.0, 3.0, 0.0) > cure._weight(5.0, 1.0, 0.0)  # exp(beta * curiosity)
    assert cure._weight(5.0, 1.0, 0.4) == pytest.approx(cure._weight(5.0, 1.0, 0.0) + 0.4)  # gamma * distance


def test_curefuzz_stops_mutating_from_failures_and_gives_curious_seeds_more_energy() -> None:
    cure = make_strategy("curefuzz", BOX, 1, {"initial_tests": 8, "seed_energy": 3, "curiosity_threshold": 0.5})
    assert isinstance(cure, CureFuzz)

    def judge(values: TestInput) -> Result:
        margin = float(values["b"]) - 5.0  # fails for b < 5
        return Result(values, margin < 0, margin)

    drive(cure, 300, judge)
    assert all(s.margin >= 0 for s in cure.corpus)  # no failing input enters the corpus
    energies = {s.energy for s in cure.corpus}
    assert max(energies) <= 4 * 3 and min(energies) >= 0


def test_g_model_is_feedback_free_and_projects_its_samples_onto_the_boundary() -> None:
    params = {"pretrain_epochs": 0, "pretrain_cases": 20, "round_size": 25, "fresh_cases": 5}
    first = make_strategy("g_model", BOX, 7, params)
    second = make_strategy("g_model", BOX, 7, params)
    a = drive(first, 100)
    b = drive(second, 100, judge=lambda v: Result(v, True, -5.0, (1.0, 2.0)))
    assert a == b  # what it is told changes nothing
    assert isinstance(first, GModel)
    x = np.array([[v["a"], v["b"]] for v in a])
    assert np.all(x[:, 0] >= -1) and np.all(x[:, 0] <= 1) and np.all(x[:, 1] >= 0) and np.all(x[:, 1] <= 10)
    on_boundary = np.mean(np.isin(x[:, 0], (-1.0, 1.0)) | np.isin(x[:, 1], (0.0, 10.0)))
    # an untrained denoiser samples far outside [0, 1]: those cases are clipped onto the domain's boundary
    assert first.clipped > 0 and on_boundary > 0.3


def test_g_model_trained_longer_stays_off_the_boundary_more() -> None:
    short = make_strategy("g_model", BOX, 2, {"pretrain_epochs": 0, "pretrain_cases": 200, "round_size": 50})
    long = make_strategy("g_model", BOX, 2, {"pretrain_epochs": 60, "pretrain_cases": 200, "round_size": 50})
    short.ask(50)
    long.ask(50)
    assert isinstance(short, GModel) and isinstance(long, GModel)
    assert long.clipped < short.clipped


def test_g_model_refuses_decreasing_betas_and_non_numeric_parameters() -> None:
    with pytest.raises(StrategyParamError, match="beta_end"):
        make_strategy("g_model", BOX, 0, {"beta_start": 0.02, "beta_end": 0.001})
    mixed = ParameterSpace(
        (Parameter("a", "real", low=0.0, high=1.0), Parameter("c", "categorical", choices=("x", "y")))
    )
    with pytest.raises(ValueError, match="'c'"):
        make_strategy("g_model", mixed, 0, {})
