"""Parking (highway-env): validity, the injected scene, the numpy observation, wire codec, oracle, HER training."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
from highway_env.envs.common.observation import KinematicsGoalObservation

from common.generated.gauntlet.v1 import common_pb2
from common.space_spec import compatible, pack_observations, space_to_proto, unpack_observations
from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import make_env
from simulator_service.subject import get_subject
from simulator_service.trace import TraceRecorder
from subjects.parking.env import NumpyKinematicsGoalObservation, spot_lane

SUBJECT = get_subject("parking")


def _values(goal: int = 3, parked: tuple[int, ...] = (), head: float = 0.0, x: float = 0.0, y: float = 0.0) -> dict:
    values = {"goal_lane": goal, "head_ego": head, "x": x, "y": y}
    values.update({f"parked_{i}": int(i + 1 in parked) for i in range(20)})
    return values


def test_space_is_indagos_and_the_goal_spot_must_be_free() -> None:
    assert SUBJECT.space.names == ["goal_lane", "head_ego", *[f"parked_{i}" for i in range(20)], "x", "y"]
    assert SUBJECT.violations(_values(goal=5, parked=(4, 6))) == []
    problems = SUBJECT.violations(_values(goal=5, parked=(5,)))
    assert problems == [
        "goal_lane=5 names an occupied spot (parked_4=1); the spot goal_lane names must be free (parked_4 = 0)"
    ]
    assert "x=11 is outside its domain [-10, 10]" in SUBJECT.violations(_values(x=11))[0]
    rng = np.random.default_rng(0)
    for _ in range(200):  # uniform draws are redrawn until the rule holds
        v = SUBJECT.sample(rng)
        assert v[f"parked_{v['goal_lane'] - 1}"] == 0


def test_injector_places_goal_parked_cars_and_ego() -> None:
    env = make_env(SUBJECT)
    obs, _ = env.reset(seed=0, options={"values": _values(goal=14, parked=(1, 10, 13, 15), head=0.25, x=-7.5, y=3.0)})
    base = env.unwrapped
    ego = base.vehicle
    assert np.allclose(ego.position, [-7.5, 3.0]) and np.isclose(ego.heading, 0.5 * np.pi) and ego.speed == 0
    goal_lane = base.road.network.get_lane(("b", "c", 3))  # spot 14 = second row, fourth from the left
    assert spot_lane(14) == ("b", "c", 3)
    assert np.allclose(ego.goal.position, goal_lane.position(4.0, 0)) and np.allclose(ego.goal.position, [-6, -14])
    cars = [o for o in base.road.objects if o.LENGTH == 5.0]
    expected = {spot: base.road.network.get_lane(spot_lane(spot)).position(4.0, 0) for spot in (1, 10, 13, 15)}
    assert sorted(map(tuple, (np.round(c.position, 6) for c in cars))) == sorted(
        tuple(np.round(p, 6)) for p in expected.values()
    )
    assert [tuple(expected[1]), tuple(expected[10])] == [(-18.0, 14.0), (18.0, 14.0)]  # row 1, left to right
    assert len(base.road.vehicles) == 1 and len(base.road.objects) == 1 + 4 + 4  # goal, cars, walls
    assert np.allclose(obs["observation"], [-0.075, 0.03, 0, 0, np.cos(0.5 * np.pi), 1.0])
    assert np.allclose(obs["desired_goal"], [-0.06, -0.14, 0, 0, np.cos(-np.pi / 2), -1.0])


def test_numpy_observation_equals_highway_envs_on_random_states() -> None:
    env = make_env(SUBJECT)
    base = env.unwrapped
    settings = {k: v for k, v in base.config["observation"].items() if k != "type"}
    rng = np.random.default_rng(1)
    checked = 0
    for episode in range(6):
        env.reset(seed=episode, options={"values": SUBJECT.sample(rng)})
        for _ in range(40):
            ours = NumpyKinematicsGoalObservation(base, **settings).observe()
            theirs = KinematicsGoalObservation(base, **settings).observe()
            assert list(ours) == list(theirs)
            for key in theirs:
                assert ours[key].dtype == theirs[key].dtype and np.array_equal(ours[key], theirs[key]), key
            checked += 1
            _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 2))
            if terminated or truncated:
                break
    assert checked >= 60
    assert isinstance(base.observation_type, NumpyKinematicsGoalObservation)
    assert isinstance(base.observation_type_parking, NumpyKinematicsGoalObservation)


def test_dict_observations_travel_flat_in_sorted_key_order() -> None:
    space = make_env(SUBJECT).observation_space
    spec = space_to_proto(space)
    assert spec.kind == "dict" and list(spec.shape) == [18] and compatible(spec, space_to_proto(space))
    assert not compatible(spec, common_pb2.SpaceSpec(kind="box", shape=[18]))
    batch = [
        {"observation": np.full(6, i), "desired_goal": np.full(6, 10 + i), "achieved_goal": np.full(6, 20 + i)}
        for i in range(3)
    ]
    packed = pack_observations(batch)
    assert packed.shape == (3, 18) and packed[1, 0] == 21 and packed[1, 6] == 11 and packed[1, 12] == 1
    restored = unpack_observations(space, packed)
    assert set(restored) == set(batch[0]) and np.array_equal(restored["desired_goal"][2], np.full(6, 12))
    boxes = [np.arange(4.0), np.ones(4)]
    assert np.array_equal(pack_observations(boxes), np.stack(boxes))  # the Box path is np.stack, unchanged


def _episode(values: dict, actions: np.ndarray) -> tuple[Episode, int]:
    env = make_env(SUBJECT)
    oracle = get_oracle(SUBJECT.oracle)
    recorder = TraceRecorder(SUBJECT, list(oracle.required_signals))
    obs, _ = env.reset(seed=0, options={"values": values})
    recorder.start()
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        action = actions[min(steps, len(actions) - 1)]
        nxt, _, terminated, truncated, _ = env.step(action)
        recorder.step(env, obs, action, 0.0)
        obs, steps = nxt, steps + 1
    return Episode(steps, 0.0, terminated, truncated, recorder.finish(env, obs)), steps


def test_oracle_fails_a_crash_and_a_timeout_and_records_the_trajectory() -> None:
    oracle = get_oracle("parking_fail")
    # facing +y, below spot 3 (x = -10) which holds a parked car: full throttle ahead hits it
    crash, steps = _episode(_values(goal=1, parked=(3,), head=0.25, x=-10.0, y=5.0), np.array([[1.0, 0.0]]))
    verdict = oracle.evaluate(crash)
    assert verdict.failed and verdict.margin == -1.0 and "crashed" in verdict.reason
    xy = crash.signals["ego_xy"]
    assert xy.shape == (steps, 2) and np.allclose(xy[:, 0], -10.0, atol=1e-6) and xy[-1, 1] > 7.0
    # standing still: never parked, the timeout (100 steps) is a failure with a margin in (-1, 0]
    idle, steps = _episode(_values(goal=1), np.array([[0.0, 0.0]]))
    verdict = oracle.evaluate(idle)
    assert (
        steps == SUBJECT.max_steps
        and verdict.failed
        and -1.0 < verdict.margin <= 0.0
        and "not parked" in verdict.reason
    )


def test_a_her_recipe_trains_and_logs_every_episode(tmp_path: Path) -> None:
    from generator_service.surrogates.interaction_log import read_interaction_log
    from offline.training import get_recipe, train

    recipe = get_recipe("parking-her-sac")
    params = {**recipe.hyperparams, "learning_starts": 200, "batch_size": 16, "policy_kwargs": {"net_arch": [16]}}
    meta = train(dataclasses.replace(recipe, hyperparams=params), tmp_path, timesteps=210)
    rows = read_interaction_log(tmp_path / "training_log.jsonl.gz")
    assert len(rows) == meta["training_episodes"] >= 2
    for i, row in enumerate(rows, 1):
        assert row["episode"] == i and row["verdict"] in ("pass", "fail") and -1.0 <= row["margin"] <= 1.0
        assert SUBJECT.violations(row["config"]) == []
    assert [r["timestep"] for r in rows] == sorted(r["timestep"] for r in rows)


def test_the_bundled_agent_acts_on_its_subject_through_the_agent_registry() -> None:
    from agent_service.registry import ModelRegistry
    from offline.evaluation import evaluate_policy

    registry = ModelRegistry()
    name = next(n for n, e in registry.entries.items() if e.subject == "parking")
    model = registry.load(name)
    assert isinstance(model.observation_space, gym.spaces.Dict)
    result = evaluate_policy(SUBJECT, lambda obs: registry.act(name, obs), tests=4, seed=3, parallelism=2)
    assert result.errors == 0 and result.tests == 4


def test_indago_encoding_is_24_features_and_saliency_maps_back_to_parameters() -> None:
    from generator_service.surrogates.encoding import Encoder

    encoder = Encoder(SUBJECT.space)
    values = _values(goal=20, parked=(3, 5, 6, 8, 13), head=0.25, x=5.0, y=-2.5)  # the paper's Figure 1 lot
    vector = encoder.encode(values)
    assert encoder.n_features == 24
    bits = [1.0 if spot in (3, 5, 6, 8, 13) else 0.0 for spot in range(1, 21)]
    assert np.allclose(vector, [1.0, 0.25, *bits, 0.75, 0.25])  # goal, heading, one bit per spot, x, y (min-max)
    assert encoder.decode(vector) == values
    gradient = np.zeros(24)
    gradient[2 + 19] = 0.9  # "park a car in spot 20" scores highest, but spot 20 is the goal ...
    gradient[2 + 3] = 0.5  # ... next: park a car in spot 4
    gradient[1] = -0.2  # turn the heading down
    moves = encoder.parameter_moves(gradient, values)
    assert [(m.name, m.direction) for m in moves] == [("parked_19", 1), ("parked_3", 1), ("head_ego", -1)]


def test_indago_mutation_keeps_parking_inputs_valid_and_moves_the_flags() -> None:
    from generator_service.surrogates.search import Mutator, subject_validity

    validity = subject_validity(SUBJECT.space, SUBJECT.rules)
    rng = np.random.default_rng(5)
    mutator = Mutator(surrogate=None, validity=validity, rng=rng, mode="random", scale=0.1)
    values = SUBJECT.sample(rng)
    flips = 0
    for _ in range(300):
        child = mutator.random(values)
        assert SUBJECT.violations(child) == []
        changed = [k for k in values if child[k] != values[k]]
        assert len(changed) <= 1
        flips += bool(changed) and changed[0].startswith("parked_")
        values = child
    assert flips > 150  # 20 of the 24 parameters are flags: most mutations add or remove a parked car
    # saliency: a move that would park a car on the goal is skipped for the next valid one
    from types import SimpleNamespace

    from generator_service.surrogates.encoding import Encoder

    encoder = Encoder(SUBJECT.space)
    directed = Mutator(surrogate=SimpleNamespace(encoder=encoder), validity=validity, rng=rng, mode="saliency")
    values = _values(goal=7, parked=(1,))
    gradient = np.zeros(24)
    gradient[2 + 6], gradient[2 + 11] = 0.9, 0.4  # park on spot 7 (the goal), then on spot 12
    child = directed.directed(values, gradient)
    assert child is not None and child["parked_6"] == 0 and child["parked_11"] == 1
    assert SUBJECT.violations(child) == []
