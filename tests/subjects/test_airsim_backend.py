"""The airsim backend against a toy AirSim host speaking msgpack-rpc over real TCP (tests/fake_airsim_server.py).

No Unreal runs here. The capture subject (airsim_urban) must give the same observation/ground-truth pair as the
synthetic urban subject; the driving subject (airsim_drive) runs whole campaigns through the real service
processes with a tiny policy (a PPO network whose action head is set to drive straight at half throttle, as
test_donkey_backend.py drives the Donkey car with a constant action).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

from cli.launcher import LocalSuite
from common.errors import ServiceError
from common.generated.gauntlet.v1 import (
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from generator_service.config import CampaignConfig
from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import backends, make_env
from simulator_service.runner import Job, run_lockstep
from simulator_service.subject import Subject, load_subjects
from simulator_service.trace import TraceRecorder
from subjects.airsim.backend import ENDPOINT_ENV, LEASES
from tests.fake_airsim_server import FakeAirSimServer

DRIVE = np.array([0.0, 0.5], dtype=np.float32)
STRAIGHT = {"x": 0.0, "y": -2.0, "yaw": 0.0, "rain": 0.3, "fog": 0.2, "hour": 9.0}  # beside the parked car
INTO_CAR = {**STRAIGHT, "y": 0.0}  # the fake's parked car stands at (60, 0)
OFF_ROAD = {**STRAIGHT, "yaw": 25.0}
POSE = {"x": 30.0, "y": 1.0, "yaw": 20.0}


def subject(name: str, endpoint: str, **overrides: object) -> Subject:
    base = load_subjects()[name]
    kwargs = {**base.env_kwargs, "endpoint": endpoint, "connect_timeout_s": 2.0, "call_timeout_s": 2.0, **overrides}
    return dataclasses.replace(base, env_kwargs=kwargs)


def drive(env: object, steps: int = 150) -> int:
    for n in range(1, steps + 1):
        *_, terminated, _, _ = env.step(DRIVE)
        if terminated:
            return n
    return steps


@pytest.fixture(autouse=True)
def no_endpoint_override(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    yield
    assert not LEASES.taken(), "a test left an AirSim host leased"


def test_backend_is_registered_and_the_hosts_come_from_env_or_subject(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "airsim" in backends()
    with FakeAirSimServer() as a, FakeAirSimServer() as b:
        monkeypatch.setenv(ENDPOINT_ENV, f"{a.endpoint},{b.endpoint}")
        env = make_env(subject("airsim_drive", "127.0.0.1:1"))  # nothing listens on port 1: the env var wins
        env.reset(options={"values": STRAIGHT})
        assert str(env.unwrapped.endpoint) == a.endpoint and "ping" in a.calls and not b.calls
        env.close()
        monkeypatch.delenv(ENDPOINT_ENV)
        assert str(make_env(subject("airsim_drive", b.endpoint)).unwrapped.endpoint) == b.endpoint
    with pytest.raises(ValueError, match="env_kwargs do not fit"):
        make_env(subject("airsim_drive", "127.0.0.1:41451", wheels=4))
    with pytest.raises(ValueError, match="must be host:port"):
        make_env(subject("airsim_drive", "sim:99999"))


def test_a_capture_yields_the_urban_subject_s_observation_and_ground_truth() -> None:
    subjects = load_subjects()
    urban, airsim_urban = subjects["urban"], subjects["airsim_urban"]
    assert airsim_urban.space.to_proto() == urban.space.to_proto()  # same parameters, names and bounds
    assert [dataclasses.astuple(s) for s in airsim_urban.signals] == [dataclasses.astuple(s) for s in urban.signals]
    assert (airsim_urban.oracle, airsim_urban.max_steps) == (urban.oracle, urban.max_steps)
    assert airsim_urban.observation_translator == urban.observation_translator
    assert airsim_urban.env_kwargs["classes"] == urban.env_kwargs["classes"]
    assert airsim_urban.env_kwargs["image"] == urban.env_kwargs["image"]
    # a host whose camera renders at another size, answering in small delayed pieces
    with FakeAirSimServer(width=200, height=100, split=True, delay_s=0.01) as host:
        ours, theirs = make_env(subject("airsim_urban", host.endpoint)), make_env(urban)
        obs, _ = ours.reset(options={"values": POSE})
        reference, _ = theirs.reset(options={"values": POSE})
        assert ours.observation_space == theirs.observation_space and ours.action_space == theirs.action_space
        assert obs.shape == reference.shape and obs.dtype == reference.dtype
        for name in [s.attribute for s in urban.signals]:
            mine, synthetic = ours.signal(name), theirs.signal(name)
            assert (mine.dtype, mine.shape) == (synthetic.dtype, synthetic.shape), name
        assert host.calls.count("simGetImages") == 1  # Scene and Segmentation in one call
        labels = ours.signal("label_map")
        present = set(np.unique(labels).tolist())
        assert {0, 1, 2, 4} <= present  # road, sidewalk, building, sky are in view from this pose
        # the segmentation image paints every mesh in its class's colour: the map matches the fake's ray cast
        expected = np.array([0, 1, 2, 3, 4, 5])[host._ray_cast()]  # fake mesh order = class order
        from PIL import Image

        expected = np.asarray(Image.fromarray(expected.astype(np.uint8)).resize((128, 64), Image.Resampling.NEAREST))
        assert np.mean(labels == expected) > 0.99
        assert ours.signal("on_road") == 1 and ours.signal("iou_threshold") == theirs.signal("iou_threshold")
        assert ("Road.*", 1) in host.segmentation_ids and host.segmentation_ids[0] == (".*", 0)
        ours.step(np.zeros((64, 128), dtype=np.uint8))
        assert ours.signal("prediction_simulated").shape == (64, 128)
        ours.close()


def test_drive_episodes_end_on_collision_or_leaving_the_road_through_the_runner_and_oracle() -> None:
    with FakeAirSimServer() as host:
        drive_subject = subject("airsim_drive", host.endpoint)
        oracle = get_oracle(drive_subject.oracle)
        jobs = [Job(name, values, seed=0) for name, values in (("car", INTO_CAR), ("off", OFF_ROAD), ("ok", STRAIGHT))]
        made: list = []

        def factory() -> object:
            made.append(make_env(drive_subject))
            return made[-1]

        signals = [*oracle.required_signals, "lane_distance", "speed"]
        outcomes = {
            o.job.test_case_id: o
            for o in run_lockstep(
                factory,
                [factory()],
                jobs,
                lambda obs: np.tile(DRIVE, (len(obs), 1)),
                lambda: TraceRecorder(drive_subject, signals),
                max_steps=drive_subject.max_steps,
            )
        }
        for env in made:
            env.close()
    verdicts = {}
    for name, out in outcomes.items():
        assert out.error == "", out.error
        verdicts[name] = oracle.evaluate(
            Episode(out.steps, out.total_reward, out.terminated, out.truncated, out.signals)
        )
    assert verdicts["car"].failed and "collided" in verdicts["car"].reason
    assert verdicts["off"].failed and "left the road" in verdicts["off"].reason and verdicts["off"].margin < 0
    assert not verdicts["ok"].failed and verdicts["ok"].margin > 0 and outcomes["ok"].truncated
    assert outcomes["ok"].signals["speed"][-1] == pytest.approx(5.0)
    assert host.weather == {0: 0.3, 7: 0.2} and host.time_of_day.endswith("09:00:00")


def test_a_host_that_does_not_answer_is_unavailable_naming_it() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    env = make_env(subject("airsim_drive", f"127.0.0.1:{port}"))
    with pytest.raises(ServiceError) as err:
        env.reset(options={"values": STRAIGHT})
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert f"cannot connect to the AirSim host at 127.0.0.1:{port}" in str(err.value)
    # a host that accepts the connection and then stays silent: the call's timeout
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"
        env = make_env(subject("airsim_drive", endpoint, call_timeout_s=0.5))
        with pytest.raises(ServiceError) as err:
            env.reset(options={"values": STRAIGHT})
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
        assert f"the AirSim host at {endpoint} did not answer ping within 0.5 s" in str(err.value)
    finally:
        silent.close()


def test_an_unexpected_api_version_is_failed_precondition_naming_it() -> None:
    with FakeAirSimServer(server_version=7) as host:
        env = make_env(subject("airsim_drive", host.endpoint))
        with pytest.raises(ServiceError) as err:
            env.reset(options={"values": STRAIGHT})
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert f"the AirSim host at {host.endpoint} speaks API version 7" in str(err.value)
        assert "setCarControls" not in host.calls


@pytest.mark.parametrize(
    ("malformed", "method", "says"),
    [
        ("garbage", "getCarState", "bytes that are not msgpack"),
        ("shape", "getCarState", "data the airsim client cannot read"),
        ("shape", "simGetImages", "without PNG bytes"),
    ],
)
def test_a_malformed_response_is_data_loss_naming_the_host(malformed: str, method: str, says: str) -> None:
    with FakeAirSimServer(malformed_method=method, malformed=malformed) as host:
        env = make_env(subject("airsim_drive", host.endpoint))
        with pytest.raises(ServiceError) as err:
            env.reset(options={"values": STRAIGHT})
            env.step(DRIVE)
        assert err.value.code == grpc.StatusCode.DATA_LOSS
        assert f"the AirSim host at {host.endpoint}" in str(err.value) and says in str(err.value)
        env.close()


def test_one_vehicle_per_host_more_envs_than_hosts() -> None:
    with FakeAirSimServer() as a, FakeAirSimServer() as b:
        pair = subject("airsim_drive", f"{a.endpoint},{b.endpoint}")
        envs = [make_env(pair) for _ in range(3)]
        envs[0].reset(options={"values": STRAIGHT})
        envs[1].reset(options={"values": OFF_ROAD})
        assert {str(e.unwrapped.endpoint) for e in envs[:2]} == {a.endpoint, b.endpoint}
        with pytest.raises(ServiceError) as err:
            envs[2].reset(options={"values": STRAIGHT})
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
        assert f"({a.endpoint}, {b.endpoint}) already run a car" in str(err.value)
        assert "lower the campaign's parallelism to 2" in str(err.value)
        envs[0].close()
        envs[2].reset(options={"values": STRAIGHT})  # the host is free again
        assert str(envs[2].unwrapped.endpoint) == a.endpoint
        for env in envs:
            env.close()


def test_a_host_dropped_mid_episode_is_unavailable_and_the_next_episode_moves_to_another_host() -> None:
    with FakeAirSimServer(drop_after=40) as a, FakeAirSimServer() as b:
        env = make_env(subject("airsim_drive", f"{a.endpoint},{b.endpoint}"))
        env.reset(options={"values": STRAIGHT})
        with pytest.raises(ServiceError) as err:
            drive(env)
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
        assert f"the AirSim host at {a.endpoint} closed the connection" in str(err.value)
        env.reset(options={"values": STRAIGHT})  # host a is gone (refused): the env fails over to b
        assert str(env.unwrapped.endpoint) == b.endpoint and drive(env) == 150
        env.close()


# -- whole campaigns through the real service processes ---------------------------------------------------------


def tiny_driving_model(root: Path) -> str:
    """A PPO network for airsim_drive whose action head ignores the image: steering 0, throttle 0.5."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    class Spaces(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (64, 96, 3), dtype=np.uint8)
        action_space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 1.0], np.float32))

    model = PPO("MlpPolicy", Spaces(), policy_kwargs={"net_arch": [8]}, device="cpu", seed=0)
    # SB3 stores image spaces channel-first; the MLP flattens either layout, so the model keeps the subject's
    model.observation_space = model.policy.observation_space = Spaces.observation_space
    with torch.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.copy_(torch.tensor(DRIVE))
    name = "airsim-drive-straight"
    (root / name).mkdir(parents=True)
    model.save(root / name / "model.zip")
    manifest = {"models": {name: {"subject": "airsim_drive", "algorithm": "PPO", "description": "drives straight"}}}
    (root / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    return name


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[FakeAirSimServer]]:
    # the first host goes away after ~1.5 episodes; the second serves the rest
    servers = [FakeAirSimServer(drop_after=1500), FakeAirSimServer()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def airsim_suite(hosts: list[FakeAirSimServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    root = tmp_path_factory.mktemp("airsim")
    tiny_driving_model(root / "models")
    suite = LocalSuite(store_url=f"sqlite:///{root / 'store.db'}", log_dir=root / "logs", model_root=root / "models")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENDPOINT_ENV, ",".join(h.endpoint for h in hosts))  # the simulator service's hosts
        suite.start()
    yield suite
    suite.stop()


def test_a_driving_campaign_survives_a_host_that_drops_mid_campaign(
    airsim_suite: LocalSuite, hosts: list[FakeAirSimServer]
) -> None:
    config = CampaignConfig(
        subject="airsim_drive",
        model="airsim-drive-straight",
        seed=3,
        budget={"max_executions": 6},
        batch_size=3,
        parallelism=1,
    )
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(airsim_suite.endpoint("generator")))
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120).status
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    status = events[-1].status
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    rows = [
        r.execution for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=status.campaign_id))
    ]
    # an errored execution does not count against max_executions (the generator asks for one more), so: every
    # index once, every test case once, six judged
    assert sorted(r.index for r in rows) == list(range(1, len(rows) + 1))
    assert len({r.test_case.id for r in rows}) == len(rows)
    assert len([r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID]) == 6
    errors = [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_INVALID]
    assert len(errors) == 1 and hosts[0].endpoint in errors[0].reason, [r.reason for r in rows]
    judged = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID]
    assert all(r.steps > 0 for r in judged) and "setCarControls" in hosts[1].calls


def test_the_simulator_service_describes_airsim_urban_as_urban_without_a_host(airsim_suite: LocalSuite) -> None:
    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(airsim_suite.endpoint("simulator")))
    ours = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="airsim_urban"), timeout=60)
    theirs = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="urban"), timeout=60)
    for field in ("parameter_space", "observation_space", "action_space", "signals", "default_oracle", "max_steps"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert [r.kind for r in ours.validity_rules] == [r.kind for r in theirs.validity_rules] == ["road_lanes"]
