"""Subjects, injectors, oracles and the lock-step runner, in process (no services)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from common.seeding import derive_seed
from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import make_env
from simulator_service.runner import Job, run_lockstep
from simulator_service.subject import SubjectError, load_subject_file, load_subjects
from simulator_service.trace import TraceRecorder

SUBJECTS = load_subjects()


def test_cartpole_starts_exactly_at_the_test_case() -> None:
    env = make_env(SUBJECTS["cartpole"])
    values = {"x": 0.9, "x_dot": -0.3, "theta": -math.pi / 60, "theta_dot": math.pi / 90}
    obs, info = env.reset(seed=1, options={"values": values})
    np.testing.assert_allclose(obs, list(values.values()), rtol=1e-6)
    assert info["test_case"] == values


def test_mountaincar_state_is_injected() -> None:
    env = make_env(SUBJECTS["mountaincar_continuous"])
    obs, _ = env.reset(seed=0, options={"values": {"position": -0.9, "velocity": 0.04}})
    np.testing.assert_allclose(obs, [-0.9, 0.04], rtol=1e-6)


def _lunar_vx_after_one_step(fx: float, seed: int) -> float:
    env = make_env(SUBJECTS["lunarlander"])
    env.reset(seed=seed, options={"values": {"fx": fx, "fy": 0.0}})
    obs, *_ = env.step(0)
    return float(obs[2])


def test_lunar_initial_force_replaces_the_random_push() -> None:
    # Same force, different seeds (different random pushes and terrain): same first velocity.
    assert _lunar_vx_after_one_step(1500.0, 1) == pytest.approx(_lunar_vx_after_one_step(1500.0, 2), abs=1e-6)
    assert _lunar_vx_after_one_step(1500.0, 1) > 0 > _lunar_vx_after_one_step(-1500.0, 1)


def test_humanoid_pose_offsets_are_applied() -> None:
    subject = SUBJECTS["humanoid"]
    env = make_env(subject)
    values = {n: 0.0 for n in subject.space.names}
    values["qpos_2"] = 0.01  # torso height
    env.reset(seed=0, options={"values": values})
    base = env.unwrapped
    assert base.data.qpos[2] == pytest.approx(base.init_qpos[2] + 0.01)
    assert np.allclose(base.data.qvel, base.init_qvel)


def test_a_subject_file_with_a_missing_field_is_named(tmp_path: Any) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("subject: bad\nbackend: gymnasium\nenv_id: CartPole-v1\nparameters: []\n")
    with pytest.raises(SubjectError, match="missing field\\(s\\) oracle, injector, max_steps"):
        load_subject_file(path)


def test_a_new_classic_control_subject_needs_only_yaml(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "acrobot.yaml").write_text(
        "subject: acrobot_user\nbackend: gymnasium\nenv_id: Acrobot-v1\nmax_steps: 50\n"
        "injector: {kind: state_vector, attribute: state, indices: {theta1: 0, theta2: 1}}\n"
        "oracle: goal_not_reached\nparameters:\n  - {name: theta1, low: -0.1, high: 0.1}\n"
        "  - {name: theta2, low: -0.1, high: 0.1}\n"
    )
    monkeypatch.setenv("GAUNTLET_SUBJECT_PATH", str(tmp_path))
    subject = load_subjects()["acrobot_user"]
    env = make_env(subject)
    obs, _ = env.reset(seed=0, options={"values": {"theta1": 0.05, "theta2": -0.05}})
    assert env.unwrapped.state[:2].tolist() == pytest.approx([0.05, -0.05])
    # Acrobot observes (cos, sin) of both angles and the two velocities, not its 4-value state
    assert obs.shape == (6,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert obs.tobytes() == env.unwrapped._get_ob().tobytes()
    assert obs[:4].tolist() == pytest.approx([math.cos(0.05), math.sin(0.05), math.cos(-0.05), math.sin(-0.05)])
    env.check_first_observation()  # the simulator's load check accepts it


ACROBOT_STATE_AS_OBSERVATION = (
    "subject: acrobot_state\nbackend: gymnasium\nenv_id: Acrobot-v1\nmax_steps: 50\n"
    "injector: {kind: state_vector, indices: {theta1: 0, theta2: 1}, observation: state}\n"
    "oracle: goal_not_reached\nparameters:\n  - {name: theta1, low: -0.1, high: 0.1}\n"
    "  - {name: theta2, low: -0.1, high: 0.1}\n"
)


def test_a_subject_whose_first_observation_misses_its_space_is_refused_naming_both(tmp_path: Any) -> None:
    path = tmp_path / "acrobot.yaml"
    path.write_text(ACROBOT_STATE_AS_OBSERVATION)  # declares the 4-value state as Acrobot's observation
    env = make_env(load_subject_file(path))
    with pytest.raises(SubjectError) as refused:
        env.check_first_observation()
    message = str(refused.value)
    assert "subject acrobot_state" in message and "first observation of shape (4,)" in message
    assert "observation space Box(" in message and "(6,), float32)" in message


def test_an_observation_method_the_env_lacks_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "acrobot.yaml"
    path.write_text(ACROBOT_STATE_AS_OBSERVATION.replace("observation: state", "observation: _no_such_method"))
    with pytest.raises(SubjectError, match="observation='_no_such_method' names no method of AcrobotEnv"):
        make_env(load_subject_file(path)).check_first_observation()


@pytest.mark.parametrize("name", sorted(n for n, s in SUBJECTS.items() if s.backend == "gymnasium"))
def test_every_bundled_subject_passes_the_first_observation_check(name: str) -> None:
    make_env(SUBJECTS[name]).check_first_observation()


@pytest.mark.parametrize("name", ["cartpole", "mountaincar", "mountaincar_continuous"])
def test_state_vector_subjects_still_observe_their_injected_state(name: str) -> None:
    """CartPole and MountainCar have no observation method: the observation is the injected state, as before."""
    subject = SUBJECTS[name]
    env = make_env(subject)
    for i in range(20):
        values = subject.sample(np.random.default_rng(i))
        obs, _ = env.reset(seed=i, options={"values": values})
        expected = np.array([float(values[n]) for n in subject.space.names], dtype=np.float32)
        assert obs.tobytes() == expected.tobytes()


# -- oracles --------------------------------------------------------------------------------------------
def _episode(subject: str, values: dict[str, float], policy: Any, seed: int = 0) -> Episode:
    s = SUBJECTS[subject]
    recorder = TraceRecorder(s, list(get_oracle(s.oracle).required_signals))
    env = make_env(s)
    obs, _ = env.reset(seed=seed, options={"values": values})
    recorder.start()
    total, steps, terminated, truncated = 0.0, 0, False, False
    while not (terminated or truncated):
        action = policy(obs)
        recorder.step(env, obs, np.asarray(action), 0.0)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        steps += 1
    return Episode(steps, total, terminated, truncated, recorder.finish(env, obs))


def test_cartpole_oracle_fails_a_pushing_policy_and_passes_a_balancing_one() -> None:
    oracle = get_oracle("cartpole_balance")
    start = {"x": 0.0, "x_dot": 0.0, "theta": 0.02, "theta_dot": 0.0}
    bad = oracle.evaluate(_episode("cartpole", start, lambda o: 0))
    assert bad.failed and bad.margin <= 0.05 and "pole angle" in bad.reason
    good = oracle.evaluate(_episode("cartpole", start, lambda o: int(o[2] + 0.5 * o[3] > 0)))
    assert not good.failed and good.margin > 0
    assert sum(good.descriptors) == 500


def test_lunar_oracle_flags_a_crash() -> None:
    judged = get_oracle("lunar_crash").evaluate(_episode("lunarlander", {"fx": 0.0, "fy": -1500.0}, lambda o: 0))
    assert judged.failed and "hit the ground" in judged.reason


def test_mountaincar_oracle_fails_an_idle_car() -> None:
    judged = get_oracle("mountaincar_goal").evaluate(
        _episode("mountaincar", {"position": -0.5, "velocity": 0.0}, lambda o: 1)
    )
    assert judged.failed and judged.margin < 0


def test_oracle_names_missing_signals() -> None:
    with pytest.raises(KeyError, match="needs signal\\(s\\) observations"):
        get_oracle("cartpole_balance").evaluate(Episode(10, 10.0, True, False, {}))


# -- runner ---------------------------------------------------------------------------------------------
class _Exploding(gym.Wrapper):
    """Dies on the first step of the test case with x = 0.9, like a crashing simulator."""

    def reset(self, **kwargs: Any) -> Any:
        self.doomed = kwargs["options"]["values"]["x"] == 0.9
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        if self.doomed:
            raise RuntimeError("simulator died")
        return self.env.step(action)


def test_lockstep_runner_batches_refills_and_survives_a_dying_env() -> None:
    s = SUBJECTS["cartpole"]
    rng = np.random.default_rng(0)
    jobs = [Job(f"t{i}", {**s.space.sample(rng), "x": 0.0 if i != 3 else 0.9}, derive_seed(0, i)) for i in range(10)]
    batch_sizes: list[int] = []

    def act(obs: np.ndarray) -> np.ndarray:
        batch_sizes.append(len(obs))
        return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

    factory = lambda: _Exploding(make_env(s))  # noqa: E731
    outcomes = list(
        run_lockstep(factory, [factory() for _ in range(4)], jobs, act, lambda: TraceRecorder(s, ["observations"]))
    )
    assert sorted(o.job.test_case_id for o in outcomes) == sorted(j.test_case_id for j in jobs)
    broken = [o for o in outcomes if o.error]
    assert [o.job.test_case_id for o in broken] == ["t3"] and "simulator died" in broken[0].error
    assert max(batch_sizes) == 4  # one agent call per lock-step for all active slots
    assert sum(batch_sizes) == sum(o.steps for o in outcomes) + len(broken)  # the dying step acted too
    assert all(o.signals["observations"].shape == (o.steps, 4) for o in outcomes if not o.error)


def test_episodes_are_deterministic_given_test_case_and_seed() -> None:
    s = SUBJECTS["lunarlander"]
    job = Job("t", {"fx": 700.0, "fy": -300.0}, 42)
    runs = [
        list(
            run_lockstep(
                lambda: make_env(s),
                [make_env(s)],
                [job],
                lambda o: np.zeros(len(o), dtype=np.int64),
                lambda: TraceRecorder(s, []),
            )
        )[0]
        for _ in range(2)
    ]
    assert runs[0].steps == runs[1].steps and runs[0].total_reward == runs[1].total_reward


def test_pipelined_groups_give_the_same_episodes_with_smaller_batches() -> None:
    s = SUBJECTS["cartpole"]
    rng = np.random.default_rng(5)
    jobs = [Job(f"t{i}", s.space.sample(rng), derive_seed(1, i)) for i in range(24)]
    sizes: dict[int, list[int]] = {1: [], 2: []}
    results = {}
    for groups in (1, 2):

        def act(obs: np.ndarray, groups: int = groups) -> np.ndarray:
            sizes[groups].append(len(obs))
            return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

        outs = run_lockstep(
            lambda: make_env(s), [make_env(s) for _ in range(8)], jobs, act, lambda: TraceRecorder(s, []), groups=groups
        )
        results[groups] = {o.job.test_case_id: (o.steps, o.total_reward, o.terminated) for o in outs}
    assert results[1] == results[2] and len(results[1]) == 24
    assert max(sizes[1]) == 8 and max(sizes[2]) == 4  # each group: one batched call per step for its half


def test_a_rendering_environment_reads_the_same_signals_as_the_plain_one() -> None:
    """RenderEpisode wraps the subject's env in FrameCapture; trace recording and search specs (Mario's unsafe-state
    signals) call env.signal at each step, so the wrapper must answer it as the env does."""
    from simulator_service.frames import FrameCapture

    values = {"x": 0.5, "x_dot": 0.1, "theta": 0.02, "theta_dot": -0.1}
    plain = make_env(SUBJECTS["cartpole"])
    rendering = FrameCapture(make_env(SUBJECTS["cartpole"], render_mode="rgb_array"))
    for env in (plain, rendering):
        env.reset(seed=3, options={"values": values})
        env.step(1)
    np.testing.assert_array_equal(rendering.signal("state"), plain.signal("state"))
    assert rendering.signal("state").shape == (4,) and len(rendering.frames) == 2
