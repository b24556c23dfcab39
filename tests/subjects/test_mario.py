"""Super Mario Bros. as its own simulator process in its own virtual environment (.venv-mario, `make .venv-mario`).

The suite's simulator (numpy 2) cannot import the emulator, so it does not serve the Mario subjects itself and
forwards them to the Mario simulator (`--peer-simulator`); everything here talks to the suite's simulator and
generator endpoints only. Without .venv-mario the tests that need it skip, saying how to build it; with
GAUNTLET_REQUIRE_MARIO set (.ci/run) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest

from cli.launcher import SIMULATOR_ENVIRONMENTS, LocalSuite, environments_for
from common.generated.gauntlet.v1 import (
    agent_pb2_grpc,
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from common.tensor import from_tensor, to_tensor
from generator_service.config import CampaignConfig
from simulator_service.server import register
from simulator_service.subject import SUBJECT_PATH_ENV, load_subjects

MARIO = SIMULATOR_ENVIRONMENTS["mario"]
SHORT_STEPS = 60  # agent steps of the test's short Mario subject (240 emulator frames)


@pytest.fixture(scope="module")
def mario_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    if not MARIO.available():
        if os.environ.get("GAUNTLET_REQUIRE_MARIO"):
            pytest.fail(f"{MARIO.python} is missing (.ci/run builds it with `make .venv-mario`)")
        pytest.skip(f"the Mario simulator's environment is not built ({MARIO.python} missing): make .venv-mario")
    root = tmp_path_factory.mktemp("mario")
    # a 60-step variant of mario_1_1 (the bundled one runs 1,000 steps), declared the way users add subjects
    subjects = root / "subjects"
    subjects.mkdir()
    text = (Path(load_subjects()["mario_1_1"].source)).read_text()
    short = text.replace("subject: mario_1_1\n", "subject: mario_1_1_short\n").replace(
        "max_steps: 1000\n", f"max_steps: {SHORT_STEPS}\n"
    )
    assert short.count("mario_1_1_short") == 1 and f"max_steps: {SHORT_STEPS}" in short
    (subjects / "mario_1_1_short.yaml").write_text(short)
    previous = os.environ.get(SUBJECT_PATH_ENV)
    os.environ[SUBJECT_PATH_ENV] = str(subjects)  # the services inherit it
    local = LocalSuite(
        store_url=f"sqlite:///{root / 'store.db'}",
        log_dir=root / "logs",
        artifact_root=root / "artifacts",
        report_root=root / "reports",  # the replay test's campaign writes its report here, not in runs/
        environments=environments_for(["mario_1_1"]),
    )
    try:
        local.start()
        yield local
    finally:
        local.stop()
        if previous is None:
            os.environ.pop(SUBJECT_PATH_ENV, None)
        else:
            os.environ[SUBJECT_PATH_ENV] = previous


def simulator(suite: LocalSuite, name: str = "simulator") -> simulator_pb2_grpc.SimulatorServiceStub:
    return simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint(name)))


def test_the_launcher_starts_the_mario_simulator_only_for_mario_subjects() -> None:
    assert environments_for(["mario_1_1", "mario_1_2"]) == ("mario",)
    assert environments_for(["cartpole", "taxi_large"]) == ()


@pytest.mark.skipif(importlib.util.find_spec("nes_py") is not None, reason="this environment has the emulator")
def test_a_simulator_without_the_emulator_does_not_serve_mario_and_says_why() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    register(server, load_subjects(), agent_endpoint="", parallelism=4)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        stub = simulator_pb2_grpc.SimulatorServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        listed = {e.subject for e in stub.ListEnvironments(simulator_pb2.ListEnvironmentsRequest()).environments}
        assert "cartpole" in listed and not any(s.startswith("mario") for s in listed)
        with pytest.raises(grpc.RpcError) as failed:
            stub.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="mario_1_1"), timeout=30)
        assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "gym_super_mario_bros, nes_py" in failed.value.details()
        assert "make .venv-mario" in failed.value.details()
    finally:
        server.stop(None)


def test_the_suites_simulator_lists_and_describes_the_mario_subjects_it_forwards(mario_suite: LocalSuite) -> None:
    own = {
        e.subject
        for e in simulator(mario_suite, "simulator-mario")
        .ListEnvironments(simulator_pb2.ListEnvironmentsRequest())
        .environments
    }
    assert own == {"mario_1_1", "mario_1_1_basic", "mario_1_1_right_complex", "mario_1_2", "mario_1_1_short"}
    sim = simulator(mario_suite)
    listed = {e.subject for e in sim.ListEnvironments(simulator_pb2.ListEnvironmentsRequest()).environments}
    assert own <= listed and "cartpole" in listed
    info = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="mario_1_1"), timeout=120)
    assert list(info.observation_space.shape) == [4, 84, 84] and from_tensor(info.observation_space.high).max() == 255
    assert info.action_space.n == 2 and info.search.actions == [0, 1] and info.search.snapshot
    checked = sim.ValidateConfigs(
        simulator_pb2.ValidateConfigsRequest(subject="mario_1_2", test_cases=[noop_case(5), noop_case(500)]), timeout=60
    )
    assert [r.valid for r in checked.results] == [True, False]  # answered by the Mario simulator
    with pytest.raises(grpc.RpcError) as failed:  # the Mario simulator's own refusal, relayed with its code
        list(sim.RunEpisodes(simulator_pb2.RunEpisodesRequest(subject="mario_1_2", test_cases=[noop_case(1)])))
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "model.name" in failed.value.details()


def noop_case(frames: int) -> common_pb2.TestCase:
    case = common_pb2.TestCase(id=f"noop{frames}")
    case.values["noop_frames"].integer = frames
    return case


class Session:
    """One OpenSession stream through the suite's simulator: send a command, read its answer."""

    def __init__(self, stub: simulator_pb2_grpc.SimulatorServiceStub) -> None:
        self.outbox: queue.Queue[simulator_pb2.OpenSessionRequest | None] = queue.Queue()
        self.replies = stub.OpenSession(iter(self.outbox.get, None), timeout=600)

    def send(self, request: simulator_pb2.OpenSessionRequest) -> simulator_pb2.OpenSessionResponse:
        self.outbox.put(request)
        return next(self.replies)

    def open(
        self, replay: tuple[int, ...] = (), subject: str = "mario_1_1", noop_frames: int = 7
    ) -> simulator_pb2.OpenSessionResponse:
        return self.send(
            simulator_pb2.OpenSessionRequest(
                open=simulator_pb2.SessionOpen(subject=subject, test_case=noop_case(noop_frames), seed=0, replay=replay)
            )
        )

    def step(self, action: int) -> simulator_pb2.OpenSessionResponse:
        return self.send(
            simulator_pb2.OpenSessionRequest(step=simulator_pb2.SessionStep(action=to_tensor(np.int64(action))))
        )

    def close(self) -> None:
        self.outbox.put(None)


def test_snapshot_then_restore_replays_the_same_trajectory_bit_for_bit(mario_suite: LocalSuite) -> None:
    rng = np.random.default_rng(0)
    prefix = [int(a) for a in rng.integers(0, 2, size=25)]
    suffix = [int(a) for a in rng.integers(0, 2, size=15)]
    take = simulator_pb2.OpenSessionRequest(snapshot=simulator_pb2.SessionSnapshot())
    session = Session(simulator(mario_suite))
    try:
        session.open()
        for a in prefix[:10]:
            session.step(a)
        early = session.send(take)
        for a in prefix[10:]:
            session.step(a)
        snapshot = session.send(take)
        assert snapshot.snapshot_id and snapshot.step == len(prefix)
        first = [session.step(a) for a in suffix]
        # the backend's ways back: from the level start (then the emulator keeps this state as a checkpoint) ...
        restored = session.send(
            simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=snapshot.snapshot_id))
        )
        assert restored.step == len(prefix)
        second = [session.step(a) for a in suffix]
        # ... from that checkpoint (nothing to replay) ...
        session.send(
            simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=snapshot.snapshot_id))
        )
        third = [session.step(a) for a in suffix]
        # ... and to an earlier state than the checkpoint: the level start rebuilt by a power cycle, then replay
        session.send(
            simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=early.snapshot_id))
        )
        fourth = [session.step(a) for a in prefix[10:] + suffix][-len(suffix) :]
    finally:
        session.close()
    frames = [from_tensor(r.observation) for r in first]
    assert frames[0].shape == (4, 84, 84) and frames[0].dtype == np.uint8
    assert len({f.tobytes() for f in frames}) > 1  # Mario moves: the frames are not all the same picture
    for a, b in [*zip(first, second, strict=True), *zip(first, third, strict=True), *zip(first, fourth, strict=True)]:
        assert np.array_equal(from_tensor(a.observation), from_tensor(b.observation))
        assert (a.reward, a.terminated, a.truncated, a.step) == (b.reward, b.terminated, b.truncated, b.step)
        assert np.array_equal(from_tensor(a.abstract_state), from_tensor(b.abstract_state))  # x and y position
    # reset + replay of the whole trace (the way back for a subject that cannot snapshot) reaches the same state
    session = Session(simulator(mario_suite))
    try:
        replayed = session.open(replay=tuple(prefix + suffix))
    finally:
        session.close()
    assert np.array_equal(from_tensor(replayed.observation), from_tensor(second[-1].observation))
    assert replayed.step == len(prefix) + len(suffix)


def test_the_level_start_rebuilt_after_a_lost_life_is_the_first_one(mario_suite: LocalSuite) -> None:
    """Regression: nes-py's Reset is the console's reset button and keeps work RAM, so on 1-2 the level start that a
    power cycle rebuilt after Mario had lost a life lay 21 px further on, and the DFS's reference trace could not be
    replayed. Running right from the start of 1-2, Mario meets a goomba on his 19th step."""
    take = simulator_pb2.OpenSessionRequest(snapshot=simulator_pb2.SessionSnapshot())

    def back_to(snapshot: simulator_pb2.OpenSessionResponse) -> None:
        session.send(
            simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=snapshot.snapshot_id))
        )

    session = Session(simulator(mario_suite))
    try:
        session.open(subject="mario_1_2", noop_frames=0)
        start = session.send(take)
        first = [session.step(0) for _ in range(17)]
        before = session.send(take)
        first.append(session.step(1))  # the first jump on 1-2's reference trace
        back_to(before)  # replayed from the level start, then kept as the emulator's checkpoint
        run = [session.step(0) for _ in range(2)]
        assert run[-1].terminated  # the goomba: a lost life
        back_to(start)  # the checkpoint lies past the start: the start is rebuilt by a power cycle
        second = [session.step(0) for _ in range(17)] + [session.step(1)]
    finally:
        session.close()
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(from_tensor(a.abstract_state), from_tensor(b.abstract_state))  # x and y position
        assert np.array_equal(from_tensor(a.observation), from_tensor(b.observation))


def test_a_campaign_on_mario_with_the_trained_agent_stores_its_verdicts(mario_suite: LocalSuite) -> None:
    config = CampaignConfig(
        name="mario-e2e",
        subject="mario_1_1_short",
        model="mario-1-1-2moves-ddqn",
        seed=1,
        budget={"max_executions": 4},
        batch_size=4,
        parallelism=4,
    )
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(mario_suite.endpoint("generator")))
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=300).status
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=600))
    assert events[-1].kind == "finished", events[-1]
    rows = [
        r.execution for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=started.campaign_id))
    ]
    assert len(rows) == 4
    judged = {oracle_pb2.VERDICT_KIND_PASS, oracle_pb2.VERDICT_KIND_FAIL}
    assert all(r.verdict in judged for r in rows), [r.verdict for r in rows]
    for r in rows:
        # early_termination: a lost life ends the episode early and fails; surviving the 60 steps passes
        assert (r.steps < SHORT_STEPS) == (r.verdict == oracle_pb2.VERDICT_KIND_FAIL), (r.steps, r.verdict)
        assert 0 <= r.test_case.values["noop_frames"].integer <= 60


def test_the_ddqn_agents_load_from_the_zoo_and_act_greedily_whatever_the_batch() -> None:
    from agent_service.registry import ModelRegistry

    registry = ModelRegistry()
    frames = np.random.default_rng(0).integers(0, 256, size=(19, 4, 84, 84), dtype=np.uint8)
    for name, n_actions in (
        ("mario-1-1-2moves-ddqn", 2),
        ("mario-1-1-basic-ddqn", 4),
        ("mario-1-1-right-complex-ddqn", 6),
    ):
        model = registry.load(name)
        assert model.observation_space.shape == (4, 84, 84) and model.action_space.n == n_actions
        actions = registry.act(name, frames)
        assert actions.dtype == np.int64 and actions.shape == (19,) and set(actions) <= set(range(n_actions))
        import torch

        q = model.module(torch.from_numpy(frames)).detach().numpy()
        assert np.array_equal(actions, q.argmax(axis=1))  # greedy
        for size in (1, 2, 8, 9):  # an observation's action does not depend on the lock-step it came in
            assert np.array_equal(registry.act(name, frames[:size]), actions[:size]), (name, size)
    with pytest.raises(Exception, match=r"expects observations of shape \(batch, 4, 84, 84\)"):
        registry.act("mario-1-1-2moves-ddqn", frames[:, :3])


MARIO_CAMPAIGN = """campaign:
  name: mario-replay
  subject: mario_1_1
  model: mario-1-1-2moves-ddqn
  strategy: random
  seed: 1
  budget: {max_executions: 4}
  batch_size: 4
  parallelism: 4
"""


def test_replay_of_a_stored_mario_failure_reproduces_its_verdict_and_writes_an_animation(
    mario_suite: LocalSuite, tmp_path: Path
) -> None:
    """Issue 32: `gauntlet replay` of a Mario failure (a life lost before the 60 steps) gives the same verdict, and
    --render writes the episode, through the Mario simulator the suite's simulator forwards to."""
    from PIL import Image, ImageSequence

    endpoints = ("--generator", mario_suite.endpoint("generator"), "--analysis", mario_suite.endpoint("analysis"))

    def gauntlet(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli.main", *args, *endpoints],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "200"},
        )

    (tmp_path / "m.yaml").write_text(MARIO_CAMPAIGN)
    out = gauntlet("run", str(tmp_path / "m.yaml"), "--id", "mario-replay-1")
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"failure (t\d{7}): ([^\n]*)", out.stdout)
    assert found, out.stdout
    gif = tmp_path / "mario.gif"
    out = gauntlet("replay", "mario-replay-1", found.group(1), "--render", str(gif))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "same verdict" in out.stdout and f"replayed fail: {found.group(2)}" in out.stdout
    with Image.open(gif) as animation:
        assert sum(1 for _ in ImageSequence.Iterator(animation)) > 10


def trace_case(case_id: str, actions: list[int], agent_steps: int, agent_subject: str = "") -> common_pb2.TestCase:
    case = noop_case(0)
    case.id = case_id
    case.action_trace.actions.extend(actions)
    case.action_trace.agent_steps = agent_steps
    case.action_trace.agent_subject = agent_subject
    return case


def run_cases(
    sim: simulator_pb2_grpc.SimulatorServiceStub, model: str, cases: list[common_pb2.TestCase]
) -> list[common_pb2.EpisodeResult]:
    request = simulator_pb2.RunEpisodesRequest(
        subject="mario_1_1_short", model=common_pb2.ModelRef(name=model), test_cases=cases, seed=0
    )
    return [r.result for r in sim.RunEpisodes(request, timeout=300) if r.HasField("result")]


def test_an_agent_with_another_action_set_acts_from_the_searched_subjects_prefix_in_its_variant(
    mario_suite: LocalSuite,
) -> None:
    """Issue 29: a prefix found with the 2-moves actions, after which the basic agent acts with its own 4 actions.
    Without the variant the model does not fit (FAILED_PRECONDITION); a name that is no declared variant, or two
    different names in one request, are refused before any episode runs."""
    sim = simulator(mario_suite)
    info = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="mario_1_1_short"), timeout=120)
    assert list(info.variants) == ["mario_1_1_basic", "mario_1_1_right_complex"]
    prefix = [0, 1, 0, 0, 1, 0, 0, 0]
    with pytest.raises(grpc.RpcError) as misfit:
        run_cases(sim, "mario-1-1-basic-ddqn", [trace_case("plain", prefix, 5)])
    assert misfit.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "does not fit" in str(misfit.value.details())
    results = run_cases(
        sim,
        "mario-1-1-basic-ddqn",
        [trace_case("basic", prefix, 5, "mario_1_1_basic"), trace_case("basic2", prefix[:3], 4, "mario_1_1_basic")],
    )
    assert sorted((r.test_case_id, r.steps) for r in results) == [("basic", 13), ("basic2", 7)]
    assert all(not r.violations for r in results)
    for bad, detail in (
        ([trace_case("other", prefix, 5, "mario_1_2")], "not a variant of subject mario_1_1_short"),
        (
            [trace_case("a", prefix, 5, "mario_1_1_basic"), trace_case("b", prefix, 5, "mario_1_1_right_complex")],
            "every test case of one request must name the same variant",
        ),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            run_cases(sim, "mario-1-1-basic-ddqn", bad)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and detail in str(refused.value.details())


def test_the_search_based_bench_checks_every_model_fits_before_it_searches(mario_suite: LocalSuite) -> None:
    """Issue 29: the replication resolves each model's acting subject before the DFS (23 minutes on Mario 1-1); a
    model that fits neither the subject nor a declared variant stops it at once, naming the model."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from replications.replicate_search_based import acting_subjects, run_pipeline

    sim = simulator(mario_suite)
    agent = agent_pb2_grpc.AgentServiceStub(client_channel(mario_suite.endpoint("agent")))
    models = ["mario-1-1-2moves-ddqn", "mario-1-1-basic-ddqn", "mario-1-1-right-complex-ddqn"]
    assert acting_subjects(sim, agent, "mario_1_1", models) == {
        "mario-1-1-2moves-ddqn": "",
        "mario-1-1-basic-ddqn": "mario_1_1_basic",
        "mario-1-1-right-complex-ddqn": "mario_1_1_right_complex",
    }
    with pytest.raises(SystemExit, match=r"model 'cartpole-ppo' .* fits neither subject 'mario_1_1' nor a variant"):
        run_pipeline(mario_suite, "mario_1_1", ["mario-1-1-2moves-ddqn", "cartpole-ppo"], max_samples=5)
    assert not (mario_suite.artifact_root / "search" / "mario_1_1.json").exists()  # nothing was searched
    # trace fuzzing runs open loop in the searched subject, whose preflight needs a model of it among the models
    with pytest.raises(SystemExit, match=r"every model acts in a variant of 'mario_1_1' \(mario_1_1_basic\)"):
        run_pipeline(mario_suite, "mario_1_1", ["mario-1-1-basic-ddqn"], max_samples=5)
    assert not (mario_suite.artifact_root / "search" / "mario_1_1.json").exists()


def test_a_safety_suite_campaign_runs_the_basic_agent_in_its_variant(mario_suite: LocalSuite) -> None:
    """Issue 29, end to end: search_safety with agent_subject puts the variant on every test case, and the
    generator's campaign runs the basic agent from the 2-moves prefixes (it used to stop with 'does not fit')."""
    import json

    from bench.harness import campaign_executions, run_campaign

    reference = {
        "format": "gauntlet.search_reference.v1", "subject": "mario_1_1_short", "initial": {"noop_frames": 0},
        "seed": 0, "search_actions": [0, 1], "agent_actions": 2, "success": True,
        "reference_actions": [0, 0, 1, 0, 0, 0], "reference_rewards": [0.0] * 6, "reference_states": [],
        "boundary": [{"depth": 2, "state": [0, 0]}, {"depth": 4, "state": [0, 0]}], "stats": {},
    }  # fmt: skip
    (mario_suite.artifact_root / "search").mkdir(parents=True, exist_ok=True)
    (mario_suite.artifact_root / "search" / "short_ref.json").write_text(json.dumps(reference))
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(mario_suite.endpoint("generator")))
    config = CampaignConfig(
        name="mario-variant-st",
        subject="mario_1_1_short",
        model="mario-1-1-basic-ddqn",
        strategy="search_safety",
        strategy_params={
            "reference": "search/short_ref.json",
            "suite": "ST",
            "agent_steps": 3,
            "agent_subject": "mario_1_1_basic",
        },
        oracle="trace_safety",
        seed=0,
        budget={"max_executions": 10},
    )
    rows = campaign_executions(gen, run_campaign(gen, config).campaign_id)
    assert [r.test_case.action_trace.agent_subject for r in rows] == ["mario_1_1_basic"] * 2
    assert sorted(r.steps for r in rows) == [5, 7]  # each prefix, then the agent's 3 steps
