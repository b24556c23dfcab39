"""Shared mutation operators: bounded shifts for ranges, resampling for discrete kinds, sequences refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.space import ParameterSpace
from generator_service.strategies.mutation import mutate

SPACE = ParameterSpace.from_config(
    [
        {"name": "x", "low": -0.9, "high": 0.9},
        {"name": "lane", "kind": "integer", "low": 0, "high": 40},
        {"name": "weather", "kind": "categorical", "choices": ["sun", "rain", "fog"]},
        {"name": "slot", "kind": "integer_set", "values": [1, 4, 9]},
    ]
)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.floats(0.0, 1.0), p=st.floats(0.0, 1.0))
def test_mutants_stay_in_the_domain_and_shifts_are_bounded(seed: int, scale: float, p: float) -> None:
    rng = np.random.default_rng(seed)
    parent = SPACE.sample(rng)
    child = mutate(SPACE, parent, rng, scale=scale, p=p)
    assert SPACE.violations(child) == []
    assert abs(child["x"] - parent["x"]) <= scale * 1.8 + 1e-12
    assert abs(child["lane"] - parent["lane"]) <= scale * 40 + 0.5
    assert type(child["x"]) is float and type(child["lane"]) is int and type(child["slot"]) is int


def test_default_scale_is_five_percent_of_the_range_and_clips() -> None:
    rng = np.random.default_rng(0)
    shifts = [mutate(SPACE, {**SPACE.sample(rng), "x": 0.0}, rng)["x"] for _ in range(2000)]
    assert max(np.abs(shifts)) <= 0.09 and max(np.abs(shifts)) > 0.085
    at_edge = [mutate(SPACE, {**SPACE.sample(rng), "x": 0.9}, rng)["x"] for _ in range(200)]
    assert max(at_edge) == 0.9 and min(at_edge) >= 0.81


def test_discrete_kinds_change_with_probability_p() -> None:
    rng = np.random.default_rng(1)
    parent = {"x": 0.0, "lane": 3, "weather": "sun", "slot": 4}
    assert all(mutate(SPACE, parent, rng, p=0.0)["weather"] == "sun" for _ in range(50))
    always = [mutate(SPACE, parent, rng, p=1.0) for _ in range(200)]
    assert all(c["weather"] != "sun" and c["slot"] != 4 for c in always)
    assert {c["weather"] for c in always} == {"rain", "fog"}
    sometimes = np.mean([mutate(SPACE, parent, rng, p=0.3)["weather"] != "sun" for _ in range(2000)])
    assert 0.25 < sometimes < 0.35


def test_input_is_left_untouched() -> None:
    parent = {"x": 0.1, "lane": 3, "weather": "sun", "slot": 4}
    mutate(SPACE, parent, np.random.default_rng(2), p=1.0)
    assert parent == {"x": 0.1, "lane": 3, "weather": "sun", "slot": 4}


def test_sequences_are_not_implemented_yet_and_say_which_parameter() -> None:
    space = ParameterSpace.from_config(
        [
            {
                "name": "track",
                "kind": "sequence",
                "min_length": 1,
                "max_length": 3,
                "fields": [{"name": "v", "low": 0, "high": 1}],
            }
        ]
    )
    with pytest.raises(NotImplementedError, match="'track'"):
        mutate(space, space.sample(np.random.default_rng(0)), np.random.default_rng(0))


def test_bad_arguments_are_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="'lane'"):
        mutate(SPACE, {"x": 0.0, "weather": "sun", "slot": 4}, rng)
    with pytest.raises(ValueError, match="scale"):
        mutate(SPACE, SPACE.sample(rng), rng, scale=-0.1)
    with pytest.raises(ValueError, match="p"):
        mutate(SPACE, SPACE.sample(rng), rng, p=1.5)
