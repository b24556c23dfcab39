"""The QD paper's enlarged Taxi: map, injection, faults, oracle, validator, Q-table agent, Q-learning."""

from __future__ import annotations

import dataclasses
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from agent_service.qtable import QTablePolicy
from agent_service.registry import ModelRegistry
from common.errors import InvalidArgument
from generator_service.surrogates.interaction_log import read_interaction_log
from offline.training import get_recipe, train
from oracle_service.oracles import Episode, Judgement, get_oracle
from simulator_service.backends import make_env
from simulator_service.server import SimulatorServicer
from simulator_service.subject import load_subjects
from simulator_service.trace import TraceRecorder
from subjects.taxi.env import DROPOFF, EAST, MAP_FILE, NORTH, PICKUP, SOUTH, WEST, TaxiMap, load_map

SUBJECT = load_subjects()["taxi_large"]
MAP = load_map()


def _values(row: int, col: int, passenger: int, destination: int) -> dict[str, int]:
    return {"taxi_row": row, "taxi_col": col, "passenger": passenger, "destination": destination}


def _run(values: dict[str, int], actions: list[int]) -> tuple[Any, Judgement, bool, bool, float]:
    """Plays scripted actions from a test case, records the oracle's signals and judges the episode."""
    oracle = get_oracle(SUBJECT.oracle)
    env = make_env(SUBJECT)
    recorder = TraceRecorder(SUBJECT, list(oracle.required_signals))
    recorder.start()
    obs, _ = env.reset(seed=0, options={"values": values})
    total, steps, terminated, truncated = 0.0, 0, False, False
    for action in actions:
        nxt, reward, terminated, truncated, _ = env.step(action)
        recorder.step(env, obs, np.asarray(action), float(reward))
        obs, total, steps = nxt, total + float(reward), steps + 1
        if terminated or truncated:
            break
    episode = Episode(steps, total, terminated, truncated, recorder.finish(env, obs))
    return env, oracle.evaluate(episode), terminated, truncated, total


def _route(m: TaxiMap, start: tuple[int, int], goal: tuple[int, int]) -> list[int]:
    """A shortest list of legal moves (breadth-first search over the map's walls)."""
    previous: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    steps = {SOUTH: (1, 0), NORTH: (-1, 0), EAST: (0, 1), WEST: (0, -1)}
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for action, (dr, dc) in steps.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if not m.blocked(*cell, action) and nxt not in previous:
                previous[nxt] = (cell, action)
                queue.append(nxt)
    path: list[int] = []
    cell = goal
    while previous[cell] is not None:
        cell, action = previous[cell]  # type: ignore[misc]
        path.append(action)
    return path[::-1]


def test_the_map_has_18_by_13_cells_11_locations_and_is_connected() -> None:
    assert (MAP.rows, MAP.columns) == (18, 13)
    assert MAP.names == tuple("ABCDEFGHIJK") and len(set(MAP.locations)) == 11
    assert MAP.in_taxi == 11
    assert any(any(row) for row in MAP.east_wall)  # interior walls exist
    for r in range(MAP.rows):
        for c in range(MAP.columns):
            assert _route(MAP, (0, 0), (r, c)) is not None  # every cell reachable (KeyError otherwise)
    env = make_env(SUBJECT)
    assert env.observation_space.n == 18 * 13 * 12 * 11 and env.action_space.n == 6


def test_a_map_with_a_bad_separator_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(MAP_FILE.read_text().replace("|A: : : |", "|A; : : |"))
    with pytest.raises(ValueError, match="separators must be"):
        load_map(bad)


def test_injecting_a_state_starts_exactly_there() -> None:
    env = make_env(SUBJECT)
    values = _values(17, 12, 4, 9)
    obs, info = env.reset(seed=3, options={"values": values})
    base = env.unwrapped
    assert base.decode(int(obs)) == (17, 12, 4, 9) and info["test_case"] == values
    assert (base.taxi_row, base.taxi_col, base.passenger, base.destination) == (17, 12, 4, 9)
    assert not (base.crash or base.illegal_action or base.delivered)
    assert base.moves_before_pickup == base.moves_after_pickup == 0


def test_moving_into_a_wall_is_a_crash_that_ends_the_episode_and_fails() -> None:
    # a wall separates (0, 3) from (0, 4) ("|A: : : | ..." on the top row)
    assert MAP.blocked(0, 3, EAST)
    env, verdict, terminated, _, _ = _run(_values(0, 3, 0, 1), [EAST, EAST, EAST])
    assert env.unwrapped.crash and terminated and env.unwrapped.taxi_col == 3
    assert verdict.failed and verdict.margin == -1.0 and "wall" in verdict.reason
    assert verdict.descriptors == (1.0, 0.0)


def test_leaving_the_grid_is_a_crash() -> None:
    env, verdict, terminated, _, _ = _run(_values(0, 5, 0, 1), [SOUTH, NORTH, NORTH])
    assert env.unwrapped.crash and terminated and verdict.failed and verdict.descriptors == (3.0, 0.0)


def test_an_illegal_drop_off_fails() -> None:
    env, verdict, terminated, _, total = _run(_values(2, 3, 0, 1), [WEST, DROPOFF, WEST])
    assert env.unwrapped.illegal_action and not env.unwrapped.crash and terminated
    assert total == -11.0 and verdict.failed and verdict.margin == -1.0 and "illegal" in verdict.reason


def test_an_illegal_pick_up_fails() -> None:
    _, verdict, terminated, _, _ = _run(_values(2, 3, 0, 1), [PICKUP])
    assert terminated and verdict.failed


def test_a_delivery_passes_with_the_paper_descriptors() -> None:
    start, passenger, destination = (8, 6), 3, 9  # passenger at D, destination J
    to_passenger = _route(MAP, start, MAP.locations[passenger])
    to_destination = _route(MAP, MAP.locations[passenger], MAP.locations[destination])
    env, verdict, terminated, truncated, total = _run(
        _values(*start, passenger, destination), [*to_passenger, PICKUP, *to_destination, DROPOFF]
    )
    assert env.unwrapped.delivered and terminated and not truncated
    assert not verdict.failed and verdict.margin == 1.0
    assert verdict.descriptors == (float(len(to_passenger)), float(len(to_destination)))
    assert total == 20 - (len(to_passenger) + 1 + len(to_destination))


def test_a_timeout_without_a_fault_passes_with_margin_zero() -> None:
    _, verdict, terminated, truncated, _ = _run(_values(2, 3, 0, 1), [SOUTH, NORTH] * 150)
    assert truncated and not terminated and not verdict.failed and verdict.margin == 0.0


def test_training_mode_lets_the_episode_go_on_after_a_fault() -> None:
    env = make_env(dataclasses.replace(SUBJECT, env_kwargs={"end_on_fault": False}))
    env.reset(seed=0, options={"values": _values(0, 0, 1, 2)})
    _, reward, terminated, _, info = env.step(NORTH)
    assert info["crash"] and not terminated and reward == -1.0
    _, reward, terminated, _, _ = env.step(PICKUP)
    assert reward == -10.0 and not terminated and env.unwrapped.illegal_action


def test_the_validator_rejects_passenger_equal_to_destination() -> None:
    problems = SUBJECT.violations(_values(2, 2, 4, 4))
    assert len(problems) == 1
    assert "passenger" in problems[0] and "destination" in problems[0]
    assert SUBJECT.violations(_values(2, 2, 4, 5)) == []
    assert "passenger != destination" in SUBJECT.space.constraints
    servicer = SimulatorServicer({SUBJECT.name: SUBJECT}, agent_endpoint="")
    cases = [
        SUBJECT.space.test_case_to_proto("same", _values(0, 0, 3, 3)),
        SUBJECT.space.test_case_to_proto("fine", _values(0, 0, 3, 7)),
        SUBJECT.space.test_case_to_proto("out", _values(18, 0, 3, 3)),
    ]
    same, fine, out = servicer._validate(SUBJECT, cases)
    assert not same.valid and list(same.violations) == [
        "passenger=3 and destination=3 must differ (passenger != destination)"
    ]
    assert fine.valid and not fine.violations
    assert not out.valid and len(out.violations) == 2  # the domain violation and the rule


def test_random_test_cases_and_training_starts_respect_the_validator() -> None:
    rng = np.random.default_rng(0)
    assert all(not SUBJECT.violations(SUBJECT.sample(rng)) for _ in range(2000))
    env = make_env(SUBJECT)
    for _ in range(200):
        env.reset()
        assert env.unwrapped.passenger != env.unwrapped.destination


def test_a_subject_with_an_unknown_validator_is_named(tmp_path: Path) -> None:
    from simulator_service.subject import SubjectError, load_subject_file

    data = yaml.safe_load(Path(SUBJECT.source).read_text())
    data["validators"] = [{"kind": "distinct", "parameters": ["passenger", "nope"]}]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SubjectError, match=r"validators\[0\].*nope"):
        load_subject_file(path)


def test_the_q_table_agent_acts_on_a_batch_through_the_registry(tmp_path: Path) -> None:
    q = np.random.default_rng(1).normal(size=(18 * 13 * 12 * 11, 6))
    (tmp_path / "taxi-q").mkdir()
    QTablePolicy(q).save(tmp_path / "taxi-q" / "model.npz")
    (tmp_path / "manifest.yaml").write_text(
        yaml.safe_dump(
            {"models": {"taxi-q": {"subject": "taxi_large", "algorithm": "QLEARNING", "description": "test"}}}
        )
    )
    registry = ModelRegistry(tmp_path)
    obs = np.array([0, 5, 1234, 30887, 42], dtype=np.int64)
    actions = registry.act("taxi-q", obs)
    assert actions.shape == (5,) and actions.dtype == np.int64
    np.testing.assert_array_equal(actions, q[obs].argmax(axis=1))
    model = registry.load("taxi-q")
    assert model.observation_space.n == 30888 and model.action_space.n == 6
    with pytest.raises(InvalidArgument, match="0..30887"):  # the caller's mistake, typed for the agent service
        registry.act("taxi-q", np.array([30888]))


def test_tiny_q_learning_training_writes_the_standard_log(tmp_path: Path) -> None:
    recipe = get_recipe("taxi-qlearning")
    recipe = dataclasses.replace(recipe, hyperparams={**recipe.hyperparams, "episodes": 40})
    meta = train(recipe, tmp_path)
    assert (tmp_path / "model.npz").exists() and meta["file_bytes"] == (tmp_path / "model.npz").stat().st_size
    rows = read_interaction_log(tmp_path / "training_log.jsonl.gz")
    assert len(rows) == meta["training_episodes"] == 40
    assert sum(r["verdict"] == "fail" for r in rows) == meta["training_failures"]
    assert rows[-1]["timestep"] == meta["timesteps"] == sum(r["steps"] for r in rows)
    for i, row in enumerate(rows, 1):
        assert row["episode"] == i and row["verdict"] in ("pass", "fail") and row["margin"] in (-1.0, 0.0, 1.0)
        assert {"reward", "steps"} <= set(row)
        assert SUBJECT.violations(row["config"]) == []
    assert QTablePolicy.load(tmp_path / "model.npz").q.shape == (30888, 6)
    # the recipe's `timesteps` (or an override) caps env steps
    capped = train(recipe, tmp_path / "capped", timesteps=300)
    assert capped["timesteps"] == 300
