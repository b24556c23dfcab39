"""Regression tests of issue 19's bad-input defects, against the real services (conftest's `suite`):

1. one request poisoned the store for everyone (`max_wall_seconds: inf` stored as JSON null broke every listing);
2. identifiers were not validated (`../../tmp/evil`, a newline, 10,000 characters);
3. clients chose server paths (RenderReport/Compare output_dir, train_fail_replay's `log`, Indago's `surrogate`);
4. errors echoed unbounded input (a 3 MB name came back whole; NaN observations answered with a tensor dump).
"""

from __future__ import annotations

import gzip
import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from agent_service.server import MAX_BATCH_BYTES, MAX_BATCH_OBSERVATIONS
from cli.launcher import LocalSuite
from common.errors import MAX_DETAIL_BYTES, InvalidArgument, bounded
from common.generated.gauntlet.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    analysis_pb2,
    analysis_pb2_grpc,
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from common.tensor import to_tensor
from common.validation import check_id, check_number, non_finite_summary, resolve_under, shown
from generator_service.config import CampaignConfig
from generator_service.store import CampaignStore

ROOT = Path(__file__).resolve().parents[2]
BAD_IDS = ["../../tmp/evil", "a/b", "a\nb", "x" * 10_000, ".hidden", "-rf", "a b", "é", "a\x00b"]


def generator(suite: LocalSuite) -> generator_pb2_grpc.GeneratorServiceStub:
    return generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))


def analysis(suite: LocalSuite) -> analysis_pb2_grpc.AnalysisServiceStub:
    return analysis_pb2_grpc.AnalysisServiceStub(client_channel(suite.endpoint("analysis")))


def refused(call, request, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT, stream: bool = False) -> str:  # type: ignore[no-untyped-def]
    """The details of a call that must fail with `code`; each one also short and free of tracebacks."""
    with pytest.raises(grpc.RpcError) as err:
        reply = call(request, timeout=60)
        if stream:
            list(reply)
    details = err.value.details() or ""
    assert err.value.code() == code, (err.value.code(), details[:300])
    assert len(details.encode()) <= MAX_DETAIL_BYTES and "Traceback" not in details, details[:300]
    return details


def spec() -> generator_pb2.CampaignSpec:
    return CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 4}).to_proto()


# -- 1. one request poisons the store -------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -1.0, 1e300])
def test_a_non_finite_or_huge_budget_is_refused_before_anything_is_stored(suite: LocalSuite, value: float) -> None:
    gen = generator(suite)
    request = generator_pb2.StartCampaignRequest(campaign_id=f"budget-{abs(hash(str(value)))}", spec=spec())
    request.spec.budget.max_wall_seconds = value
    details = refused(gen.StartCampaign, request)
    assert "spec.budget.max_wall_seconds" in details
    refused(
        gen.GetCampaign, generator_pb2.GetCampaignRequest(campaign_id=request.campaign_id), grpc.StatusCode.NOT_FOUND
    )
    gen.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=60)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("batch_size", 0, "[1, 4096]"),
        ("parallelism", 0, "[1, 512]"),
        ("repetitions", 0, "[1, 100]"),
        ("name", "", "1 to 200 characters"),
    ],
)
def test_a_zero_or_empty_spec_field_is_refused_with_its_range(
    suite: LocalSuite, field: str, value: object, allowed: str
) -> None:
    """Issue 35 item 7: 0 silently became 64/64/1 and an empty name "campaign"; the documented ranges say no."""
    gen = generator(suite)
    request = generator_pb2.StartCampaignRequest(campaign_id=f"zero-{field.replace('_', '-')}", spec=spec())
    setattr(request.spec, field, value)
    details = refused(gen.StartCampaign, request)
    assert f"spec.{field}: must be" in details and allowed in details, details
    refused(
        gen.GetCampaign, generator_pb2.GetCampaignRequest(campaign_id=request.campaign_id), grpc.StatusCode.NOT_FOUND
    )


def test_a_non_finite_strategy_parameter_is_refused(suite: LocalSuite) -> None:
    request = generator_pb2.StartCampaignRequest(spec=spec())
    request.spec.strategy = "prt"
    request.spec.strategy_params.update({"anything": math.inf})
    assert "spec.strategy_params" in refused(generator(suite).StartCampaign, request)


def test_an_unreadable_stored_row_is_listed_with_its_error_and_breaks_nothing(
    suite: LocalSuite, tmp_path: Path
) -> None:
    # a row the way an older version stored `max_wall_seconds: inf` (pydantic wrote JSON null), straight into the store
    poisoned = CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 4})
    stored = json.loads(poisoned.model_dump_json())
    stored["budget"]["max_wall_seconds"] = None
    CampaignStore(suite.store_url).create_campaign("poisoned-row", "poisoned", stored)

    gen = generator(suite)
    good = gen.StartCampaign(
        generator_pb2.StartCampaignRequest(
            spec=CampaignConfig(
                name="after-poison", subject="cartpole", model="cartpole-ppo", budget={"max_executions": 4}
            ).to_proto()
        ),
        timeout=120,
    ).status
    list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=good.campaign_id), timeout=300))

    listed = {c.campaign_id: c for c in gen.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=60).campaigns}
    bad = listed["poisoned-row"]
    assert "poisoned-row" in bad.read_error and "spec.budget.max_wall_seconds" in bad.read_error, bad.read_error
    assert listed[good.campaign_id].read_error == "" and listed[good.campaign_id].executions == 4
    one = gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id="poisoned-row"), timeout=60).status
    assert one.read_error == bad.read_error and one.created_at
    details = refused(
        gen.ResumeCampaign,
        generator_pb2.ResumeCampaignRequest(campaign_id="poisoned-row"),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "cannot be read" in details

    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "report", "--match", "after-poison"]
        + ["--generator", suite.endpoint("generator"), "--analysis", suite.endpoint("analysis")]
        + ["--report-dir", "match-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "poisoned-row" in done.stdout and "skipped" in done.stdout  # the bad row is named, not hidden
    assert (suite.report_root / "match-report" / f"report-{good.campaign_id}.json").exists()


# -- 2. identifiers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", BAD_IDS, ids=range(len(BAD_IDS)))
def test_a_malformed_id_is_refused_at_every_entry_point(suite: LocalSuite, bad: str) -> None:
    gen, ana = generator(suite), analysis(suite)
    details = refused(gen.StartCampaign, generator_pb2.StartCampaignRequest(campaign_id=bad, spec=spec()))
    assert "campaign_id" in details
    if len(bad) > 100:
        assert "10,000 characters" in details
    for call, request, stream in [
        (gen.GetCampaign, generator_pb2.GetCampaignRequest(campaign_id=bad), False),
        (gen.WatchCampaign, generator_pb2.WatchCampaignRequest(campaign_id=bad), True),
        (gen.ListExecutions, generator_pb2.ListExecutionsRequest(campaign_id=bad), True),
        (gen.CancelCampaign, generator_pb2.CancelCampaignRequest(campaign_id=bad), False),
        (gen.ResumeCampaign, generator_pb2.ResumeCampaignRequest(campaign_id=bad), False),
        (ana.ComputeMetrics, analysis_pb2.ComputeMetricsRequest(campaign_ids=[bad]), False),
        (ana.RenderReport, analysis_pb2.RenderReportRequest(campaign_ids=[bad]), False),
        (ana.Compare, analysis_pb2.CompareRequest(campaign_ids=["good", bad]), False),
    ]:
        assert "campaign_id" in refused(call, request, stream=stream)
    listed = gen.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=60).campaigns
    assert bad not in {c.campaign_id for c in listed}
    assert not list(suite.report_root.glob("*\n*")) and not Path("/tmp/evil").exists()


def test_names_used_as_ids_are_checked_before_the_simulator_is_asked(suite: LocalSuite) -> None:
    gen = generator(suite)
    for field in ("subject", "strategy", "oracle"):
        request = generator_pb2.StartCampaignRequest(spec=spec())
        setattr(request.spec, field, "../../etc/passwd")
        assert f"spec.{field}" in refused(gen.StartCampaign, request)
    request = generator_pb2.StartCampaignRequest(spec=spec())
    request.spec.model.name = "a/b"
    assert "spec.model" in refused(gen.StartCampaign, request)
    request = generator_pb2.StartCampaignRequest(spec=spec())
    request.spec.name = "two\nlines"
    assert "spec.name" in refused(gen.StartCampaign, request)


def test_the_cli_checks_a_campaign_id_before_starting_anything() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", "examples/cartpole_random.yaml", "--id", "../../tmp/evil"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "campaign id must be" in done.stderr and "Traceback" not in done.stderr


# -- 3. paths -------------------------------------------------------------------------------------------------------
def test_reports_are_written_under_the_report_root_only(suite: LocalSuite, tmp_path: Path) -> None:
    gen, ana = generator(suite), analysis(suite)
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=spec()), timeout=120).status
    list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    ids = [started.campaign_id]
    outside = tmp_path / "chosen-by-client"
    suite.report_root.mkdir(parents=True, exist_ok=True)
    escape = suite.report_root / f"link-{started.campaign_id}"
    escape.symlink_to(tmp_path, target_is_directory=True)
    answers = {}
    for output_dir in [str(outside), "../outside", "a/../../b", f"{escape.name}/sub", "~root", "a\x01b"]:
        answers[output_dir] = refused(
            ana.RenderReport, analysis_pb2.RenderReportRequest(campaign_ids=ids, output_dir=output_dir)
        )
        assert "output_dir" in answers[output_dir] and "report root" in answers[output_dir]
        refused(ana.Compare, analysis_pb2.CompareRequest(campaign_ids=ids * 2 + ["x"], output_dir=output_dir))
    assert list(tmp_path.iterdir()) == []  # nothing created outside the root, through the link neither
    inside = ana.RenderReport(analysis_pb2.RenderReportRequest(campaign_ids=ids, output_dir="nested/ok"), timeout=300)
    assert Path(inside.json_path).parent == (suite.report_root / "nested" / "ok").resolve()


def test_a_link_at_the_report_file_name_is_replaced_not_written_through(suite: LocalSuite, tmp_path: Path) -> None:
    """Issue 35 item 2: a symbolic link at report-<id>.json pointed the write anywhere (the service runs as root in
    the images); a file or a link in place of a folder, or a folder name too long for the file system, gave
    INTERNAL with absolute server paths."""
    gen, ana = generator(suite), analysis(suite)
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=spec()), timeout=120).status
    list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    ids = [started.campaign_id]
    folder = suite.report_root / "linked"
    folder.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    (folder / f"report-{started.campaign_id}.json").symlink_to(victim)
    (folder / f"report-{started.campaign_id}.html").symlink_to(tmp_path / "absent.html")  # a dangling one too
    done = ana.RenderReport(analysis_pb2.RenderReportRequest(campaign_ids=ids, output_dir="linked"), timeout=300)
    assert victim.read_text() == "precious" and not (tmp_path / "absent.html").exists()
    written = folder / f"report-{started.campaign_id}.json"
    assert not written.is_symlink() and json.loads(written.read_text())["campaigns"][0]["info"]["campaign_id"] == ids[0]
    assert Path(done.json_path) == written.resolve() and (written.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temporary file left behind
    other = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=spec()), timeout=120).status.campaign_id
    list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=other), timeout=300))
    (suite.report_root / "a-file").write_text("x")
    (suite.report_root / "inner-link").symlink_to(folder, target_is_directory=True)  # inside the root, still a link
    long_name = "ok/" + "n" * 300
    for output_dir, part in [
        ("a-file", "a-file"),
        ("a-file/sub", "a-file"),
        ("inner-link", "inner-link"),
        (long_name, "255 bytes"),
    ]:
        for call, request in [
            (ana.RenderReport, analysis_pb2.RenderReportRequest(campaign_ids=ids, output_dir=output_dir)),
            (ana.Compare, analysis_pb2.CompareRequest(campaign_ids=[*ids, other], output_dir=output_dir)),
        ]:
            details = refused(call, request)
            assert "output_dir" in details and str(suite.report_root.resolve()) not in details, details
            assert str(tmp_path) not in details and part in details, details
    (folder / f"report-{started.campaign_id}.html").unlink()
    (folder / f"report-{started.campaign_id}.html").mkdir()  # a folder where the report file belongs
    details = refused(ana.RenderReport, analysis_pb2.RenderReportRequest(campaign_ids=ids, output_dir="linked"))
    assert "output_dir" in details and "folder where the report file belongs" in details


def test_reports_of_several_campaigns_have_hashed_names_that_never_collide(suite: LocalSuite) -> None:
    """Issue 35 item 7: ids joined and cut at 100 characters made two sets of campaigns overwrite one file."""
    gen, ana = generator(suite), analysis(suite)
    ids = []
    for n in range(3):
        request = generator_pb2.StartCampaignRequest(campaign_id=f"{'c' * 60}-{n}", spec=spec())
        ids.append(gen.StartCampaign(request, timeout=120).status.campaign_id)
    for cid in ids:
        list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid), timeout=300))
    first = ana.RenderReport(analysis_pb2.RenderReportRequest(campaign_ids=ids[:2], output_dir="many"), timeout=300)
    second = ana.RenderReport(
        analysis_pb2.RenderReportRequest(campaign_ids=[ids[0], ids[2]], output_dir="many"), timeout=300
    )
    assert first.json_path != second.json_path
    assert Path(first.json_path).name.startswith("report-2-") and len(Path(first.json_path).name) < 40
    assert [c["info"]["campaign_id"] for c in json.loads(Path(first.json_path).read_text())["campaigns"]] == ids[:2]


def test_strategy_paths_resolve_under_the_artifact_root_and_never_leak_files(suite: LocalSuite) -> None:
    gen = generator(suite)
    root = suite.artifact_root
    root.mkdir(parents=True, exist_ok=True)
    secret = "SECRET-LINE-root:x:0:0"
    (root / "not-a-log.jsonl.gz").write_text(secret)  # plain text where a gzip file is expected
    with gzip.open(root / "bad-rows.jsonl.gz", "wt") as stream:
        stream.write(json.dumps({"episode": 1, "timestep": 1, "config": {}, "verdict": secret, "margin": 0}) + "\n")

    def start(strategy: str, **params: str) -> str:
        request = generator_pb2.StartCampaignRequest(spec=spec())
        request.spec.strategy = strategy
        request.spec.strategy_params.update(params)
        return refused(gen.StartCampaign, request)

    for log in ["not-a-log.jsonl.gz", "bad-rows.jsonl.gz", "/etc/passwd", "/proc/self/environ"]:
        details = start("train_fail_replay", log=log)
        assert secret not in details and "root:x" not in details and "PATH=" not in details, details
    for path in ["/etc/passwd", "../../../../etc/passwd"]:
        assert "relative to the generator's artifact root" in start("train_fail_replay", log=path)
    # whether a refused path exists is not told: an existing and a missing one read the same
    assert start("indago", surrogate="/etc") == start("indago", surrogate="/no-such-folder-anywhere")
    assert start("indago", surrogate="../etc") == start("indago", surrogate="../no-such")
    inside_missing = start("indago", surrogate="no-such-surrogate")
    assert "no-such-surrogate" in inside_missing and str(root.resolve()) not in inside_missing


# -- 4. bounded details ---------------------------------------------------------------------------------------------
def test_a_huge_name_comes_back_summarised_not_echoed(suite: LocalSuite) -> None:
    huge = "a" * 3_000_000
    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint("simulator")))
    details = refused(
        sim.DescribeEnvironment, simulator_pb2.DescribeEnvironmentRequest(subject=huge), grpc.StatusCode.NOT_FOUND
    )
    assert "3,000,000 characters" in details
    request = generator_pb2.StartCampaignRequest(spec=spec())
    request.spec.subject = huge
    assert "spec.subject" in refused(generator(suite).StartCampaign, request)
    assert "3,000,000 characters" in refused(
        analysis(suite).ComputeMetrics, analysis_pb2.ComputeMetricsRequest(campaign_ids=[huge])
    )
    agent = agent_pb2_grpc.AgentServiceStub(client_channel(suite.endpoint("agent")))
    observations = to_tensor(np.zeros((1, 4), np.float32))
    details = refused(
        agent.Act,
        agent_pb2.ActRequest(model=common_pb2.ModelRef(name=huge), observations=observations),
        grpc.StatusCode.NOT_FOUND,
    )
    assert "3,000,000 characters" in details


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_an_oversized_batch_is_refused_and_its_memory_not_kept(suite: LocalSuite) -> None:
    """Issue 35 item 7: a 240 MB batch was accepted and the agent kept 1.5 GB afterwards."""
    agent = agent_pb2_grpc.AgentServiceStub(client_channel(suite.endpoint("agent")))
    model = common_pb2.ModelRef(name="cartpole-ppo")
    full = agent.Act(
        agent_pb2.ActRequest(model=model, observations=to_tensor(np.zeros((MAX_BATCH_OBSERVATIONS, 4), np.float32))),
        timeout=60,
    )
    assert list(full.actions.shape) == [MAX_BATCH_OBSERVATIONS]  # the largest batch is served
    too_many = to_tensor(np.zeros((MAX_BATCH_OBSERVATIONS + 1, 4), np.float32))
    details = refused(agent.Act, agent_pb2.ActRequest(model=model, observations=too_many))
    assert "observations" in details and f"{MAX_BATCH_OBSERVATIONS:,} rows" in details
    pid = suite.services["agent"].process.pid
    before = _rss_bytes(pid)
    wide = to_tensor(np.zeros((1000, 100_000), np.uint8))  # 100 MB in 1,000 rows, over MAX_BATCH_BYTES
    for _ in range(3):
        details = refused(agent.Act, agent_pb2.ActRequest(model=model, observations=wide))
        assert "observations" in details and f"{MAX_BATCH_BYTES:,} bytes" in details
        details = refused(agent.Embed, agent_pb2.EmbedRequest(model=model, images=wide))
        assert "images" in details and f"{MAX_BATCH_BYTES:,} bytes" in details
        stream = agent.ActStream(iter([agent_pb2.ActStreamRequest(model=model, observations=wide)]), timeout=60)
        with pytest.raises(grpc.RpcError) as err:
            list(stream)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    deadline = time.monotonic() + 10  # a stream's last message is freed when gRPC has cleaned the call up
    while (grown := _rss_bytes(pid) - before) >= 64 * 1024 * 1024 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert grown < 64 * 1024 * 1024, f"the agent kept {grown:,} bytes after refusing 900 MB of batches"


def test_nan_observations_are_summarised_not_dumped(suite: LocalSuite) -> None:
    agent = agent_pb2_grpc.AgentServiceStub(client_channel(suite.endpoint("agent")))
    observations = np.zeros((3, 4), np.float32)
    observations[0, 2] = np.nan
    observations[1, 0] = np.inf
    observations[2, 3] = np.nan
    details = refused(
        agent.Act,
        agent_pb2.ActRequest(model=common_pb2.ModelRef(name="cartpole-ppo"), observations=to_tensor(observations)),
    )
    assert details == "observations contain 3 non-finite values (first at [0, 2])"


# -- clients chose the simulator's outgoing connections (issue 19 follow-up) ----------------------------------------
def episodes_request(**endpoints: str) -> simulator_pb2.RunEpisodesRequest:
    case = common_pb2.TestCase(
        id="t1", values={k: common_pb2.Value(real=0.0) for k in ("x", "x_dot", "theta", "theta_dot")}
    )
    return simulator_pb2.RunEpisodesRequest(
        subject="cartpole", model=common_pb2.ModelRef(name="cartpole-ppo"), test_cases=[case], **endpoints
    )


def test_the_simulator_connects_only_to_endpoints_it_was_configured_with(suite: LocalSuite, tmp_path: Path) -> None:
    """RunEpisodesRequest.agent_endpoint/translator_endpoint named any host:port and the simulator dialled it (a
    server-side request forgery): now only --agent-endpoint, --translator-endpoint and --allow-endpoint are dialled."""
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(1)
    trap.settimeout(1.0)
    elsewhere = f"127.0.0.1:{trap.getsockname()[1]}"
    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint("simulator")))
    try:
        for field in ("agent_endpoint", "translator_endpoint"):
            details = refused(
                sim.RunEpisodes, episodes_request(**{field: elsewhere}), grpc.StatusCode.PERMISSION_DENIED, stream=True
            )
            assert (
                f"RunEpisodesRequest.{field} '{elsewhere}' is not an endpoint" in details
                and "--allow-endpoint" in details
            )
        with pytest.raises(TimeoutError):
            trap.accept()  # nobody came
        # the endpoints the suite configured stay usable by name, as before
        named = episodes_request(
            agent_endpoint=suite.endpoint("agent"), translator_endpoint=suite.endpoint("translator")
        )
        (reply,) = list(sim.RunEpisodes(named, timeout=60))
        assert not reply.result.error and reply.result.steps > 0
        # a simulator without a default agent reaches one the operator allowed, and nothing else
        other = LocalSuite(store_url=f"sqlite:///{tmp_path / 'unused.db'}", log_dir=tmp_path)
        try:
            allowed = other.start_service("simulator", "simulator_service", "--allow-endpoint", suite.endpoint("agent"))
            sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(allowed.endpoint))
            (reply,) = list(sim.RunEpisodes(episodes_request(agent_endpoint=suite.endpoint("agent")), timeout=60))
            assert not reply.result.error and reply.result.steps > 0
            refused(
                sim.RunEpisodes,
                episodes_request(agent_endpoint=elsewhere),
                grpc.StatusCode.PERMISSION_DENIED,
                stream=True,
            )
            assert "--agent-endpoint" in refused(
                sim.RunEpisodes, episodes_request(), grpc.StatusCode.FAILED_PRECONDITION, stream=True
            )
        finally:
            other.stop()
        with pytest.raises(TimeoutError):
            trap.accept()
    finally:
        trap.close()


# -- the shared checks themselves -----------------------------------------------------------------------------------
def test_ids_numbers_and_summaries() -> None:
    assert check_id("id", "cartpole-ppo.v2_1") == "cartpole-ppo.v2_1"
    assert check_id("id", "", required=False) == ""
    for bad in ["", "x" * 65, "../a", "a/b", "a\n", " a", "_a"]:
        with pytest.raises(InvalidArgument, match="id must be"):
            check_id("id", bad)
    with pytest.raises(InvalidArgument, match=r"seed must be a finite number in \[0, 10\], got inf"):
        check_number("seed", math.inf, 0, 10)
    assert shown("x" * 3_000_000).startswith("a value of 3,000,000 characters")
    assert len(bounded("é" * 5000).encode()) <= MAX_DETAIL_BYTES
    assert non_finite_summary(np.zeros((2, 2))) is None and non_finite_summary(np.zeros(3, np.int64)) is None


def test_resolve_under_refuses_every_way_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    (root / "out-link").symlink_to(tmp_path)
    (root / "in-link").symlink_to(root / "in")
    assert resolve_under(root, "in/file", "f", "the root") == (root / "in" / "file").resolve()
    assert resolve_under(root, "in-link", "f", "the root") == (root / "in").resolve()
    for bad in ["/etc", "..", "in/../../x", "out-link/x", "out-link", "a\x00b", "~/x", ""]:
        with pytest.raises(InvalidArgument, match="^f must"):
            resolve_under(root, bad, "f", "the root")
