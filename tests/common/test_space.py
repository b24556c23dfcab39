"""Parameter spaces: declaration, validation messages, sampling and wire round trips."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from common.space import ParameterSpace, SpaceError, case_values
from simulator_service.subject import load_subjects

SPACE = ParameterSpace.from_config(
    [
        {"name": "x", "low": -0.9, "high": 0.9, "hints": ["boundary"]},
        {"name": "theta", "low": "-pi/60", "high": "pi/60"},
        {"name": "lane", "kind": "integer", "low": 0, "high": 5, "hints": [{"value": 2}]},
        {"name": "weather", "kind": "categorical", "choices": ["sun", "rain"]},
        {"name": "slot", "kind": "integer_set", "values": [1, 4, 9]},
        {
            "name": "track",
            "kind": "sequence",
            "min_length": 1,
            "max_length": 3,
            "fields": [
                {"name": "cmd", "kind": "categorical", "choices": ["S", "L", "R"]},
                {"name": "value", "low": 0, "high": 90},
            ],
        },
    ]
)


def test_pi_expressions_are_exact() -> None:
    assert SPACE["theta"].high == pytest.approx(math.pi / 60)


def test_out_of_domain_value_names_parameter_and_bounds() -> None:
    values = SPACE.sample(np.random.default_rng(0))
    values["x"] = 1.5
    problems = SPACE.violations(values)
    assert problems == ["x=1.5 is outside its domain [-0.9, 0.9]"]


def test_missing_unknown_and_nested_violations() -> None:
    values = SPACE.sample(np.random.default_rng(1))
    del values["lane"]
    values["speed"] = 3
    values["track"] = [{"cmd": "U", "value": 10.0}]
    problems = SPACE.violations(values)
    assert any("unknown parameter 'speed'" in p for p in problems)
    assert any("missing parameter 'lane'" in p for p in problems)
    assert any("track[0].cmd='U'" in p for p in problems)


def test_samples_stay_in_domain_and_are_seeded() -> None:
    a = [SPACE.sample(np.random.default_rng(3)) for _ in range(3)]
    b = [SPACE.sample(np.random.default_rng(3)) for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(4)
    for _ in range(200):
        assert SPACE.violations(SPACE.sample(rng)) == []


def test_proto_round_trip_keeps_space_and_values() -> None:
    assert ParameterSpace.from_proto(SPACE.to_proto()) == SPACE
    values = SPACE.sample(np.random.default_rng(5))
    assert case_values(SPACE.test_case_to_proto("t1", values)) == values


def test_bad_declarations_are_refused_with_the_field_named() -> None:
    with pytest.raises(SpaceError, match="'v': needs low <= high"):
        ParameterSpace.from_config([{"name": "v", "low": 1, "high": 0}])
    with pytest.raises(SpaceError, match="unknown keys \\['hi'\\]"):
        ParameterSpace.from_config([{"name": "v", "low": 0, "hi": 1}])
    with pytest.raises(SpaceError, match="not a number"):
        ParameterSpace.from_config([{"name": "v", "low": "__import__('os')", "high": 1}])


def test_builtin_subjects_declare_the_papers_domains() -> None:
    subjects = load_subjects()
    cart = subjects["cartpole"].space
    assert cart.names == ["x", "x_dot", "theta", "theta_dot"]
    assert cart.bounds()[1].tolist() == pytest.approx([0.9, 0.3, math.pi / 60, math.pi / 90])
    assert len(subjects["humanoid"].space.parameters) == 47
    assert subjects["humanoid"].space.bounds()[1].max() == pytest.approx(0.01)
    assert subjects["humanoid_indago"].space.bounds()[1].max() == pytest.approx(0.03)
    assert subjects["lunarlander"].space.bounds()[1].tolist() == [1500, 1500]
    assert subjects["lunarlander_qd"].space.bounds()[1].tolist() == [1000, 1000]
    assert subjects["mountaincar"].space["position"].hints[0].kind == "centre"


def test_a_declared_nominal_value_travels_and_is_the_shrinks_nominal_point() -> None:
    from generator_service.shrink import distance, nominal

    space = ParameterSpace.from_config(
        [
            {"name": "x", "low": -1, "high": 3, "nominal": 0},
            {"name": "lane", "kind": "integer", "low": 0, "high": 5, "nominal": 1},
            {"name": "theta", "low": "-pi/60", "high": "pi/60", "nominal": "pi/120"},
            {"name": "y", "low": 0, "high": 1},  # undeclared: the centre
            {"name": "n", "kind": "integer", "low": 0, "high": 4},  # undeclared: the centre, 2
        ]
    )
    back = ParameterSpace.from_proto(space.to_proto())  # as the generator reads DescribeEnvironment's answer
    assert back == space
    assert [p.nominal for p in back.parameters] == [0.0, 1.0, pytest.approx(math.pi / 120), None, None]
    assert not space.to_proto().parameters[3].HasField("nominal")
    assert nominal(back) == {"x": 0.0, "lane": 1.0, "theta": pytest.approx(math.pi / 120), "y": 0.5, "n": 2.0}
    at_nominal = {"x": 0.0, "lane": 1, "theta": math.pi / 120, "y": 0.5, "n": 2}
    assert distance(back, at_nominal) == 0.0
    assert distance(back, {**at_nominal, "x": 2.0}) == pytest.approx(0.5)  # 2 from nominal over a width of 4


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "low": -1, "high": 1, "nominal": 2}, "'x': nominal=2.0 must lie in its domain [-1, 1]"),
        ({"name": "k", "kind": "integer", "low": 0, "high": 5, "nominal": 1.5}, "nominal=1.5 must lie in its domain"),
        ({"name": "w", "kind": "categorical", "choices": ["a"], "nominal": 0}, "only for real and integer parameters"),
        ({"name": "x", "low": -1, "high": 1, "nominal": "far"}, "parameter 'x': nominal must be a number, got 'far'"),
        ({"name": "x", "low": -1, "high": 1, "nominal": float("nan")}, "nominal must be a finite number"),
        ({"name": "x", "low": -1, "high": 1, "nominal": True}, "nominal must be a number, got True"),
    ],
)
def test_a_nominal_value_outside_its_parameter_is_refused_naming_it(entry: dict, message: str) -> None:
    with pytest.raises(SpaceError, match=re.escape(message)):
        ParameterSpace.from_config([entry])
