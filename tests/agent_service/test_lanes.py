"""Same-host lanes (common/lane.py, AgentService.OpenLane) against a real agent service process.

The simulator's act() runs the same tests over a lane and over ActStream: the same actions, the same errors with
the same codes and sentences, the same end when the agent dies. The handshake and framing are attacked directly.
Then whole batches run through simulator processes: one acting over a lane, one told to use ActStream (--agent-lanes
off) and one in its own mount namespace, where the agent's socket folder is an empty tmpfs, as on another host: it
falls back by itself, and all three return identical episodes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from cli.launcher import LocalSuite
from common.errors import InvalidArgument, NotFound, ServiceError, Unavailable
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, common_pb2, simulator_pb2, simulator_pb2_grpc
from common.lane import (
    ACCEPTED,
    ERROR,
    REQUEST,
    RESPONSE,
    SECRET_BYTES,
    LaneConnection,
    LaneError,
    connect_lane,
    decode_error,
    remove_stale_lane_dirs,
)
from common.server import client_channel
from common.tensor import from_tensor, to_tensor
from simulator_service.agent_client import AgentLane, AgentStream, open_actor
from tests.conftest import one_model_root

MODEL = "cartpole-ppo"
PATHS = ["lane", "grpc"]


def _agent_suite(root: Path, *agent_args: str) -> LocalSuite:
    local = LocalSuite(store_url=f"sqlite:///{root / 'unused.db'}", log_dir=root / "logs")
    local.start_service(
        "agent", "agent_service", "--model-root", str(one_model_root(root / "models", MODEL)), *agent_args
    )
    return local


def short_dir() -> str:
    """A folder of its own with a short path: pytest's temp paths can exceed a Unix socket's 107 bytes."""
    return tempfile.mkdtemp(prefix="lanes-")


@pytest.fixture(scope="module")
def lane_dir() -> Iterator[Path]:
    folder = Path(short_dir())
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, lane_dir: Path) -> Iterator[LocalSuite]:
    local = _agent_suite(tmp_path_factory.mktemp("lane-agent"), "--lane-dir", str(lane_dir))
    yield local
    local.stop()


def _stub(local: LocalSuite) -> agent_pb2_grpc.AgentServiceStub:
    return agent_pb2_grpc.AgentServiceStub(client_channel(local.endpoint("agent")))


def _actor(local: LocalSuite, path: str, model: str = MODEL) -> AgentLane | AgentStream:
    actor = open_actor(_stub(local), model, lanes=path == "lane")
    assert isinstance(actor, AgentLane if path == "lane" else AgentStream)
    return actor


def _lanes(local: LocalSuite) -> dict[str, float]:
    """The agent's gauntlet_agent_lanes_total counters by outcome."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{local.services['agent'].metrics_port}/metrics").read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("gauntlet_agent_lanes_total{"):
            counts[line.split('outcome="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.mark.parametrize("path", PATHS)
def test_actions_equal_the_unary_act(agent: LocalSuite, path: str) -> None:
    rng = np.random.default_rng(0)
    actor = _actor(agent, path)
    try:
        for rows in (1, 7, 32, 200):
            observations = rng.normal(size=(rows, 4)).astype(np.float32)
            expected = from_tensor(
                _stub(agent)
                .Act(agent_pb2.ActRequest(model=common_pb2.ModelRef(name=MODEL), observations=to_tensor(observations)))
                .actions
            )
            got = actor.act(observations)
            assert got.dtype == expected.dtype and np.array_equal(got, expected)
    finally:
        actor.close()


@pytest.mark.parametrize("path", PATHS)
def test_pipelined_batches_are_answered_in_order(agent: LocalSuite, path: str) -> None:
    batches = [np.full((n, 4), v, np.float32) for n, v in ((3, -0.2), (5, 0.2), (2, -0.2))]
    actor = _actor(agent, path)
    try:
        for batch in batches:
            actor.send(batch)
        answers = [actor.receive() for _ in batches]
    finally:
        actor.close()
    assert [len(a) for a in answers] == [3, 5, 2]
    reference = [_actor_answer(agent, b) for b in batches]
    assert all(np.array_equal(a, r) for a, r in zip(answers, reference))


def _actor_answer(agent: LocalSuite, observations: np.ndarray) -> np.ndarray:
    request = agent_pb2.ActRequest(model=common_pb2.ModelRef(name=MODEL), observations=to_tensor(observations))
    return from_tensor(_stub(agent).Act(request).actions)


@pytest.mark.parametrize(
    "observations, words",
    [
        (np.zeros((4, 5), np.float32), "shape"),
        (np.array([[0.0, np.nan, 0.0, 0.0]], np.float32), "non-finite"),
        (np.array([[0.0, 1e300, 0.0, 0.0]], np.float64), "float32"),
    ],
    ids=["wrong-shape", "nan", "overflows-float32"],
)
def test_bad_observations_end_both_paths_with_the_same_status(
    agent: LocalSuite, observations: np.ndarray, words: str
) -> None:
    errors: list[ServiceError] = []
    for path in PATHS:
        actor = _actor(agent, path)
        try:
            with pytest.raises(InvalidArgument) as err:
                actor.act(observations)
            errors.append(err.value)
        finally:
            actor.close()
    assert str(errors[0]) == str(errors[1]) and words in str(errors[0])


def test_an_unknown_model_falls_back_and_is_not_found_as_before(agent: LocalSuite) -> None:
    actor = open_actor(_stub(agent), "no-such-model", lanes=True)
    assert isinstance(actor, AgentStream)  # OpenLane refused (NOT_FOUND): ActStream answers in its own words
    try:
        with pytest.raises(NotFound, match="no-such-model"):
            actor.act(np.zeros((1, 4), np.float32))
    finally:
        actor.close()


@pytest.mark.parametrize("path", PATHS)
def test_an_agent_killed_mid_stream_is_unavailable(tmp_path: Path, path: str) -> None:
    local = _agent_suite(tmp_path, "--lane-dir", short_dir())
    try:
        actor = _actor(local, path)
        actor.act(np.zeros((2, 4), np.float32))
        os.kill(local.services["agent"].process.pid, signal.SIGKILL)
        local.services["agent"].process.wait()
        with pytest.raises(Unavailable):
            actor.act(np.zeros((2, 4), np.float32))
        actor.close()
    finally:
        local.stop()


def _offer(agent: LocalSuite) -> tuple[grpc.Call, agent_pb2.OpenLaneResponse]:
    call = _stub(agent).OpenLane(agent_pb2.OpenLaneRequest(model=common_pb2.ModelRef(name=MODEL)))
    return call, next(call)


def test_the_offered_socket_is_private_and_refuses_a_wrong_secret(agent: LocalSuite, lane_dir: Path) -> None:
    before = _lanes(agent).get("unused", 0)
    call, offer = _offer(agent)
    try:
        path = Path(offer.socket_path)
        assert path.parent == lane_dir.resolve() and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(lane_dir.stat().st_mode) == 0o700
        assert len(offer.secret) == SECRET_BYTES
        with pytest.raises(LaneError, match="refused|reach"):
            connect_lane(offer.socket_path, bytes(SECRET_BYTES))
        assert not path.exists()  # one connection per offer: the socket file is gone
    finally:
        call.cancel()
    _eventually(lambda: _lanes(agent).get("unused", 0) == before + 1)


def test_a_cancelled_offer_is_withdrawn_at_once(agent: LocalSuite) -> None:
    call, offer = _offer(agent)
    call.cancel()  # a caller on another host gives up
    _eventually(lambda: not Path(offer.socket_path).exists(), timeout=3)  # well inside the 10 s accept window


def _raw_lane(agent: LocalSuite) -> tuple[grpc.Call, LaneConnection]:
    call, offer = _offer(agent)
    return call, connect_lane(offer.socket_path, offer.secret)


@pytest.mark.parametrize(
    "kind, payload, words",
    [
        (REQUEST, b"\xff\xff\xff", "not an ActStreamRequest"),
        (RESPONSE, b"", "where a request"),
        (
            REQUEST,
            agent_pb2.ActStreamRequest(
                model=common_pb2.ModelRef(name="other"), observations=to_tensor(np.zeros((1, 4), np.float32))
            ).SerializeToString(),
            "opened for",
        ),
    ],
    ids=["garbage", "wrong-kind", "other-model"],
)
def test_a_bad_frame_gets_invalid_argument_and_ends_the_lane(
    agent: LocalSuite, kind: int, payload: bytes, words: str
) -> None:
    call, lane = _raw_lane(agent)
    try:
        lane.send(kind, payload)
        answer, body = lane.receive()
        assert answer == ERROR
        code, detail = decode_error(body)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and words in detail
        with pytest.raises(EOFError):
            lane.receive()
    finally:
        lane.close()
        call.cancel()


def test_a_frame_header_over_the_limit_closes_the_lane_unread(agent: LocalSuite) -> None:
    call, offer = _offer(agent)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(offer.socket_path)
        sock.sendall(offer.secret)
        assert sock.recv(1) == ACCEPTED
        sock.sendall(bytes([REQUEST]) + (2**32 - 1).to_bytes(4, "little"))  # claims 4 GiB
        sock.settimeout(10)
        assert sock.recv(1) == b""  # closed without reading (or allocating) the claimed frame
    finally:
        sock.close()
        call.cancel()


def test_lanes_off_is_failed_precondition_and_acts_over_act_stream(tmp_path: Path) -> None:
    local = _agent_suite(tmp_path, "--lane-dir", "off")
    try:
        with pytest.raises(grpc.RpcError) as err:
            _offer(local)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "ActStream" in str(err.value.details())
        actor = open_actor(_stub(local), MODEL, lanes=True)
        assert isinstance(actor, AgentStream)
        assert actor.act(np.zeros((3, 4), np.float32)).shape == (3,)
        actor.close()
    finally:
        local.stop()


def test_the_default_lane_folder_is_private_and_removed_at_stop(tmp_path: Path) -> None:
    local = _agent_suite(tmp_path)
    try:
        call, offer = _offer(local)
        call.cancel()
        folder = Path(offer.socket_path).parent
        assert folder.name.startswith("gauntlet-lanes-") and stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        local.stop()
    assert not folder.exists()


def test_a_killed_agents_lane_folder_is_removed_by_the_next_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 item 7: an agent killed with SIGKILL left its lane folder behind. The next agent started with the
    same temp folder removes the folders whose owner is gone (their lock is free), and no live agent's."""
    temp = Path(short_dir())
    try:
        monkeypatch.setenv("TMPDIR", str(temp))  # the launcher's children inherit it
        first = _agent_suite(tmp_path / "first")
        live = _agent_suite(tmp_path / "live")
        try:
            folders = sorted(temp.glob("gauntlet-lanes-*"))
            assert len(folders) == 2 and all((f / "owner.lock").exists() for f in folders)
            first_call, first_offer = _offer(first)
            first_call.cancel()
            killed = Path(first_offer.socket_path).parent
            first.services["agent"].process.kill()
            first.services["agent"].process.wait()
            assert killed.exists()  # SIGKILL: nothing of the agent ran
            second = _agent_suite(tmp_path / "second")
            try:
                assert not killed.exists()
                assert len(list(temp.glob("gauntlet-lanes-*"))) == 2  # the live agent's and the new one's
                call, offer = _offer(live)  # the live agent's folder still serves
                call.cancel()
                assert Path(offer.socket_path).parent in folders
            finally:
                second.stop()
        finally:
            live.stop()
            first.stop()
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert remove_stale_lane_dirs(tmp_path) == []  # nothing of ours there; a missing folder is no error
    assert remove_stale_lane_dirs(tmp_path / "absent") == []


def test_a_lane_dir_too_long_for_a_socket_path_is_refused_at_start(tmp_path: Path) -> None:
    long_dir = tmp_path / ("d" * 120)
    run = subprocess.run(
        [sys.executable, "-m", "agent_service", "--port", "0", "--metrics-port", "-1", "--lane-dir", str(long_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "--lane-dir" in run.stderr and "107" in run.stderr
    assert "Traceback" not in run.stderr


def _eventually(check: object, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


# --- whole batches through simulator processes ---------------------------------------------------------------------


def _namespaced_python(folder: Path, hidden: Path) -> str:
    """An interpreter wrapper that runs Python in its own mount namespace where `hidden` is an empty tmpfs: that
    process cannot see the agent's sockets, as a simulator on another host could not."""
    wrapper = folder / "python-elsewhere"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'exec unshare --mount --propagation private sh -c \'mount -t tmpfs tmpfs "$0" && exec "$@"\' '
        f'"{hidden}" "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def _namespaces_work(folder: Path) -> bool:
    probe = folder / "probe"
    probe.mkdir()
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", str(probe)],
        capture_output=True,
    )
    return run.returncode == 0


def _episodes(local: LocalSuite, simulator: str) -> list[tuple[str, int, int, float, bool, bool, bytes]]:
    request = simulator_pb2.RunEpisodesRequest(
        subject="cartpole",
        model=common_pb2.ModelRef(name=MODEL),
        seed=5,
        parallelism=16,
        trace=common_pb2.TraceSpec(signals=["actions", "final_observation"]),
    )
    for i in range(40):
        case = request.test_cases.add()
        case.id = f"t{i:03d}"
        for name, high in (("x", 0.9), ("x_dot", 0.3), ("theta", np.pi / 60), ("theta_dot", np.pi / 90)):
            case.values[name].real = high * float(np.sin(7.0 * i + len(name)))  # spread over the whole domain
    stub = simulator_pb2_grpc.SimulatorServiceStub(client_channel(local.endpoint(simulator)))
    rows = []
    for response in stub.RunEpisodes(request, timeout=300):
        r = response.result
        assert not r.error, r.error
        rows.append(
            (
                r.test_case_id,
                r.repetition,
                r.steps,
                r.total_reward,
                r.terminated,
                r.truncated,
                r.signals["actions"].data + r.signals["final_observation"].data,
            )
        )
    return sorted(rows)


def test_batches_are_identical_over_a_lane_over_act_stream_and_from_another_host(
    agent: LocalSuite, tmp_path: Path
) -> None:
    endpoint = agent.endpoint("agent")
    args = ("--agent-endpoint", endpoint)
    agent.start_service("simulator-lane", "simulator_service", *args)
    agent.start_service("simulator-grpc", "simulator_service", *args, "--agent-lanes", "off")
    elsewhere = _namespaces_work(tmp_path)
    if elsewhere:
        python = _namespaced_python(tmp_path, Path(agent_lane_dir(agent)))
        agent.start_service("simulator-elsewhere", "simulator_service", *args, python=python)
    before = _lanes(agent)
    lane = _episodes(agent, "simulator-lane")
    after_lane = _lanes(agent)
    assert after_lane.get("used", 0) == before.get("used", 0) + 2  # two lock-step groups, one lane each
    grpc_path = _episodes(agent, "simulator-grpc")
    assert _lanes(agent) == after_lane  # --agent-lanes off: not even an offer
    assert len(lane) == 40 and lane == grpc_path
    assert len({row[6] for row in lane}) == 40  # every episode its own trajectory: a comparison that could fail
    if not elsewhere:
        pytest.skip("no mount namespaces here (unshare): the other-host fallback was not exercised")
    unused = _lanes(agent).get("unused", 0)
    assert _episodes(agent, "simulator-elsewhere") == lane
    assert _lanes(agent).get("unused", 0) == unused + 2  # offered, unreachable from there, ActStream used instead


def agent_lane_dir(local: LocalSuite) -> str:
    args = list(local.services["agent"].args)
    return args[args.index("--lane-dir") + 1]
