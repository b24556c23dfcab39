"""The donkey backend against the DonkeySim JSON-over-TCP protocol, served by an in-test toy simulator.

No Unity simulator runs here: tests/fake_donkey_sim.py speaks the protocol (newline-delimited JSON from the sim,
concatenated JSON objects from the client, Indago's regen_track/send_track) and drives a deterministic toy car.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from cli.launcher import LocalSuite
from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import backends, make_env
from simulator_service.runner import Job, run_lockstep
from simulator_service.subject import Subject, load_subjects
from simulator_service.trace import TraceRecorder
from subjects.donkey.backend import ENDPOINT_ENV, DonkeyEnv
from subjects.donkey.client import SimProtocolError, SimUnavailable, parse_endpoint
from subjects.donkey.track import as_records, track_string
from tests.fake_donkey_sim import FakeDonkeySim

# valid under the paper's rules; the toy car takes every curve (radius >= 11 m), so it reaches the end line
GENTLE = as_records(
    [
        ("S", 5),
        ("DY", 10),
        ("L", 12),
        ("S", 5),
        ("DY", 10),
        ("R", 6),
        ("S", 3),
        ("DY", 10),
        ("L", 6),
        ("S", 5),
        ("S", 5),
        ("S", 5),
    ]
)
# also valid: its first curve (DY 42, L 3: 126 deg on a 2.7 m radius) is too sharp for the toy car
SHARP = as_records(
    [
        ("S", 5),
        ("DY", 42),
        ("L", 3),
        ("S", 5),
        ("DY", 10),
        ("R", 6),
        ("S", 3),
        ("DY", 10),
        ("L", 6),
        ("S", 5),
        ("S", 5),
        ("S", 5),
    ]
)
DRIVE = np.array([0.0, 0.5], dtype=np.float32)


@pytest.fixture()
def sim() -> Iterator[FakeDonkeySim]:
    with FakeDonkeySim(split_frames=True) as server:
        yield server


def donkey_subject(endpoint: str, **overrides: object) -> Subject:
    subject = load_subjects()["donkey"]
    kwargs = {
        **subject.env_kwargs,
        "endpoint": endpoint,
        "cte_centre": 0.0,
        "max_cte": 2.0,
        "min_throttle": 0.0,
        "io_timeout_s": 3.0,
        "track_confirm_timeout_s": 1.0,
        **overrides,
    }
    return dataclasses.replace(subject, env_kwargs=kwargs, max_steps=600)


def drive(env: object, steps: int = 600) -> tuple[int, float, bool]:
    total = 0.0
    for n in range(1, steps + 1):
        _, reward, terminated, _, _ = env.step(DRIVE)  # type: ignore[attr-defined]
        total += reward
        if terminated:
            return n, total, True
    return steps, total, False


def test_backend_is_registered_and_the_endpoint_comes_from_env_or_subject(
    monkeypatch: pytest.MonkeyPatch, sim: FakeDonkeySim
) -> None:
    assert "donkey" in backends()
    subject = donkey_subject("127.0.0.1:1")  # nothing listens on port 1: the env var must win
    monkeypatch.setenv(ENDPOINT_ENV, sim.endpoint)
    env = make_env(subject)
    assert str(env.unwrapped.endpoint) == sim.endpoint
    env.close()
    monkeypatch.delenv(ENDPOINT_ENV)
    assert str(make_env(subject).unwrapped.endpoint) == "127.0.0.1:1"
    assert parse_endpoint("sim.example") == parse_endpoint("sim.example:9091")
    with pytest.raises(ValueError, match="host:port"):
        parse_endpoint("sim:99999")
    with pytest.raises(ValueError, match="env_kwargs do not fit"):
        make_env(donkey_subject(sim.endpoint, wheels=4))


def test_a_full_episode_reaches_the_end_line(sim: FakeDonkeySim) -> None:
    env = make_env(donkey_subject(sim.endpoint))
    obs, info = env.reset(options={"values": {"track": GENTLE}})
    assert obs.shape == (120, 160, 3) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    steps, total, ended = drive(env)
    base = env.unwrapped
    assert ended and base.reached_end and not base.off_road
    assert base.waypoints > 50 and total > 0  # waypoint bonuses outweigh the step penalty
    assert base.signal("position").shape == (2,)
    kinds = [m["msg_type"] for m in sim.received]
    assert kinds[:4] == ["load_scene", "cam_config", "regen_track", "reset_car"] and kinds.count("control") == steps
    regen = next(m for m in sim.received if m["msg_type"] == "regen_track")
    assert regen["track_string"] == track_string(GENTLE) and regen["lane_string"] == "right"
    control = next(m for m in sim.received if m["msg_type"] == "control")
    assert control == {"msg_type": "control", "steering": "0.0", "throttle": "0.5", "brake": "0.0"}
    # a second episode on the same connection: new track, car reset
    env.reset(options={"values": {"track": SHARP}})
    assert [m["msg_type"] for m in sim.received].count("load_scene") == 1
    env.close()


def test_off_road_on_a_sharp_curve_is_a_failure_through_the_runner_and_oracle(sim: FakeDonkeySim) -> None:
    subject = donkey_subject(sim.endpoint)
    oracle = get_oracle(subject.oracle)
    signals = list(oracle.required_signals) + ["cte"]
    jobs = [Job("sharp", {"track": SHARP}, seed=0), Job("gentle", {"track": GENTLE}, seed=0)]
    outcomes = {
        o.job.test_case_id: o
        for o in run_lockstep(
            lambda: make_env(subject),
            [make_env(subject)],
            jobs,
            lambda obs: np.tile(DRIVE, (len(obs), 1)),
            lambda: TraceRecorder(subject, signals),
            max_steps=subject.max_steps,
        )
    }
    verdicts = {}
    for case, out in outcomes.items():
        assert out.error == "", out.error
        verdicts[case] = oracle.evaluate(
            Episode(out.steps, out.total_reward, out.terminated, out.truncated, out.signals)
        )
    sharp, gentle = verdicts["sharp"], verdicts["gentle"]
    assert sharp.failed and sharp.margin < 0 and "left the road" in sharp.reason
    assert not gentle.failed and gentle.margin > 0 and "end line" in gentle.reason
    cte = outcomes["sharp"].signals["cte"]
    assert abs(cte[-1]) > 2.0 and abs(cte[0]) < 0.5  # the cross-track error grew on the curve
    assert outcomes["sharp"].steps < outcomes["gentle"].steps


def test_a_dropped_connection_mid_episode_is_unavailable() -> None:
    with FakeDonkeySim(drop_after=5) as sim:
        env = DonkeyEnv(sim.endpoint, io_timeout_s=3.0)
        env.reset(options={"track": GENTLE})
        for _ in range(5):
            env.step(DRIVE)
        with pytest.raises(SimUnavailable) as err:
            env.step(DRIVE)
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
        assert sim.endpoint in str(err.value) and "closed the connection" in str(err.value)
        with pytest.raises(SimUnavailable, match="reset first"):
            env.step(DRIVE)


def test_the_runner_turns_a_dropped_simulator_into_an_error_outcome() -> None:
    with FakeDonkeySim(drop_after=3) as sim:
        subject = donkey_subject(sim.endpoint)
        out = next(
            run_lockstep(
                lambda: make_env(subject),
                [make_env(subject)],
                [Job("t", {"track": GENTLE}, 0)],
                lambda obs: np.tile(DRIVE, (len(obs), 1)),
                lambda: TraceRecorder(subject, []),
                max_steps=50,
            )
        )
    assert out.error.startswith("environment error: SimUnavailable") and "closed the connection" in out.error


def test_a_malformed_message_is_a_protocol_error() -> None:
    with FakeDonkeySim(malformed_after=2) as sim:
        env = DonkeyEnv(sim.endpoint, io_timeout_s=3.0)
        env.reset(options={"track": GENTLE})
        env.step(DRIVE)
        env.step(DRIVE)
        with pytest.raises(SimProtocolError) as err:
            env.step(DRIVE)
        assert err.value.code == grpc.StatusCode.DATA_LOSS
        assert "malformed message" in str(err.value) and '"cte": 0.1, oops' in str(err.value)
        env.close()


def test_telemetry_without_a_required_field_is_a_protocol_error() -> None:
    with FakeDonkeySim(omit_field="cte") as sim:
        env = DonkeyEnv(sim.endpoint, io_timeout_s=3.0)
        with pytest.raises(SimProtocolError, match="telemetry .* lacks cte"):
            env.reset(options={"track": GENTLE})
        env.close()


def test_a_stock_sim_that_ignores_the_track_is_reported() -> None:
    with FakeDonkeySim(echo_track=False) as sim:
        env = DonkeyEnv(sim.endpoint, io_timeout_s=3.0, track_confirm_timeout_s=0.3)
        with pytest.raises(SimUnavailable, match="did not confirm the track .*regen_track.*modified DonkeySim") as err:
            env.reset(options={"track": GENTLE})
        assert "within 0.3 s" in str(err.value) and "within 0.3 s" in str(err.value.__cause__)
        with pytest.raises(ValueError, match=r"\(steering, throttle\), got shape \(3,\)"):
            env.step([0.0, 0.5, 1.0])
        env.close()


def test_nothing_listening_is_unavailable_naming_the_endpoint() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    env = DonkeyEnv(f"127.0.0.1:{port}", connect_timeout_s=1.0)
    with pytest.raises(SimUnavailable, match=f"cannot connect to the Donkey simulator at 127.0.0.1:{port}"):
        env.reset(options={"track": GENTLE})
    with pytest.raises(ValueError, match="needs options"):
        env.reset()


def test_one_car_per_simulator_endpoints_are_leased() -> None:
    with FakeDonkeySim() as first, FakeDonkeySim() as second:
        a, b = DonkeyEnv(first.endpoint, io_timeout_s=3.0), DonkeyEnv(first.endpoint, io_timeout_s=3.0)
        a.reset(options={"track": GENTLE})
        with pytest.raises(SimUnavailable, match="already run a car .* lower the campaign's parallelism to 1"):
            b.reset(options={"track": GENTLE})
        a.close()
        b.reset(options={"track": GENTLE})  # the endpoint is free again
        b.close()
        pair = f"{first.endpoint},{second.endpoint}"
        c, d = DonkeyEnv(pair, io_timeout_s=3.0), DonkeyEnv(pair, io_timeout_s=3.0)
        c.reset(options={"track": GENTLE})
        d.reset(options={"track": SHARP})
        assert {str(c.endpoint), str(d.endpoint)} == {first.endpoint, second.endpoint}
        assert drive(d)[2] and d.off_road and not c.off_road
        c.close()
        d.close()


def test_the_simulator_service_describes_donkey_and_validates_tracks_over_grpc(suite: LocalSuite) -> None:
    from common.generated.gauntlet.v1 import simulator_pb2, simulator_pb2_grpc
    from common.server import client_channel
    from common.space import ParameterSpace

    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint("simulator")))
    described = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="donkey"))  # no sim needed
    assert described.summary.backend == "donkey" and list(described.observation_space.shape) == [120, 160, 3]
    space = ParameterSpace.from_proto(described.parameter_space)
    assert space["track"].kind == "sequence" and space["track"].max_length == 12
    assert any("no turn over 170 deg" in c for c in space.constraints)
    broken = [dict(r) for r in GENTLE]
    broken[0] = {"command": "DY", "value": 10.0}
    cases = [space.test_case_to_proto("ok", {"track": GENTLE}), space.test_case_to_proto("bad", {"track": broken})]
    reply = sim.ValidateConfigs(simulator_pb2.ValidateConfigsRequest(subject="donkey", test_cases=cases))
    ok, bad = reply.results
    assert ok.valid and not bad.valid
    assert "track: track[0] is DY: rule 1 (starts and ends with S)" in bad.violations[0]
