"""The campaign store on SQLite and on a real PostgreSQL server; resuming after the generator dies."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.config import CampaignConfig
from generator_service.store import CampaignStore, ExecutionRow
from tests.conftest import MODEL_ROOT


def _row(i: int, verdict: str = "pass") -> ExecutionRow:
    return ExecutionRow(
        f"t{i:07d}", i, 1, {"x": i / 10}, verdict, 0.5, 100, 100.0, (1.0, 2.0), "ok", 1, int(verdict == "fail"), i * 0.1
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CampaignStore:
    if request.param == "sqlite":
        return CampaignStore(f"sqlite:///{tmp_path / 'store.db'}")
    return CampaignStore(request.getfixturevalue("postgres_url"))


def test_executions_are_stored_once_in_order(store: CampaignStore) -> None:
    cid = f"c-{id(store)}"
    store.create_campaign(cid, "n", {"a": 1})
    store.add_test_cases(cid, 1, 1, [(f"t{i:07d}", {"x": i / 10}) for i in range(1, 4)])
    assert store.add_execution(cid, _row(1))
    assert store.add_execution(cid, _row(2, "fail"))
    assert not store.add_execution(cid, _row(2, "fail"))  # a retried batch does not double-count
    assert store.add_execution(cid, _row(3))
    rows = list(store.executions(cid))
    assert [r.index for r in rows] == [1, 2, 3] and rows[1].descriptors == (1.0, 2.0)
    assert store.totals(cid) == {
        "executions": 3,
        "steps": 300,
        "failures": 1,
        "invalid": 0,
        "first_failure_index": 2,
        "first_failure_seconds": pytest.approx(0.2),
    }
    assert store.asked_batches(cid) == [[(f"t{i:07d}", {"x": i / 10}) for i in range(1, 4)]]
    store.set_state(cid, "completed", "max_executions", add_wall_seconds=2.5)
    row = store.campaign(cid)
    assert row is not None and row.state == "completed" and row.wall_seconds == 2.5 and row.spec == {"a": 1}


def test_a_store_written_before_final_observations_opens_and_keeps_its_rows(tmp_path: Path) -> None:
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with sa.create_engine(url).begin() as conn:  # the executions table as the first release created it
        conn.exec_driver_sql(
            "CREATE TABLE executions (campaign_id VARCHAR(64), test_case_id VARCHAR(64), idx INTEGER NOT NULL, "
            'batch INTEGER NOT NULL, "values" TEXT NOT NULL, verdict VARCHAR(8) NOT NULL, margin FLOAT NOT NULL, '
            "steps INTEGER NOT NULL, total_reward FLOAT NOT NULL, descriptors TEXT NOT NULL, reason TEXT NOT NULL, "
            "repetitions INTEGER NOT NULL, failed_repetitions INTEGER NOT NULL, elapsed_seconds FLOAT NOT NULL, "
            "PRIMARY KEY (campaign_id, test_case_id))"
        )
        conn.exec_driver_sql(
            "INSERT INTO executions VALUES ('c', 't0000001', 1, 1, '{}', 'pass', 0.5, 10, 1.0, "
            "'[1.0]', 'ok', 1, 0, 0.1)"
        )
    store = CampaignStore(url)
    new = ExecutionRow("t0000002", 2, 1, {}, "fail", -1.0, 5, 0.0, (), "fell", 1, 1, 0.2, (0.5, -2.0))
    assert store.add_execution("c", new)
    old, stored = store.executions("c")
    assert old.final_observation == () and old.descriptors == (1.0,) and stored == new
    assert [r.final_observation for r in CampaignStore(url).executions("c")] == [(), (0.5, -2.0)]  # migrated once


def test_campaign_on_postgres_end_to_end(postgres_url: str, tmp_path: Path) -> None:
    with LocalSuite(store_url=postgres_url, log_dir=tmp_path / "logs", model_root=MODEL_ROOT) as local:
        gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
        config = CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 50}, batch_size=25)
        started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status
        status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id)))[-1].status
    assert status.executions == 50
    assert len(list(CampaignStore(postgres_url).executions(started.campaign_id))) == 50


def test_restarted_generator_resumes_without_losing_or_repeating(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    local = LocalSuite(store_url=store_url, log_dir=tmp_path / "logs", model_root=MODEL_ROOT).start()
    try:
        gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
        config = CampaignConfig(
            subject="cartpole",
            model="cartpole-ppo",
            seed=9,
            budget={"max_executions": 400},
            batch_size=50,
            parallelism=16,
        )
        cid = gen.StartCampaign(
            generator_pb2.StartCampaignRequest(campaign_id="resume-me", spec=config.to_proto())
        ).status.campaign_id
        for event in gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)):
            if event.status.executions >= 100:
                break
        generator = local.services.pop("generator")
        generator.process.send_signal(signal.SIGKILL)  # no chance to record anything
        generator.process.wait()
        before = CampaignStore(store_url).totals(cid)["executions"]
        assert 100 <= before < 400
        restarted = local.start_service(
            "generator",
            "generator_service",
            "--simulator-endpoint",
            local.endpoint("simulator"),
            "--oracle-endpoint",
            local.endpoint("oracle"),
            "--store-url",
            store_url,
        )
        gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(restarted.endpoint))
        status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
        # the resume thread starts shortly after the server: wait for it to finish too
        while status.state == generator_pb2.CAMPAIGN_STATE_RUNNING:
            status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
    finally:
        local.stop()
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    rows = list(CampaignStore(store_url).executions(cid))
    assert [r.index for r in rows] == list(range(1, 401))
    assert sorted(r.test_case_id for r in rows) == [f"t{i:07d}" for i in range(1, 401)]
    # the resumed run asked the same inputs the first run had asked (every choice flows from the seed)
    reference = CampaignConfig(**{**config.model_dump(), "name": "fresh"})
    from common.seeding import derive_seed
    from generator_service.strategies import make_strategy
    from simulator_service.subject import get_subject

    strategy = make_strategy("random", get_subject("cartpole").space, derive_seed(reference.seed, "strategy"))
    expected = [v for _ in range(8) for v in strategy.ask(50)]
    by_id = {r.test_case_id: r.values for r in rows}
    assert [by_id[f"t{i:07d}"] for i in range(1, 401)] == json.loads(json.dumps(expected))


def test_a_campaign_of_mostly_rejected_inputs_stops_with_its_reason(tmp_path: Path) -> None:
    # Rejected inputs cost no budget, so a strategy blind to the subject's rules (uniform records on Donkey's
    # track) would ask forever: past INVALID_ALLOWANCE rejections per run test (at least per 100) it stops.
    from generator_service.campaign import INVALID_ALLOWANCE, CampaignRunner

    store = CampaignStore(f"sqlite:///{tmp_path / 'store.db'}")
    config = CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 5})
    store.create_campaign("c", "n", {})
    runner = CampaignRunner("c", config, store, simulators=None, oracle=None, publish=lambda kind, msg: None)
    limit = INVALID_ALLOWANCE * 100
    store.add_test_cases("c", 1, 1, [(f"t{i:07d}", {"x": 0.0}) for i in range(1, limit + 3)])
    # through the runner, which counts what it stores (its stop check reads no aggregate)
    runner.recorder.record([_row(i, "invalid") for i in range(1, limit + 1)])
    assert runner.stop_reason() == ""  # exactly at the allowance: keeps asking
    runner.recorder.record([_row(limit + 1, "invalid")])
    assert runner.stop_reason() == "too_many_invalid_inputs"
    runner.recorder.record([_row(limit + 2, "pass")])  # run tests do not reset the count of rejections
    assert runner.stop_reason() == "too_many_invalid_inputs"


def test_running_totals_match_the_store_across_a_resume(store: CampaignStore) -> None:
    # A running campaign counts what it stores instead of aggregating the store on every stop check; a resumed
    # session (a new runner) starts from the store's count. Both must agree with the store at every point.
    from generator_service.campaign import CampaignRunner

    config = CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 6})
    store.create_campaign("c", "n", {})
    store.add_test_cases("c", 1, 1, [(f"t{i:07d}", {"x": i / 10}) for i in range(1, 10)])

    def runner() -> CampaignRunner:
        made = CampaignRunner("c", config, store, simulators=None, oracle=None, publish=lambda kind, msg: None)
        made.begin_session()
        return made

    first = runner()
    assert first.totals == store.count("c") and first.totals.executions == 0
    first.recorder.record([_row(1), _row(3, "fail"), _row(2, "invalid")])
    # a retried batch: t0000003 is already stored and not counted again
    first.recorder.record([_row(3, "fail"), _row(4)])
    assert first.totals == store.count("c")
    assert (first.totals.executions, first.totals.failures, first.totals.invalid) == (4, 1, 1)
    assert first.stop_reason() == ""  # 3 run tests of 6
    resumed = runner()  # the generator died; a new one resumes from the store
    assert resumed.totals == first.totals
    resumed.recorder.record([_row(6, "fail"), _row(5)])
    assert resumed.totals == store.count("c")
    assert resumed.totals.first_failure_index == 3 and resumed.totals.first_failure_seconds == pytest.approx(0.3)
    assert resumed.stop_reason() == ""  # 5 run tests
    resumed.recorder.record([_row(7)])
    assert resumed.stop_reason() == "max_executions" and resumed.totals == store.count("c")


def test_non_finite_numbers_are_stored_as_error_executions_never_dropped(store: CampaignStore) -> None:
    """A NaN margin hit the NOT NULL float column, and the fallback took the refusal for 'already stored': the
    execution vanished (and its batch was re-run forever). Now it is stored as an error execution."""
    import dataclasses
    import math

    import sqlalchemy as sa

    cid = f"nan-{id(store)}"
    store.create_campaign(cid, "n", {})
    store.add_test_cases(cid, 1, 1, [(f"t{i:07d}", {"x": i / 10}) for i in range(1, 6)])
    rows = [
        _row(1),
        dataclasses.replace(_row(2, "fail"), margin=math.nan),
        dataclasses.replace(_row(3), total_reward=math.inf),
        dataclasses.replace(_row(4), descriptors=(1.0, -math.inf)),
        _row(5, "fail"),
    ]
    stored = store.add_executions(cid, rows)
    assert [r.test_case_id for r in stored] == [r.test_case_id for r in rows]
    assert [r.verdict for r in stored] == ["pass", "invalid", "invalid", "invalid", "fail"]
    read = list(store.executions(cid))
    assert read == stored  # what the caller counts is what the store holds
    assert read[1].reason == (
        "error: the episode gave non-finite numbers (margin=nan), so it was not judged; the oracle said fail: ok"
    )
    assert "(total_reward=inf)" in read[2].reason and "(descriptors[1]=-inf)" in read[3].reason
    assert all(math.isfinite(r.margin) and math.isfinite(r.total_reward) and r.descriptors == () for r in read[1:4])
    assert store.totals(cid)["invalid"] == 3 and store.totals(cid)["failures"] == 1
    assert store.add_executions(cid, rows) == [] and not store.add_execution(cid, rows[1])  # a retry: already there
    # a write refused for another reason than "already stored" raises instead of being taken as done
    with pytest.raises(sa.exc.IntegrityError):
        store.add_execution(cid, dataclasses.replace(_row(9), index=1))  # another test case at a taken position


NAN_ENV = '''
import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class NaNRewardCartPole(CartPoleEnv):
    """CartPole whose reward is NaN on every step of an episode that starts with the cart at x > 0.45 (the test
    input's x: the injector sets the state after reset, so the first step reads it)."""

    def reset(self, **kwargs):
        self.start_x = None
        return super().reset(**kwargs)

    def step(self, action):
        if self.start_x is None:
            self.start_x = float(self.state[0])
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("nan") if self.start_x > 0.45 else reward, terminated, truncated, info


gym.register("NaNRewardCartPole-v1", entry_point=NaNRewardCartPole)
'''


def test_a_campaign_whose_environment_gives_nan_rewards_completes_with_every_execution(tmp_path: Path) -> None:
    import yaml

    from common.generated.gauntlet.v1 import oracle_pb2
    from simulator_service.subject import SUBJECT_PATH_ENV
    from tests.system.test_services_e2e import executions, run_campaign

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "nan_cartpole.py").write_text(NAN_ENV)
    subject = yaml.safe_load((Path(__file__).resolve().parents[2] / "subjects/classic/cartpole.yaml").read_text())
    subject.update(subject="nan_cartpole", env_id="nan_cartpole:NaNRewardCartPole-v1", deterministic=True)
    (tmp_path / "subjects").mkdir()
    (tmp_path / "subjects" / "nan_cartpole.yaml").write_text(yaml.safe_dump(subject))
    suite = LocalSuite(store_url=f"sqlite:///{tmp_path / 'store.db'}", log_dir=tmp_path / "logs", model_root=MODEL_ROOT)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SUBJECT_PATH_ENV, str(tmp_path / "subjects"))
        env.setenv("PYTHONPATH", str(tmp_path / "plugins"))
        suite.start()
    try:
        config = CampaignConfig(
            subject="nan_cartpole", model="cartpole-ppo", seed=5, budget={"max_executions": 12}, batch_size=6
        )
        status = run_campaign(suite, config)
        assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
        rows = executions(suite, status.campaign_id)
    finally:
        suite.stop()
    assert sorted(r.index for r in rows) == list(range(1, len(rows) + 1))  # none lost, none repeated
    errors = [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_INVALID]
    assert errors and all("(total_reward=nan)" in r.reason for r in errors), [r.reason for r in rows]
    assert all(r.test_case.values["x"].real > 0.45 for r in errors)
    assert len(rows) - len(errors) == 12  # errors do not count against the budget: exactly 12 judged


def test_shrink_results_are_stored_beside_their_failure_and_replaced_when_shrunk_again(store: CampaignStore) -> None:
    import sqlalchemy as sa

    from generator_service.store import ShrinkRow

    cid = f"s-{id(store)}"
    store.create_campaign(cid, "n", {"a": 1})
    original = _row(2, "fail")
    assert store.add_execution(cid, original)
    assert store.shrinks(cid) == []
    shrunk = ExecutionRow("s0000007", 2, 1, {"x": 0.05}, "fail", -0.1, 21, 21.0, (), "fell at step 21", 1, 1, 0.0)
    first = ShrinkRow("t0000002", shrunk, 0.2, 0.05, ("x",), {"x": 0.0}, 7, 60)
    store.add_shrink(cid, first)
    (got,) = store.shrinks(cid)
    assert got.test_case_id == "t0000002" and got.moved == ("x",) and got.nominal == {"x": 0.0}
    assert (got.original_distance, got.shrunk_distance, got.executions, got.max_executions) == (0.2, 0.05, 7, 60)
    assert got.shrunk.values == {"x": 0.05} and got.shrunk.verdict == "fail" and got.shrunk.reason == "fell at step 21"
    assert got.shrunk.test_case_id == "s0000007" and got.shrunk.steps == 21 and got.created_at
    # shrinking the same failure again replaces its row; another campaign's shrinks are not listed
    store.add_shrink(cid, ShrinkRow("t0000002", original, 0.2, 0.2, ("x",), {"x": 0.0}, 3, 3))
    (again,) = store.shrinks(cid)
    assert again.shrunk.test_case_id == "t0000002" and again.executions == 3
    assert store.shrinks("other") == []
    if store.engine.dialect.name == "postgresql":  # JSON columns are JSON there, as the executions' are
        types = {c["name"]: str(c["type"]).lower() for c in sa.inspect(store.engine).get_columns("shrinks")}
        assert types["values"] == "jsonb" and types["moved"] == "jsonb" and types["nominal"] == "jsonb"


def test_a_store_written_before_shrinks_opens_with_the_shrinks_table(tmp_path: Path) -> None:
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = CampaignStore(url)
    store.create_campaign("c", "n", {"a": 1})
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE shrinks")
    assert "shrinks" not in sa.inspect(sa.create_engine(url)).get_table_names()
    assert CampaignStore(url).shrinks("c") == []  # created when the store opens
