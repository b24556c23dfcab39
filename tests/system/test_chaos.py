"""Chaos: under the self-healing launcher, each service in turn is killed (SIGKILL) mid-campaign; the campaign goes on
and ends exactly as an undisturbed one with the same seed: N executions, no test-case id twice, the same verdicts
(and so the same failing ids), state completed. On SQLite and on PostgreSQL (a fresh database on the session's
server). One suite per store, restarted services and all; one undisturbed reference run shared by every case."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from cli.follow import retrying
from cli.launcher import LocalSuite
from cli.supervisor import RestartPolicy
from common.generated.gauntlet.v1 import analysis_pb2, analysis_pb2_grpc, generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.config import CampaignConfig
from generator_service.store import CampaignStore
from tests.conftest import one_model_root

N = 128  # executions per campaign
KILL_AFTER = 32  # stored executions before the kill: well inside the campaign (batches of 32)
CONFIG = CampaignConfig(
    name="chaos",
    subject="cartpole",
    model="cartpole-ppo",
    strategy="random",
    seed=11,
    budget={"max_executions": N},
    batch_size=32,
    parallelism=16,
)
VICTIMS = ["agent", "simulator", "oracle", "generator", "analysis"]
RUNNING = generator_pb2.CAMPAIGN_STATE_RUNNING
Outcomes = dict[str, tuple[str, int]]  # test-case id -> (verdict, steps)
_reference: dict[str, Outcomes] = {}


def _fresh_postgres_database(server_url: str) -> str:
    """A new database on the session's PostgreSQL server: a restarted generator resumes every campaign its store
    holds, so this suite's store must hold only this module's campaigns."""
    name = f"chaos_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def healing(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalSuite, str]]:
    """A supervised local suite and its store URL."""
    root = tmp_path_factory.mktemp(f"chaos-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'store.db'}"
    else:
        url = _fresh_postgres_database(request.getfixturevalue("postgres_url"))
    local = LocalSuite(
        store_url=url,
        log_dir=root / "logs",
        report_root=root / "reports",
        model_root=one_model_root(root / "models", "cartpole-ppo"),  # an agent that restarts quickly
        generator_retry_seconds=120.0,  # longer than any restart below: a retry must never give up here
        restart_policy=RestartPolicy(),
    ).start()
    try:
        yield local, url
    finally:
        local.stop()


_stubs: dict[str, generator_pb2_grpc.GeneratorServiceStub] = {}


def _generator(local: LocalSuite) -> generator_pb2_grpc.GeneratorServiceStub:
    """One channel per generator endpoint: it reconnects by itself to a generator restarted on the same port."""
    endpoint = local.endpoint("generator")
    if endpoint not in _stubs:
        _stubs[endpoint] = generator_pb2_grpc.GeneratorServiceStub(client_channel(endpoint))
    return _stubs[endpoint]


def _status(local: LocalSuite, cid: str) -> generator_pb2.CampaignStatus:
    request = generator_pb2.GetCampaignRequest(campaign_id=cid)
    return retrying(lambda: _generator(local).GetCampaign(request, timeout=10)).status  # the generator may restart


def _wait_for(
    local: LocalSuite, cid: str, done: Callable[[generator_pb2.CampaignStatus], bool], timeout: float = 240
) -> generator_pb2.CampaignStatus:
    deadline = time.monotonic() + timeout
    while not done(status := _status(local, cid)):
        assert time.monotonic() < deadline, f"campaign {cid} stuck: {status}"
        time.sleep(0.1)
    return status


def _start(local: LocalSuite, label: str) -> str:
    cid = f"chaos-{label}-{uuid.uuid4().hex[:6]}"
    request = generator_pb2.StartCampaignRequest(campaign_id=cid, spec=CONFIG.to_proto())
    retrying(lambda: _generator(local).StartCampaign(request, timeout=300))
    return cid


def _outcomes(url: str, cid: str) -> Outcomes:
    rows = list(CampaignStore(url).executions(cid))
    ids = [r.test_case_id for r in rows]
    assert len(ids) == len(set(ids)), "a test case was stored twice"
    return {r.test_case_id: (r.verdict, r.steps) for r in rows}


def _render(local: LocalSuite, cid: str) -> dict:
    analysis = analysis_pb2_grpc.AnalysisServiceStub(client_channel(local.endpoint("analysis")))
    request = analysis_pb2.RenderReportRequest(campaign_ids=[cid])
    return json.loads(retrying(lambda: analysis.RenderReport(request, timeout=120)).json)


@pytest.fixture
def undisturbed(healing: tuple[LocalSuite, str]) -> Outcomes:
    """Verdict and length of each test of an undisturbed campaign with the same spec (run once, on the first suite)."""
    if "outcomes" not in _reference:
        local, url = healing
        cid = _start(local, "reference")
        status = _wait_for(local, cid, lambda s: s.state != RUNNING)
        assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and status.executions == N, status
        _reference["outcomes"] = _outcomes(url, cid)
    return _reference["outcomes"]


def _restarted(local: LocalSuite, name: str, old_pid: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while local.services.get(name) is None or local.services[name].process.pid == old_pid:
        assert local.supervisor is not None and not local.supervisor.gave_up.is_set(), local.supervisor.failure
        assert time.monotonic() < deadline, f"{name} was not restarted within {timeout}s"
        time.sleep(0.1)


@pytest.mark.parametrize("victim", VICTIMS)
def test_a_campaign_survives_a_kill_of_each_service(
    healing: tuple[LocalSuite, str], undisturbed: Outcomes, victim: str
) -> None:
    local, url = healing
    assert local.supervisor is not None
    restarts = local.supervisor.restarts[victim]
    cid = _start(local, victim)
    at_kill = _wait_for(local, cid, lambda s: s.executions >= KILL_AFTER or s.state != RUNNING)
    assert at_kill.state == RUNNING and at_kill.executions < N, "the kill must land mid-campaign"
    old_pid = local.services[victim].process.pid
    os.kill(old_pid, signal.SIGKILL)
    if victim == "analysis":  # a report asked for while the analysis service restarts waits for it
        report = _render(local, cid)
        assert [c["info"]["campaign_id"] for c in report["campaigns"]] == [cid]
    _restarted(local, victim, old_pid)

    final = _wait_for(local, cid, lambda s: s.state != RUNNING)
    assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, final.error
    assert final.stop_reason == "max_executions" and final.executions == N
    outcomes = _outcomes(url, cid)
    assert sorted(outcomes) == [f"t{i:07d}" for i in range(1, N + 1)]
    assert outcomes == undisturbed  # same verdict and episode length for every test
    failing = sorted(cid_ for cid_, (verdict, _) in outcomes.items() if verdict == "fail")
    assert failing == sorted(cid_ for cid_, (verdict, _) in undisturbed.items() if verdict == "fail")
    assert local.supervisor.restarts[victim] == restarts + 1
    assert _render(local, cid)["campaigns"][0]["metrics"]["executions"] == N
    log = Path(local.services[victim].log_path).read_text()
    assert f"{victim} service restarted on {local.endpoint(victim)}" in log  # same port, and logged
