"""One campaign spread over several simulator processes (generator_service/simulators.py).

Real processes on loopback: a suite with two simulators, whose generator splits each batch into one RunEpisodes
stream per simulator, and beside it a second generator that knows only the first simulator (the single-simulator
reference, on its own store). The same campaign on both must store the same executions (test-case ids, verdicts,
margins, episode lengths), with every simulator process doing part of the work; after a kill -9 of one of the two
simulators mid-campaign (no supervisor: it stays dead), the campaign still completes on the other with every
execution stored once and the same outcomes.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cli.launcher import LocalSuite, Service, simulator_name
from common.errors import InvalidArgument
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc, oracle_pb2, simulator_pb2
from common.server import client_channel
from generator_service.config import CampaignConfig
from generator_service.simulators import (
    MAX_STREAMS,
    SIMULATOR_STREAMS_ENV,
    SIT_OUT_SECONDS,
    SimulatorPool,
    default_streams,
    parse_endpoints,
    streams_from_env,
)
from tests.conftest import one_model_root

N = 96
# an adaptive strategy: what it asks next depends on the margins it was told, so a result told out of asking order,
# or a margin that differs by one bit, changes later batches
CONFIG = CampaignConfig(
    name="multi-simulator",
    subject="cartpole",
    model="cartpole-ppo",
    strategy="fuzzer",
    strategy_params={"initial_tests": 8},
    seed=23,
    budget={"max_executions": N},
    batch_size=24,
    parallelism=8,
)
Outcome = tuple[str, str, float, int, str]  # test-case id, verdict, margin, steps, the test case itself
VERDICTS = {oracle_pb2.VERDICT_KIND_PASS: "pass", oracle_pb2.VERDICT_KIND_FAIL: "fail"}


# -- endpoint parsing (no processes) -------------------------------------------------------------------------


def test_endpoint_lists_are_parsed_and_bad_ones_refused_by_name() -> None:
    assert parse_endpoints(" a:1, b:2 ,") == ["a:1", "b:2"]
    assert default_streams(["a:1", "b:2"]) == 2
    assert default_streams(["dns:///sim:50052", "c:3"]) == 5  # a name may hide several replicas
    with pytest.raises(InvalidArgument, match="names an endpoint twice"):
        parse_endpoints("a:1,b:2,a:1")
    for empty in ("", " , ,"):
        with pytest.raises(InvalidArgument, match=r"expected host:port\[,host:port\.\.\.\] or dns:///"):
            parse_endpoints(empty)
    for streams in (0, -1, MAX_STREAMS + 1):
        with pytest.raises(InvalidArgument, match=rf"simulator streams: {streams} is outside 1\.\.256"):
            SimulatorPool("a:1", streams=streams)
    assert SimulatorPool("a:1,b:2", streams=MAX_STREAMS).streams == MAX_STREAMS


def test_streams_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SIMULATOR_STREAMS_ENV, raising=False)
    assert streams_from_env() is None
    monkeypatch.setenv(SIMULATOR_STREAMS_ENV, "6")
    assert streams_from_env() == 6
    monkeypatch.setenv(SIMULATOR_STREAMS_ENV, "many")
    with pytest.raises(InvalidArgument, match=rf"{SIMULATOR_STREAMS_ENV}='many': expected a whole number in 1\.\.256"):
        streams_from_env()


def test_shards_go_round_robin_and_a_failed_endpoint_sits_out() -> None:
    pool = SimulatorPool("a:1,b:2,c:3")  # channels connect lazily: nothing listens, nothing is called
    assert pool.shard_targets(3) == [0, 1, 2]
    assert pool.shard_targets(1) == [0]  # the next batch goes on where the last one stopped
    assert pool.shard_targets(1) == [1]
    pool.mark_failed(1)
    assert set(pool.shard_targets(4)) == {0, 2}
    pool.mark_failed(0)
    pool.mark_failed(2)
    assert set(pool.shard_targets(3)) == {0, 1, 2}  # all sitting out: better all than none


# -- real processes -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalSuite, Service]]:
    """Two simulators behind the suite's generator, and a reference generator that knows only the first one."""
    root = tmp_path_factory.mktemp("multi-simulator")
    local = LocalSuite(
        store_url=f"sqlite:///{root / 'store.db'}",
        log_dir=root / "logs",
        report_root=root / "reports",
        model_root=one_model_root(root / "models", "cartpole-ppo"),
        generator_retry_seconds=120.0,
        simulators=2,
    ).start()
    try:
        single = local.start_service(
            "generator-single",
            "generator_service",
            "--simulator-endpoint",
            local.endpoint("simulator"),
            "--oracle-endpoint",
            local.endpoint("oracle"),
            "--store-url",
            f"sqlite:///{root / 'single.db'}",
            "--no-resume-interrupted",
        )
        yield local, single
    finally:
        local.stop()


def _episodes(service: Service) -> float:
    """Episodes the simulator process finished so far (its Prometheus counter, every subject and outcome)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{service.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r"^gauntlet_simulator_episodes_total\{[^}]*\} (\S+)$", text, re.M))


def _generator(endpoint: str) -> generator_pb2_grpc.GeneratorServiceStub:
    return generator_pb2_grpc.GeneratorServiceStub(client_channel(endpoint))


def _start(endpoint: str, campaign_id: str) -> None:
    request = generator_pb2.StartCampaignRequest(campaign_id=campaign_id, spec=CONFIG.to_proto())
    _generator(endpoint).StartCampaign(request, timeout=120)


def _status(endpoint: str, campaign_id: str) -> generator_pb2.CampaignStatus:
    request = generator_pb2.GetCampaignRequest(campaign_id=campaign_id)
    return _generator(endpoint).GetCampaign(request, timeout=30).status


def _finish(endpoint: str, campaign_id: str, timeout: float = 300) -> generator_pb2.CampaignStatus:
    deadline = time.monotonic() + timeout
    while (status := _status(endpoint, campaign_id)).state == generator_pb2.CAMPAIGN_STATE_RUNNING:
        assert time.monotonic() < deadline, f"campaign {campaign_id} stuck: {status}"
        time.sleep(0.2)
    return status


def _outcomes(endpoint: str, campaign_id: str) -> list[Outcome]:
    """Every stored execution in asking order; asserts none was stored twice."""
    request = generator_pb2.ListExecutionsRequest(campaign_id=campaign_id)
    rows = sorted(
        (r.execution for r in _generator(endpoint).ListExecutions(request, timeout=120)), key=lambda e: e.index
    )
    ids = [e.test_case.id for e in rows]
    assert len(ids) == len(set(ids)), "a test case was stored twice"
    return [(e.test_case.id, VERDICTS.get(e.verdict, "other"), e.margin, e.steps, str(e.test_case)) for e in rows]


_reference: dict[str, list[Outcome]] = {}


@pytest.fixture
def single_simulator_outcomes(suite: tuple[LocalSuite, Service]) -> list[Outcome]:
    """The campaign run once on the reference generator: one stream per batch, on one simulator."""
    if "outcomes" not in _reference:
        _, single = suite
        _start(single.endpoint, "reference")
        final = _finish(single.endpoint, "reference")
        assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and final.executions == N, final
        _reference["outcomes"] = _outcomes(single.endpoint, "reference")
    return _reference["outcomes"]


def test_every_simulator_gets_work_and_the_results_equal_a_single_simulator_run(
    suite: tuple[LocalSuite, Service], single_simulator_outcomes: list[Outcome]
) -> None:
    local, _ = suite
    simulators = [local.services[simulator_name(i)] for i in range(2)]
    before = [_episodes(s) for s in simulators]
    _start(local.endpoint("generator"), "spread")
    final = _finish(local.endpoint("generator"), "spread")
    assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and final.executions == N, final
    ran = [_episodes(s) - b for s, b in zip(simulators, before, strict=True)]
    assert sum(ran) == N and min(ran) >= N / 4, f"episodes per simulator: {ran}"  # 2 shards of each batch
    outcomes = _outcomes(local.endpoint("generator"), "spread")
    assert [o[0] for o in outcomes] == [f"t{i:07d}" for i in range(1, N + 1)]
    assert outcomes == single_simulator_outcomes  # same ids, verdicts, margins (bit for bit), lengths
    assert {o[1] for o in outcomes} <= {"pass", "fail"}


def test_a_dns_name_and_a_dead_first_endpoint(suite: tuple[LocalSuite, Service]) -> None:
    local, _ = suite
    port = local.services["simulator"].port
    request = simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")
    # gRPC's own resolver: dns:///localhost:PORT reaches the simulator
    info = SimulatorPool(f"dns:///localhost:{port}").call(lambda sim: sim.DescribeEnvironment(request, timeout=30))
    assert info.max_steps > 0
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    pool = SimulatorPool(f"127.0.0.1:{dead},{local.endpoint('simulator')}")
    assert pool.call(lambda sim: sim.DescribeEnvironment(request, timeout=30)).max_steps == info.max_steps
    assert pool.shard_targets(2) == [1, 1]  # the dead one sits out
    lonely = SimulatorPool(f"127.0.0.1:{dead}")
    with pytest.raises(grpc.RpcError) as caught:
        lonely.call(lambda sim: sim.DescribeEnvironment(request, timeout=30))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def _random(executions: int, **changes: object) -> CampaignConfig:
    """CONFIG with random testing and another budget."""
    spec = {**CONFIG.model_dump(), "strategy": "random", "strategy_params": {}, **changes}
    return CampaignConfig.model_validate({**spec, "budget": {"max_executions": executions}})


def _active(service: Service) -> float:
    """RunEpisodes streams the simulator process is running now."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{service.metrics_port}/metrics", timeout=10).read().decode()
    found = re.search(r"^gauntlet_simulator_active_batches (\S+)$", text, re.M)
    assert found, "no active-batches gauge"
    return float(found.group(1))


def test_a_cancel_reaches_every_shard(suite: tuple[LocalSuite, Service]) -> None:
    """One batch of 320 long CartPole episodes, two shards of 160 (each runs for many seconds): a cancel stops both
    streams at once, not only the one the campaign happened to be reading."""
    local, _ = suite
    simulators = [local.services[simulator_name(i)] for i in range(2)]
    config = _random(320, batch_size=320)
    gen = _generator(local.endpoint("generator"))
    gen.StartCampaign(generator_pb2.StartCampaignRequest(campaign_id="cancelled", spec=config.to_proto()), timeout=120)
    deadline = time.monotonic() + 60
    while [_active(s) for s in simulators] != [1, 1]:
        assert time.monotonic() < deadline, "both shards never ran at once"
        time.sleep(0.05)
    gen.CancelCampaign(generator_pb2.CancelCampaignRequest(campaign_id="cancelled"), timeout=30)
    deadline = time.monotonic() + 5
    while (active := [_active(s) for s in simulators]) != [0, 0]:
        assert time.monotonic() < deadline, f"streams still running 5 s after the cancel: {active}"
        time.sleep(0.05)
    final = _finish(local.endpoint("generator"), "cancelled")
    assert final.state == generator_pb2.CAMPAIGN_STATE_CANCELLED and final.executions < 320, final


def test_a_kill_of_one_simulator_mid_campaign_leaves_every_execution_recorded_once(
    suite: tuple[LocalSuite, Service], single_simulator_outcomes: list[Outcome], tmp_path: Path
) -> None:
    """Runs last in this module: the killed simulator stays dead (no supervisor), the other carries on. The first
    simulator is the victim, the one single calls (DescribeEnvironment, ValidateConfigs) went to first."""
    local, _ = suite
    victim = local.services["simulator"]
    endpoint = local.endpoint("generator")
    _start(endpoint, "killed")
    deadline = time.monotonic() + 120
    while (status := _status(endpoint, "killed")).executions < 24:
        assert status.state == generator_pb2.CAMPAIGN_STATE_RUNNING, status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    assert status.state == generator_pb2.CAMPAIGN_STATE_RUNNING and status.executions < N, "kill mid-campaign"
    os.kill(victim.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    final = _finish(endpoint, "killed")
    assert victim.process.wait(timeout=10) == -signal.SIGKILL
    assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, final.error
    assert final.stop_reason == "max_executions" and final.executions == N
    assert _outcomes(endpoint, "killed") == single_simulator_outcomes
    # once the dead simulator's sit-out is over, the first endpoint is tried again: a new campaign's single calls
    # (DescribeEnvironment, ValidateConfigs) fail over to the live one instead of retrying the dead one
    time.sleep(max(0.0, killed_at + SIT_OUT_SECONDS + 1 - time.monotonic()))
    later = _random(16)
    request = generator_pb2.StartCampaignRequest(campaign_id="after-sit-out", spec=later.to_proto())
    _generator(endpoint).StartCampaign(request, timeout=120)
    final = _finish(endpoint, "after-sit-out", timeout=100)  # the old code gave up after its 120 s retry budget
    assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and final.executions == 16, final
    log = local.services["generator"].log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
