"""The campaign store nothing can corrupt (issue 35 items 1, 3, 5, 6).

Each test starts its own generator process, on its own store, against the session suite's simulator and oracle.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.store import CampaignStore, ExecutionRow, default_store_url

REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass
class Generator:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def stub(self) -> generator_pb2_grpc.GeneratorServiceStub:
        return generator_pb2_grpc.GeneratorServiceStub(client_channel(f"127.0.0.1:{self.port}"))

    def health(self, service: str = "") -> int:
        stub = health_pb2_grpc.HealthStub(client_channel(f"127.0.0.1:{self.port}"))
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def start_generator(suite: LocalSuite, store_url: str, artifact_root: Path, log: Path, *extra: str) -> Generator:
    """A generator process on its own store, using the suite's simulator and oracle."""
    env = {**os.environ, "GAUNTLET_STORE_URL": store_url, "PYTHONUNBUFFERED": "1"}
    with log.open("a") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "generator_service",
                "--port",
                "0",
                "--metrics-port",
                "-1",
                "--simulator-endpoint",
                suite.endpoint("simulator"),
                "--oracle-endpoint",
                suite.endpoint("oracle"),
                "--artifact-root",
                str(artifact_root),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=REPOSITORY,
        )
    line = process.stdout.readline()  # type: ignore[union-attr]
    if not line:
        process.wait()
        pytest.fail(f"the generator did not start:\n{log.read_text()[-3000:]}")
    return Generator(process, int(json.loads(line)["port"]), log)


def stop(generator: Generator, kill: bool = False) -> None:
    if kill:
        generator.process.kill()
    else:
        generator.process.terminate()
    generator.process.wait(timeout=30)


@contextmanager
def running(suite: LocalSuite, store_url: str, artifact_root: Path, log: Path, *extra: str) -> Iterator[Generator]:
    generator = start_generator(suite, store_url, artifact_root, log, *extra)
    try:
        yield generator
    finally:
        if generator.process.poll() is None:
            stop(generator)


def spec(executions: int = 10, seed: int = 0) -> generator_pb2.CampaignSpec:
    spec = generator_pb2.CampaignSpec(
        name="integrity",
        subject="cartpole",
        strategy="random",
        seed=seed,
        budget=generator_pb2.Budget(max_executions=executions),
        batch_size=10,
        parallelism=10,
        repetitions=1,
    )
    spec.model.name = "cartpole-ppo"
    return spec


def run_to_end(stub: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, seed: int = 0) -> None:
    stub.StartCampaign(generator_pb2.StartCampaignRequest(campaign_id=campaign_id, spec=spec(seed=seed)), timeout=120)
    list(stub.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=campaign_id), timeout=300))


def executions(stub: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str) -> list[str]:
    request = generator_pb2.ListExecutionsRequest(campaign_id=campaign_id)
    return [r.execution.test_case.id for r in stub.ListExecutions(request, timeout=60)]


def refusal(call, request) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as err:
        reply = call(request, timeout=120)
        if not hasattr(reply, "status"):
            list(reply)
    return err.value


# -- item 1: the store out of every request's reach ------------------------------------------------------------------
def test_the_default_store_has_its_own_folder_and_an_old_one_moves_there(tmp_path: Path) -> None:
    old = tmp_path / "gauntlet.db"
    store = CampaignStore(f"sqlite:///{old}")
    store.create_campaign("kept", "kept", {"name": "kept"})
    store.engine.dispose()
    url = default_store_url(tmp_path)
    assert url == f"sqlite:///{tmp_path / 'store' / 'gauntlet.db'}"
    assert not old.exists() and (tmp_path / "gauntlet.db.moved-to-store").exists()
    row = CampaignStore(url).campaign("kept")
    assert row is not None and row.spec == {"name": "kept"}


def test_a_request_naming_the_store_never_loses_acknowledged_campaigns(suite: LocalSuite, tmp_path: Path) -> None:
    """The issue's sequence: a store an earlier version kept inside the artifact root; a strategy parameter names
    it (by name, a symbolic link, a hard link); another process opens the database; the generator restarts. Every
    campaign acknowledged before and after is still there with all its executions."""
    root = tmp_path / "runs"
    root.mkdir()
    database = root / "gauntlet.db"
    url = f"sqlite:///{database}"
    log = tmp_path / "generator.log"
    with running(suite, url, root, log) as generator:
        stub = generator.stub
        run_to_end(stub, "before")
        (root / "link.db").symlink_to(database)
        os.link(database, root / "hard.db")
        for name in ["gauntlet.db", "gauntlet.db-wal", "gauntlet.db-shm", "./gauntlet.db", "link.db", "hard.db"]:
            request = generator_pb2.StartCampaignRequest(spec=spec())
            request.spec.strategy = "search_safety"
            request.spec.strategy_params.update({"reference": name})
            error = refusal(stub.StartCampaign, request)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, error.details())
            assert "spec.strategy_params.reference" in error.details() and "store" in error.details()
            assert str(root) not in error.details()
        # another process opens and closes the database (the sqlite3 shell, a backup, a local `gauntlet report`):
        # had the generator opened the file, its locks would be gone and this would delete the live WAL
        with sqlite3.connect(database) as other:
            assert other.execute("SELECT count(*) FROM campaigns").fetchone()[0] == 1
        other.close()
        run_to_end(stub, "after", seed=1)
        assert stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id="after"), timeout=30).status.executions
        assert generator.health() == health_pb2.HealthCheckResponse.SERVING
        # a fresh reader sees what the generator acknowledged (with the WAL deleted under the generator: "disk I/O
        # error", or the rows missing)
        with sqlite3.connect(database) as reader:
            counted = reader.execute("SELECT count(*) FROM executions WHERE campaign_id = 'after'").fetchone()[0]
        reader.close()
        assert counted == 10
        stop(generator, kill=True)  # no orderly close that could checkpoint a deleted WAL back into the file
    with running(suite, url, root, log) as restarted:
        for campaign_id in ["before", "after"]:
            status = restarted.stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=campaign_id), timeout=30)
            assert status.status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED
            ids = executions(restarted.stub, campaign_id)
            assert len(ids) == len(set(ids)) == 10
    assert "disk I/O" not in log.read_text()


def test_a_plain_suite_keeps_its_store_logs_and_folders_private(suite: LocalSuite) -> None:
    """Issue 35 item 8 without --secure too: the store, its WAL, the logs and the suite's folders were world-readable
    (0644/0755); the services run with umask 077 and the launcher makes its folders 0700, its logs 0600."""
    run_to_end(generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator"))), "private-files")
    store = Path(suite.store_url.removeprefix("sqlite:///"))
    databases = sorted(store.parent.glob(f"{store.name}*"))  # the database and the WAL/SHM files beside it
    logs = sorted(suite.log_dir.glob("*.log"))
    assert store in databases and len(logs) >= len(suite.services), (databases, logs)
    for path in databases + logs:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in (suite.log_dir, suite.artifact_root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_logs_and_credentials_are_refused_as_artifact_paths(suite: LocalSuite, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "logs").mkdir(parents=True)
    (root / "secure").mkdir()
    token = root / "secure" / "token"
    token.write_text("t0ken-for-the-test")
    store = tmp_path / "store" / "gauntlet.db"
    store.parent.mkdir()
    with running(
        suite,
        f"sqlite:///{store}",
        root,
        root / "logs" / "generator.log",
        "--token-file",
        str(token),
    ) as generator:
        channel = grpc.intercept_channel(
            grpc.insecure_channel(f"127.0.0.1:{generator.port}"), _Bearer("t0ken-for-the-test")
        )
        stub = generator_pb2_grpc.GeneratorServiceStub(channel)
        for name in ["logs/generator.log", "logs/other.log", "secure/token", "secure/anything"]:
            request = generator_pb2.StartCampaignRequest(spec=spec())
            request.spec.strategy = "search_safety"
            request.spec.strategy_params.update({"reference": name})
            error = refusal(stub.StartCampaign, request)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "store, logs or credentials" in error.details()


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    def _with_token(self, details):  # type: ignore[no-untyped-def]
        metadata = [*(details.metadata or []), ("authorization", f"Bearer {self.token}")]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._with_token(details), request)


# -- item 3: one idempotency key, one campaign -----------------------------------------------------------------------
def concurrent_starts(
    stubs: list[generator_pb2_grpc.GeneratorServiceStub], campaign_id: str, same_spec: bool, n: int = 50
) -> tuple[list[grpc.StatusCode], list[generator_pb2.CampaignStatus]]:
    """n StartCampaign calls with one id at once (a barrier releases them together), spread over `stubs` (one
    generator, or several replicas on one store): their codes and statuses."""
    codes: list[grpc.StatusCode] = []
    statuses: list[generator_pb2.CampaignStatus] = []
    barrier = threading.Barrier(n)
    lock = threading.Lock()

    def start(k: int) -> None:
        request = generator_pb2.StartCampaignRequest(campaign_id=campaign_id, spec=spec(seed=0 if same_spec else k))
        barrier.wait()
        try:
            status = stubs[k % len(stubs)].StartCampaign(request, timeout=300).status
            with lock:
                codes.append(grpc.StatusCode.OK)
                statuses.append(status)
        except grpc.RpcError as exc:
            with lock:
                codes.append(exc.code())

    threads = [threading.Thread(target=start, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes, statuses


def test_concurrent_starts_with_one_id_make_exactly_one_campaign(suite: LocalSuite, tmp_path: Path) -> None:
    """Issue 35 item 3: 20 concurrent starts with one id gave 2 OK and 18 INTERNAL (UNIQUE constraint)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with running(suite, url, tmp_path / "artifacts", tmp_path / "generator.log", "--workers", "128") as generator:
        stub = generator.stub
        codes, statuses = concurrent_starts([stub], "same-spec", same_spec=True)
        assert codes == [grpc.StatusCode.OK] * 50  # the contract: the same id and spec give the same campaign
        assert {s.campaign_id for s in statuses} == {"same-spec"}
        codes, statuses = concurrent_starts([stub], "other-specs", same_spec=False)
        assert codes.count(grpc.StatusCode.OK) == 1, codes
        assert codes.count(grpc.StatusCode.ALREADY_EXISTS) == 49, codes
        for campaign_id in ["same-spec", "other-specs"]:
            list(stub.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=campaign_id), timeout=300))
            ids = executions(stub, campaign_id)
            assert len(ids) == len(set(ids)) == 10  # run once
        listed = stub.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=30).campaigns
        assert sorted(c.campaign_id for c in listed) == ["other-specs", "same-spec"]
    assert "UNIQUE constraint" not in (tmp_path / "generator.log").read_text()


# -- item 5: readiness follows the store -----------------------------------------------------------------------------
def _wait_health(generator: Generator, status: int, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while generator.health() != status:
        assert time.monotonic() < deadline, f"health never became {status}"
        time.sleep(0.3)


def test_health_says_not_serving_while_the_store_is_gone(suite: LocalSuite, tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    url = f"sqlite:///{folder / 'gauntlet.db'}"
    with running(suite, url, tmp_path / "artifacts", tmp_path / "generator.log") as generator:
        _wait_health(generator, health_pb2.HealthCheckResponse.SERVING)
        folder.rename(tmp_path / "moved-away")  # the file the generator opened is no longer its store
        _wait_health(generator, health_pb2.HealthCheckResponse.NOT_SERVING)
        assert generator.health("gauntlet.v1.GeneratorService") == health_pb2.HealthCheckResponse.NOT_SERVING
        assert generator.health("liveness") == health_pb2.HealthCheckResponse.SERVING  # not restarted for it
        (tmp_path / "moved-away").rename(folder)
        _wait_health(generator, health_pb2.HealthCheckResponse.SERVING)


def test_a_store_that_stops_answering_is_unavailable_and_not_ready(
    suite: LocalSuite, postgres_url: str, tmp_path: Path
) -> None:
    """PostgreSQL refuses the generator's connections: health NOT_SERVING, calls UNAVAILABLE (never INTERNAL), no
    campaign left registered as running; once it answers again, so does the generator."""
    server = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.exec_driver_sql("DROP DATABASE IF EXISTS readiness")
        conn.exec_driver_sql("CREATE DATABASE readiness")
    url = postgres_url.rsplit("/", 1)[0] + "/readiness"
    with running(suite, url, tmp_path / "artifacts", tmp_path / "generator.log") as generator:
        stub = generator.stub
        run_to_end(stub, "done-before")
        _wait_health(generator, health_pb2.HealthCheckResponse.SERVING)
        with server.connect() as conn:
            conn.exec_driver_sql("ALTER DATABASE readiness ALLOW_CONNECTIONS false")
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'readiness'")
        try:
            _wait_health(generator, health_pb2.HealthCheckResponse.NOT_SERVING)
            for call, request in [
                (stub.GetCampaign, generator_pb2.GetCampaignRequest(campaign_id="done-before")),
                (stub.StartCampaign, generator_pb2.StartCampaignRequest(campaign_id="during", spec=spec())),
                (stub.ListExecutions, generator_pb2.ListExecutionsRequest(campaign_id="done-before")),
            ]:
                error = refusal(call, request)
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
                assert "campaign store is unavailable" in error.details() and "readiness" not in error.details()
        finally:
            with server.connect() as conn:
                conn.exec_driver_sql("ALTER DATABASE readiness ALLOW_CONNECTIONS true")
        _wait_health(generator, health_pb2.HealthCheckResponse.SERVING)
        # the refused start left nothing behind: neither a row nor a runner, so the id starts cleanly now
        run_to_end(stub, "during")
        assert len(executions(stub, "during")) == 10
    server.dispose()


def test_a_campaign_whose_start_the_store_refused_leaves_no_phantom_runner(
    suite: LocalSuite, postgres_url: str, tmp_path: Path
) -> None:
    """Issue 35 item 5: a store failure while a campaign started left its runner registered, so the campaign read
    'running' and nothing ever ran or resumed it. Here the campaign's row is stored and then the state write that
    starts its runner fails (PostgreSQL: disk full, raised by a trigger on that one row): StartCampaign answers
    UNAVAILABLE and registers nothing, the generator serves on, and once the store takes the write again the
    campaign is taken up and runs to the end, once."""
    server = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.exec_driver_sql("DROP DATABASE IF EXISTS phantom WITH (FORCE)")
        conn.exec_driver_sql("CREATE DATABASE phantom")
    server.dispose()
    url = postgres_url.rsplit("/", 1)[0] + "/phantom"
    store = CampaignStore(url)  # the tables, so that the trigger can be made before the generator starts
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION refuse_state() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'no space left on device' USING ERRCODE = 'disk_full'; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse_state BEFORE UPDATE OF state ON campaigns FOR EACH ROW "
            "WHEN (NEW.id = 'phantom') EXECUTE FUNCTION refuse_state()"
        )
    try:
        log = tmp_path / "generator.log"
        with running(suite, url, tmp_path / "artifacts", log, "--lease-seconds", "3") as generator:
            stub = generator.stub
            request = generator_pb2.StartCampaignRequest(campaign_id="phantom", spec=spec())
            error = refusal(stub.StartCampaign, request)
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            assert "campaign store is unavailable" in error.details() and "no space" not in error.details()
            row = store.campaign("phantom")
            assert row is not None and row.state == "running" and store.count("phantom").executions == 0
            run_to_end(stub, "beside", seed=1)  # the generator serves on
            assert len(executions(stub, "beside")) == 10
            with store.engine.begin() as conn:
                conn.exec_driver_sql("DROP TRIGGER refuse_state ON campaigns")
            # a generator taking campaigns up every lease/3 s (or a ResumeCampaign) takes it over: had a runner
            # stayed registered, it would count as running here and never run
            deadline = time.monotonic() + 120
            while (row := store.campaign("phantom")) is not None and row.state == "running":
                assert time.monotonic() < deadline, "the campaign whose start failed was never taken up"
                time.sleep(0.5)
            assert row is not None and row.state == "completed" and row.stop_reason == "max_executions"
            assert [r.index for r in store.executions("phantom")] == list(range(1, 11))
            history = store.owners("phantom")
            assert history and all(h["released_at"] is not None for h in history), history
            assert store.leases() == {}
    finally:
        store.engine.dispose()


@contextmanager
def analysis_service(generator: Generator, report_root: Path, log: Path) -> Iterator[str]:
    """An analysis service reading from `generator`: its endpoint."""
    with log.open("a") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "analysis_service", "--port", "0", "--metrics-port", "-1"]
            + ["--generator-endpoint", f"127.0.0.1:{generator.port}", "--report-root", str(report_root)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPOSITORY,
        )
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line, log.read_text()[-3000:]
        yield f"127.0.0.1:{json.loads(line)['port']}"
    finally:
        process.terminate()
        process.wait(timeout=30)


# -- item 6: a corrupt row is named, never INTERNAL ------------------------------------------------------------------
def test_a_corrupt_execution_is_data_loss_naming_it(suite: LocalSuite, tmp_path: Path) -> None:
    database = tmp_path / "store.db"
    url = f"sqlite:///{database}"
    with running(suite, url, tmp_path / "artifacts", tmp_path / "generator.log") as generator:
        stub = generator.stub
        run_to_end(stub, "good")
        run_to_end(stub, "bad", seed=1)
        stub.CancelCampaign(generator_pb2.CancelCampaignRequest(campaign_id="bad"), timeout=60)
        with sqlite3.connect(database) as conn:
            conn.execute(
                "UPDATE executions SET \"values\" = '{\"x\": 0.1, trunc' WHERE campaign_id = 'bad' AND idx = 4"
            )
            conn.execute("UPDATE campaigns SET state = 'interrupted', stop_reason = 'error' WHERE id = 'bad'")
        conn.close()
        error = refusal(stub.ListExecutions, generator_pb2.ListExecutionsRequest(campaign_id="bad"))
        assert error.code() == grpc.StatusCode.DATA_LOSS
        assert "'bad'" in error.details() and "'t0000004'" in error.details() and "values" in error.details()
        # every readable row still comes first
        got = []
        with pytest.raises(grpc.RpcError):
            for r in stub.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id="bad"), timeout=60):
                got.append(r.execution.index)
        assert got == [1, 2, 3, 5, 6, 7, 8, 9, 10]
        error = refusal(stub.ResumeCampaign, generator_pb2.ResumeCampaignRequest(campaign_id="bad"))
        assert error.code() == grpc.StatusCode.DATA_LOSS and "'t0000004'" in error.details()
        # any other reader of the rows too (here: replaying a later execution reads past the bad row)
        request = generator_pb2.ReplayExecutionRequest(campaign_id="bad", test_case_id="t0000009")
        error = refusal(stub.ReplayExecution, request)
        assert error.code() == grpc.StatusCode.DATA_LOSS and "'t0000004'" in error.details()
        status = stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id="bad"), timeout=30).status
        assert status.state == generator_pb2.CAMPAIGN_STATE_INTERRUPTED and status.stop_reason == "error"
        assert len(executions(stub, "good")) == 10
        # a bulk report renders the readable campaigns and lists the unreadable rows
        with analysis_service(generator, tmp_path / "reports", tmp_path / "analysis.log") as analysis_endpoint:
            done = subprocess.run(
                [sys.executable, "-m", "cli.main", "report", "--match", "integrity"]
                + ["--generator", f"127.0.0.1:{generator.port}", "--analysis", analysis_endpoint],
                cwd=REPOSITORY,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "COLUMNS": "400"},
            )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "left out of the report" in done.stdout and "'t0000004'" in done.stdout, done.stdout
        [written] = (tmp_path / "reports").glob("report-*.json")
        assert [c["info"]["campaign_id"] for c in json.loads(written.read_text())["campaigns"]] == ["good"]


def test_postgres_json_columns_refuse_what_is_not_json(postgres_url: str) -> None:
    store = CampaignStore(postgres_url)
    types = {
        (t, c["name"]): str(c["type"]).upper()
        for t in ("campaigns", "test_cases", "executions")
        for c in sa.inspect(store.engine).get_columns(t)
    }
    assert types[("campaigns", "spec")] == "JSONB"
    assert types[("executions", "values")] == types[("executions", "descriptors")] == "JSONB"
    assert types[("executions", "final_observation")] == "JSONB"
    assert types[("test_cases", "values")] == "JSON"  # key order kept: a resume compares the replayed inputs
    store.create_campaign("pg-json", "pg-json", {"name": "pg-json"})
    with pytest.raises(sa.exc.DataError), store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE campaigns SET spec = '{\"x\": trunc' WHERE id = 'pg-json'")
    row = store.campaign("pg-json")
    assert row is not None and row.spec == {"name": "pg-json"}
    # the asked test cases' json column (key order kept) refuses what is not JSON too, and so do the executions'
    store.add_test_cases("pg-json", 1, 1, [("t1", {"b": 1, "a": 2})])
    row_1 = ExecutionRow("t1", 1, 1, {"b": 1, "a": 2}, "pass", 0.0, 1, 0.0, (), "", 1, 0, 0.0)
    store.add_executions("pg-json", [row_1])
    for table, column in [("test_cases", "values"), ("executions", "values"), ("executions", "descriptors")]:
        with pytest.raises(sa.exc.DataError), store.engine.begin() as conn:
            bad = "'{\"x\": 0.1, trunc'"
            conn.exec_driver_sql(f"UPDATE {table} SET \"{column}\" = {bad} WHERE campaign_id = 'pg-json'")
    [[(_, values)]] = store.asked_batches("pg-json")
    assert list(values.items()) == [("b", 1), ("a", 2)]
    assert [r.values for r in store.executions("pg-json")] == [{"b": 1, "a": 2}]
