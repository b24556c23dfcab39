"""Two generator replicas on one store (issue 35 item 4): each campaign has one owner at a time, by a lease its
generator renews; a replica takes over a dead one's campaigns once the lease ran out, and a stale owner's writes
are refused."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2
from generator_service.store import CampaignStore, ExecutionRow, StaleOwner
from tests.generator_service.test_store_integrity import (
    Generator,
    concurrent_starts,
    executions,
    spec,
    start_generator,
    stop,
)

LEASE = "3"  # seconds: short, so that a takeover happens within the test


def _row(test_case_id: str, index: int) -> ExecutionRow:
    return ExecutionRow(test_case_id, index, 1, {"x": 1}, "pass", 0.0, 1, 0.0, (), "", 1, 0, 0.0)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CampaignStore:
    if request.param == "sqlite":
        return CampaignStore(f"sqlite:///{tmp_path / 'store.db'}")
    return CampaignStore(_fresh_database(request.getfixturevalue("postgres_url"), f"leases{os.getpid()}"))


def _fresh_database(server_url: str, name: str) -> str:
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def test_a_lease_is_exclusive_until_it_runs_out_and_a_stale_owner_writes_nothing(store: CampaignStore) -> None:
    a = store.create_campaign("c", "c", {"name": "c"}, owner="replica-a", lease_seconds=1.0)
    assert a is not None and a.fence == 1
    assert store.acquire("c", "replica-b", 5.0) is None  # held
    as_a = store.owned(a)
    as_a.add_test_cases("c", 1, 1, [("t1", {"x": 1}), ("t2", {"x": 2})])
    assert as_a.add_executions("c", [_row("t1", 1)])
    assert store.renew(a, 1.0)
    time.sleep(1.3)  # a stops renewing (paused, cut off): its lease runs out
    b = store.acquire("c", "replica-b", 5.0)
    assert b is not None and b.fence == 2
    with pytest.raises(StaleOwner):
        as_a.add_executions("c", [_row("t2", 2)])
    with pytest.raises(StaleOwner):
        as_a.set_state("c", "completed")
    assert not store.renew(a, 1.0)
    store.release(a)  # a no-op: a holds nothing
    assert [r.test_case_id for r in store.executions("c")] == ["t1"]
    store.owned(b).add_executions("c", [_row("t2", 2)])
    store.owned(b).set_state("c", "completed", "max_executions")
    store.release(b)
    history = store.owners("c")
    assert [(h["fence"], h["owner"], h["previous_owner"]) for h in history] == [
        (1, "replica-a", ""),
        (2, "replica-b", "replica-a"),
    ]
    assert history[1]["acquired_at"] >= history[0]["lease_until"] and history[1]["released_at"] is not None
    row = store.campaign("c")
    assert row is not None and row.state == "completed"
    assert store.leases() == {}


def _generator(suite: LocalSuite, url: str, tmp_path: Path, name: str, *extra: str) -> Generator:
    os.environ["GAUNTLET_GENERATOR_ID"] = name  # read by the child at start; distinct ids: no same-host shortcut
    try:
        return start_generator(
            suite, url, tmp_path / "artifacts", tmp_path / f"{name}.log", "--lease-seconds", LEASE, *extra
        )
    finally:
        del os.environ["GAUNTLET_GENERATOR_ID"]


def _wait(predicate, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_two_replicas_run_each_campaign_once_and_take_over_a_killed_one(
    suite: LocalSuite, postgres_url: str, tmp_path: Path
) -> None:
    url = _fresh_database(postgres_url, f"replicas{os.getpid()}")
    store = CampaignStore(url)
    a, b = _generator(suite, url, tmp_path, "replica-a"), _generator(suite, url, tmp_path, "replica-b")
    n = 150
    try:
        started = {}
        for i, generator in enumerate([a, a, b, b]):
            request = generator_pb2.StartCampaignRequest(campaign_id=f"r{i}", spec=spec(executions=n, seed=i))
            started[f"r{i}"] = generator.stub.StartCampaign(request, timeout=120).status
        # a second StartCampaign or a ResumeCampaign through the other replica neither forks nor steals it
        b.stub.StartCampaign(
            generator_pb2.StartCampaignRequest(campaign_id="r0", spec=spec(executions=n, seed=0)), timeout=120
        )
        b.stub.ResumeCampaign(generator_pb2.ResumeCampaignRequest(campaign_id="r0"), timeout=60)
        assert store.leases()["r0"][0] == "replica-a" and store.leases()["r2"][0] == "replica-b"
        _wait(lambda: min(store.count(c).executions for c in ("r0", "r1")) >= 20, 300, "replica-a's progress")
        assert store.count("r0").executions < n and store.count("r1").executions < n, "campaigns too short"
        stop(a, kill=True)  # kill -9, mid-campaign: its leases stay until they run out
        for campaign_id in started:
            watched = list(
                b.stub.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=campaign_id), timeout=600)
            )
            assert watched[-1].kind == "finished"
        for campaign_id in started:
            status = b.stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=campaign_id), timeout=30).status
            assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, (campaign_id, status)
            assert status.stop_reason == "max_executions" and status.executions == n
            ids = executions(b.stub, campaign_id)
            assert len(ids) == len(set(ids)) == n
            rows = list(store.executions(campaign_id))
            assert [r.index for r in rows] == list(range(1, n + 1))
            history = store.owners(campaign_id)
            # never two owners at once: each new owner came after the previous one gave the campaign back or its
            # last renewed lease ran out (on the database's clock)
            for before, after in zip(history, history[1:], strict=False):
                freed = before["released_at"] if before["released_at"] is not None else before["lease_until"]
                assert after["acquired_at"] >= freed, (campaign_id, history)
                assert after["previous_owner"] == before["owner"]
            owners = [h["owner"] for h in history]
            expected = ["replica-a", "replica-b"] if campaign_id in ("r0", "r1") else ["replica-b"]
            assert owners == expected, (campaign_id, history)
            assert history[-1]["released_at"] is not None
        assert store.leases() == {}  # every campaign given back
        assert "Traceback" not in (tmp_path / "replica-b.log").read_text()
    finally:
        for generator in (a, b):
            if generator.process.poll() is None:
                stop(generator)
        store.engine.dispose()


def test_a_paused_owner_loses_its_campaign_and_its_late_writes_are_refused(
    suite: LocalSuite, postgres_url: str, tmp_path: Path
) -> None:
    """A generator that stops answering (SIGSTOP: a long GC pause, a frozen VM) past its lease: the other replica
    takes the campaign over; when it wakes up its writes are fenced off and it stops, and the campaign ends once,
    completed by the new owner."""
    url = _fresh_database(postgres_url, f"paused{os.getpid()}")
    store = CampaignStore(url)
    a, b = _generator(suite, url, tmp_path, "replica-a"), _generator(suite, url, tmp_path, "replica-b")
    n = 150
    try:
        request = generator_pb2.StartCampaignRequest(campaign_id="p", spec=spec(executions=n, seed=5))
        a.stub.StartCampaign(request, timeout=120)
        _wait(lambda: store.count("p").executions >= 20, 300, "replica-a's progress")
        os.kill(a.process.pid, signal.SIGSTOP)
        try:
            _wait(lambda: store.leases().get("p", ("",))[0] == "replica-b", 60, "replica-b to take over")
        finally:
            os.kill(a.process.pid, signal.SIGCONT)
        list(b.stub.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id="p"), timeout=600))
        status = b.stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id="p"), timeout=30).status
        assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and status.executions == n
        assert [r.index for r in store.executions("p")] == list(range(1, n + 1))
        _wait(lambda: "no longer owns it" in (tmp_path / "replica-a.log").read_text(), 60, "replica-a to stop")
        row = store.campaign("p")
        assert row is not None and row.state == "completed" and row.stop_reason == "max_executions"
        assert [h["owner"] for h in store.owners("p")] == ["replica-a", "replica-b"]
        assert a.process.poll() is None  # it lost a campaign, not its life: it serves on
    finally:
        for generator in (a, b):
            if generator.process.poll() is None:
                stop(generator)
        store.engine.dispose()


def test_a_cancel_through_either_replica_reaches_the_campaign(
    suite: LocalSuite, postgres_url: str, tmp_path: Path
) -> None:
    """CancelCampaign on the replica that does not run the campaign: its owner cancels it at its next renewal; and
    a campaign whose owner was killed is cancelled by the replica that takes it over, never resumed."""
    url = _fresh_database(postgres_url, f"cancels{os.getpid()}")
    store = CampaignStore(url)
    a, b = _generator(suite, url, tmp_path, "replica-a"), _generator(suite, url, tmp_path, "replica-b")
    n = 150
    try:
        for campaign_id in ("live", "orphan"):
            request = generator_pb2.StartCampaignRequest(campaign_id=campaign_id, spec=spec(executions=n, seed=7))
            a.stub.StartCampaign(request, timeout=120)
        _wait(lambda: store.count("live").executions >= 10, 300, "replica-a's progress")
        status = b.stub.CancelCampaign(generator_pb2.CancelCampaignRequest(campaign_id="live"), timeout=120).status
        assert status.state == generator_pb2.CAMPAIGN_STATE_CANCELLED and status.executions < n
        stop(a, kill=True)
        status = b.stub.CancelCampaign(generator_pb2.CancelCampaignRequest(campaign_id="orphan"), timeout=120).status
        assert status.state == generator_pb2.CAMPAIGN_STATE_CANCELLED and status.executions < n
        time.sleep(float(LEASE))  # nothing runs them any more: their rows stay as they are
        for campaign_id in ("live", "orphan"):
            count = store.count(campaign_id).executions
            row = store.campaign(campaign_id)
            assert row is not None and row.state == "cancelled" and row.stop_reason == "cancelled"
            assert count == len({r.test_case_id for r in store.executions(campaign_id)}) < n
        assert [h["owner"] for h in store.owners("live")] == ["replica-a"]
        assert [h["owner"] for h in store.owners("orphan")] == ["replica-a", "replica-b"]
        assert store.leases() == {}
        # a resume afterwards runs it on (the cancel was answered: it does not cancel the resumed campaign)
        b.stub.ResumeCampaign(generator_pb2.ResumeCampaignRequest(campaign_id="live"), timeout=60)
        list(b.stub.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id="live"), timeout=600))
        final = b.stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id="live"), timeout=30).status
        assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and final.executions == n
    finally:
        for generator in (a, b):
            if generator.process.poll() is None:
                stop(generator)
        store.engine.dispose()


def test_concurrent_starts_through_both_replicas_make_one_campaign_run_once(
    suite: LocalSuite, postgres_url: str, tmp_path: Path
) -> None:
    """Issue 35 items 3 and 4 together: 50 StartCampaign with one id at once, half through each replica on one
    PostgreSQL store: one campaign, the same one for the same spec and ALREADY_EXISTS for another, never INTERNAL;
    it runs on one replica only, its whole life."""
    url = _fresh_database(postgres_url, f"starts{os.getpid()}")
    store = CampaignStore(url)
    # a lease long enough that no burst of calls delays a renewal past it: the history shows one owner
    extra = ("--workers", "64", "--lease-seconds", "30")
    a, b = _generator(suite, url, tmp_path, "replica-a", *extra), _generator(suite, url, tmp_path, "replica-b", *extra)
    try:
        codes, statuses = concurrent_starts([a.stub, b.stub], "same-spec", same_spec=True)
        assert codes == [grpc.StatusCode.OK] * 50, codes
        assert {s.campaign_id for s in statuses} == {"same-spec"}
        codes, _ = concurrent_starts([a.stub, b.stub], "other-specs", same_spec=False)
        assert codes.count(grpc.StatusCode.OK) == 1, codes
        assert codes.count(grpc.StatusCode.ALREADY_EXISTS) == 49, codes
        for campaign_id in ("same-spec", "other-specs"):
            for generator in (a, b):  # whichever runs it, both follow it to the end
                watch = generator_pb2.WatchCampaignRequest(campaign_id=campaign_id)
                list(generator.stub.WatchCampaign(watch, timeout=300))
            status = a.stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=campaign_id), timeout=30).status
            assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and status.executions == 10, status
            assert [r.index for r in store.executions(campaign_id)] == list(range(1, 11))
            history = store.owners(campaign_id)
            assert len(history) == 1 and history[0]["released_at"] is not None, (campaign_id, history)
        listed = b.stub.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=30).campaigns
        assert sorted(c.campaign_id for c in listed) == ["other-specs", "same-spec"]
        for name in ("replica-a", "replica-b"):
            text = (tmp_path / f"{name}.log").read_text()
            assert "Traceback" not in text and "UniqueViolation" not in text, name
    finally:
        for generator in (a, b):
            if generator.process.poll() is None:
                stop(generator)
        store.engine.dispose()
