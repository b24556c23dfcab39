"""BipedalWalker with the obstacle-slot input (QD fault-diversity paper): injection, determinism, oracle, zoo agent."""

from __future__ import annotations

import numpy as np
import pytest

from agent_service.registry import ModelRegistry
from offline.evaluation import evaluate_policy
from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import make_env
from simulator_service.subject import load_subjects
from simulator_service.trace import TraceRecorder
from subjects.bipedal.env import PIT, STAIRS, STUMP
from subjects.bipedal.oracle import BIPEDAL_PAIRS, bipedal_features

SUBJECT = load_subjects()["bipedalwalker_obstacles"]
STEP = 14 / 30.0  # Gymnasium's TERRAIN_STEP
MODEL = "bipedalwalker-obstacles-ppo"


def _values(codes: list[int]) -> dict[str, int]:
    return dict(zip(SUBJECT.space.names, codes))


def _reset(codes: list[int]) -> tuple[np.ndarray, object]:
    env = make_env(SUBJECT)
    obs, _ = env.reset(seed=123, options={"values": _values(codes)})
    return obs, env


def test_injection_is_deterministic_and_ignores_the_reset_seed() -> None:
    codes = [3, 1, 2] * 5
    first, env_a = _reset(codes)
    env_b = make_env(SUBJECT)
    second, _ = env_b.reset(seed=999, options={"values": _values(codes)})
    assert np.array_equal(first, second)
    assert env_a.unwrapped.terrain_y == env_b.unwrapped.terrain_y
    _, env_c = _reset([1] * 15)
    assert env_c.unwrapped.terrain_y != env_a.unwrapped.terrain_y


def _walk(env: object, model: object, codes: list[int]) -> np.ndarray:
    """The bundled walker's observations over one whole episode."""
    obs, _ = env.reset(seed=0, options={"values": _values(codes)})  # type: ignore[attr-defined]
    rows = [obs]
    while True:
        action, _ = model.predict(obs, deterministic=True)  # type: ignore[attr-defined]
        obs, _, terminated, truncated, _ = env.step(action)  # type: ignore[attr-defined]
        rows.append(obs)
        if terminated or truncated:
            return np.array(rows)


def test_an_episode_does_not_depend_on_the_episodes_its_env_ran_before() -> None:
    """The simulator pools envs across requests. Gymnasium's walker kept one Box2D world per env, and after
    about ten earlier episodes its broad-phase state changed this input's trajectory (a 2.36 difference in
    the observations, measured on the old env)."""
    model = ModelRegistry().load(MODEL)
    codes = [STUMP, PIT, STAIRS] * 5
    fresh = _walk(make_env(SUBJECT), model, codes)
    used = make_env(SUBJECT)
    rng = np.random.default_rng(3)
    for episode in range(8):  # the old env first differed on the sixth round
        assert np.array_equal(fresh, _walk(used, model, codes)), f"round {episode}"
        _walk(used, model, [int(c) for c in rng.integers(1, 4, 15)])


def test_obstacle_kinds_land_in_the_terrain_in_slot_order() -> None:
    codes = [PIT, STUMP, STAIRS, STUMP, PIT, STAIRS, PIT, PIT, STUMP, STAIRS, STAIRS, STUMP, PIT, STUMP, STAIRS]
    _, env = _reset(codes)
    base = env.unwrapped
    slots = base.obstacle_slots
    assert len(slots) >= 8
    assert [s for s, _, _ in slots] == list(range(len(slots)))
    assert [c for _, c, _ in slots] == [codes[i % 15] for i in range(len(slots))]
    y = np.asarray(base.terrain_y)
    # bodies above the ground line (stumps, stair blocks, pit walls) by their left x
    blocks = [
        min(v[0] for v in body.fixtures[0].shape.vertices)
        for body in base.terrain
        if len(body.fixtures[0].shape.vertices) == 4
    ]
    for _, code, start in slots:
        if start + 6 >= len(y):
            break
        x0 = base.terrain_x[start]
        if code == PIT:
            assert y[start + 1] == pytest.approx(y[start] - 4 * STEP)  # the ground drops into the pit
        elif code == STAIRS:
            rise = np.abs(np.diff(y[start : start + 13])).max()
            assert 0.1 * STEP < rise < 2 * STEP  # steps, no pit drop
        else:  # stump: the ground stays put, a block stands at the slot
            assert abs(y[start + 1] - y[start]) < STEP
            assert any(abs(b - x0) < 1e-3 for b in blocks)  # Box2D keeps float32


def test_grass_code_and_bad_codes() -> None:
    env = make_env(SUBJECT)
    env.unwrapped.reset(options={"obstacles": [0] * 15})
    assert [c for _, c, _ in env.unwrapped.obstacle_slots][:5] == [0] * 5
    assert len(env.unwrapped.terrain) == 199  # only the ground edges: no obstacle bodies
    with pytest.raises(ValueError, match="codes in 0..3"):
        env.unwrapped.reset(options={"obstacles": [1, 4]})
    assert SUBJECT.space.violations(_values([0] * 15))  # the default domain is the authors' 1..3


def test_oracle_descriptors_and_fall_on_a_scripted_episode() -> None:
    rng = np.random.default_rng(0)
    env = make_env(SUBJECT)
    oracle = get_oracle(SUBJECT.oracle)
    recorder = TraceRecorder(SUBJECT, list(oracle.required_signals))
    obs, _ = env.reset(options={"values": _values([1] * 15)})
    recorder.start()
    total, steps = 0.0, 0
    while True:  # random flailing: the hull soon hits the ground
        action = rng.uniform(-1, 1, 4)
        nxt, reward, terminated, truncated, _ = env.step(action)
        recorder.step(env, obs, action, float(reward))
        obs, total, steps = nxt, total + float(reward), steps + 1
        if terminated or truncated:
            break
    signals = recorder.finish(env, obs)
    verdict = oracle.evaluate(Episode(steps, total, terminated, truncated, signals))
    assert verdict.failed == bool(env.unwrapped.game_over)
    assert verdict.margin == pytest.approx(total)
    feats = bipedal_features(signals["observations"], signals["actions"], signals["hull_x"])
    assert 3.0 < feats["distance"] < 20.0 and 0.0 <= feats["hull_angle"] < 3.2
    assert 0.0 <= feats["torque"] <= 4.0 and 0.0 <= feats["jump"] <= 1.0
    assert verdict.descriptors == (feats["distance"], feats["hull_angle"])
    for suffix, pair in BIPEDAL_PAIRS.items():
        other = get_oracle("bipedal_fall" + (f"_{suffix}" if suffix else ""))
        assert other.evaluate(Episode(steps, total, terminated, truncated, signals)).descriptors == (
            feats[pair[0]],
            feats[pair[1]],
        )


def test_bundled_walker_loads_and_walks_the_subject() -> None:
    registry = ModelRegistry()
    if MODEL not in registry.entries:
        pytest.skip(f"{MODEL} is not bundled")
    result = evaluate_policy(SUBJECT, lambda obs: registry.act(MODEL, obs), tests=2, seed=5, parallelism=2)
    assert result.tests == 2 and result.errors == 0
