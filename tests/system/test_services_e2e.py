"""End to end over gRPC: every service a separate process, campaigns run and judged for real."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli.launcher import LocalSuite, Service
from common.generated.gauntlet.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    analysis_pb2,
    analysis_pb2_grpc,
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    simulator_pb2,
    simulator_pb2_grpc,
    translator_pb2,
    translator_pb2_grpc,
)
from common.server import client_channel
from common.space import ParameterSpace
from common.tensor import from_tensor, to_tensor
from generator_service.config import CampaignConfig

CARTPOLE = {"x": 0.1, "x_dot": 0.0, "theta": 0.01, "theta_dot": 0.0}


def stub(suite: LocalSuite, name: str, cls: type) -> object:
    return cls(client_channel(suite.endpoint(name)))


def run_campaign(suite: LocalSuite, config: CampaignConfig, campaign_id: str = "") -> generator_pb2.CampaignStatus:
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    started = gen.StartCampaign(
        generator_pb2.StartCampaignRequest(campaign_id=campaign_id, spec=config.to_proto()), timeout=120
    ).status
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    assert events[-1].kind == "finished"
    return events[-1].status


def executions(suite: LocalSuite, campaign_id: str) -> list[generator_pb2.Execution]:
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    return [r.execution for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=campaign_id))]


def test_every_service_is_healthy_and_reflective(suite: LocalSuite) -> None:
    for name, service in suite.services.items():
        channel = client_channel(service.endpoint)
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
        import urllib.request

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{service.metrics_port}/metrics", timeout=10).read()
        assert b"python_info" in metrics


def test_services_that_run_no_network_do_not_import_torch(suite: LocalSuite, tmp_path: Path) -> None:
    for name in ("oracle", "simulator", "analysis"):
        maps = Path(f"/proc/{suite.services[name].process.pid}/maps").read_text()
        assert "libtorch" not in maps, f"{name} service loaded torch"
    # The generator loads torch lazily, for Indago's surrogates; other tests run Indago campaigns on the shared
    # suite, so a freshly started generator is checked.
    fresh = LocalSuite(store_url=f"sqlite:///{tmp_path / 'fresh.db'}", log_dir=tmp_path)
    try:
        generator = fresh.start_service(
            "generator",
            "generator_service",
            "--simulator-endpoint",
            suite.endpoint("simulator"),
            "--oracle-endpoint",
            suite.endpoint("oracle"),
            "--store-url",
            fresh.store_url,
        )
        assert "libtorch" not in Path(f"/proc/{generator.process.pid}/maps").read_text(), "generator loaded torch"
    finally:
        fresh.stop()


def test_random_campaign_runs_end_to_end_and_reports(suite: LocalSuite) -> None:
    config = CampaignConfig(
        name="e2e",
        subject="cartpole",
        model="cartpole-ppo",
        seed=3,
        budget={"max_executions": 300},
        batch_size=100,
        parallelism=32,
    )
    status = run_campaign(suite, config)
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and status.stop_reason == "max_executions"
    rows = executions(suite, status.campaign_id)
    assert [r.index for r in rows] == list(range(1, 301))
    assert len({r.test_case.id for r in rows}) == 300
    space = ParameterSpace.from_config([{"name": "x", "low": -0.9, "high": 0.9}])
    assert all(space.violations({"x": r.test_case.values["x"].real}) == [] for r in rows)
    assert status.steps == sum(r.steps for r in rows) and all(1 <= r.steps <= 500 for r in rows)
    # each verdict agrees with the episode: a CartPole pass runs all 500 steps
    assert all((r.steps == 500) == (r.verdict == oracle_pb2.VERDICT_KIND_PASS) for r in rows)
    # tests to first failure count in asking order (index = t-number), not in completion order
    assert all(r.test_case.id == f"t{r.index:07d}" for r in rows)
    failing = [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_FAIL]
    assert status.first_failure_index == (min(r.index for r in failing) if failing else 0)
    analysis = stub(suite, "analysis", analysis_pb2_grpc.AnalysisServiceStub)
    report = analysis.RenderReport(
        analysis_pb2.RenderReportRequest(campaign_ids=[status.campaign_id], output_dir="e2e"), timeout=120
    )
    data = json.loads(report.json)
    assert data["campaigns"][0]["metrics"]["executions"] == 300
    assert data["campaigns"][0]["metrics"]["failures"] == status.failures
    assert "data:image/png;base64," in Path(report.html_path).read_text()


def test_same_seed_same_campaign(suite: LocalSuite) -> None:
    config = CampaignConfig(
        subject="cartpole", model="cartpole-ppo", seed=11, budget={"max_executions": 40}, batch_size=16
    )
    a, b = (executions(suite, run_campaign(suite, config).campaign_id) for _ in range(2))
    assert [(r.test_case.values["theta"].real, r.verdict, r.steps) for r in a] == [
        (r.test_case.values["theta"].real, r.verdict, r.steps) for r in b
    ]


def test_stop_at_first_failure_and_repetitions(suite: LocalSuite) -> None:
    # PRT puts tests on CartPole's boundary, where the bundled agent fails soonest
    config = CampaignConfig(
        subject="cartpole",
        model="cartpole-ppo",
        strategy="prt",
        seed=1,
        budget={"max_executions": 400},
        batch_size=8,
        parallelism=8,
        stop_at_first_failure=True,
        repetitions=3,
    )
    status = run_campaign(suite, config)
    rows = executions(suite, status.campaign_id)
    assert status.stop_reason == "first_failure" and status.failures >= 1
    first = next(r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_FAIL)
    assert first.repetitions == 3 and first.failed_repetitions >= 2  # majority of 3
    assert status.first_failure_index == first.index


def test_final_observations_are_stored_only_when_the_campaign_keeps_them(suite: LocalSuite) -> None:
    # PRT's boundary tests make the CartPole agent fail, so both verdicts are present
    config = CampaignConfig(
        subject="cartpole",
        model="cartpole-ppo",
        strategy="prt",
        seed=3,
        budget={"max_executions": 48},
        batch_size=16,
        keep_final_observations=True,
    )
    rows = executions(suite, run_campaign(suite, config).campaign_id)
    verdicts = {r.verdict for r in rows}
    assert verdicts == {oracle_pb2.VERDICT_KIND_PASS, oracle_pb2.VERDICT_KIND_FAIL}
    for r in rows:
        x, _, theta, _ = r.final_observation  # CartPole ends beyond |x| 2.4 or |theta| 12 degrees, or survives
        beyond = abs(x) > 2.4 or abs(theta) > 0.2095
        assert beyond == (r.verdict == oracle_pb2.VERDICT_KIND_FAIL), (r.verdict, r.steps, list(r.final_observation))
    # Taxi's oracle does not ask for the final observation: keeping it adds the signal to the request
    taxi = CampaignConfig(
        subject="taxi_large",
        model="taxi-qlearning",
        seed=2,
        budget={"max_executions": 20},
        batch_size=20,
        keep_final_observations=True,
    )
    rows = [
        r
        for r in executions(suite, run_campaign(suite, taxi).campaign_id)
        if r.verdict != oracle_pb2.VERDICT_KIND_INVALID
    ]
    assert rows and all(len(r.final_observation) == 1 and r.final_observation[0] >= 0 for r in rows)
    plain = CampaignConfig(**{**config.model_dump(), "keep_final_observations": False})
    assert all(len(r.final_observation) == 0 for r in executions(suite, run_campaign(suite, plain).campaign_id))


def test_out_of_domain_config_is_invalid_argument_naming_parameter(suite: LocalSuite) -> None:
    sim = stub(suite, "simulator", simulator_pb2_grpc.SimulatorServiceStub)
    space = ParameterSpace.from_proto(
        sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")).parameter_space
    )
    case = space.test_case_to_proto("bad", {**CARTPOLE, "x": 2.0})
    reply = sim.ValidateConfigs(simulator_pb2.ValidateConfigsRequest(subject="cartpole", test_cases=[case]))
    assert not reply.results[0].valid and "x=2 is outside its domain [-0.9, 0.9]" in reply.results[0].violations[0]
    request = simulator_pb2.RunEpisodesRequest(subject="cartpole", test_cases=[case])
    request.model.name = "cartpole-ppo"
    with pytest.raises(grpc.RpcError) as err:
        list(sim.RunEpisodes(request))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "x=2 is outside its domain [-0.9, 0.9]" in err.value.details()
    assert "Traceback" not in err.value.details()


def test_run_episodes_answers_an_invalid_case_with_its_violations_when_asked(suite: LocalSuite) -> None:
    # invalid_as_results: one call checks and runs a batch; the invalid case gets one result naming its violation
    # (once, whatever the repetitions), is not run, and the valid ones around it run as usual
    sim = stub(suite, "simulator", simulator_pb2_grpc.SimulatorServiceStub)
    space = ParameterSpace.from_proto(
        sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")).parameter_space
    )
    cases = [
        space.test_case_to_proto("ok1", CARTPOLE),
        space.test_case_to_proto("bad", {**CARTPOLE, "x": 2.0}),
        space.test_case_to_proto("ok2", {**CARTPOLE, "theta": -0.02}),
    ]
    request = simulator_pb2.RunEpisodesRequest(
        subject="cartpole", test_cases=cases, repetitions=2, seed=3, invalid_as_results=True
    )
    request.model.name = "cartpole-ppo"
    results = [r.result for r in sim.RunEpisodes(request, timeout=120)]
    bad = [r for r in results if r.test_case_id == "bad"]
    assert len(bad) == 1 and bad[0].steps == 0 and not bad[0].signals
    assert "x=2 is outside its domain [-0.9, 0.9]" in bad[0].violations[0]
    ran = sorted((r.test_case_id, r.repetition) for r in results if r.test_case_id != "bad")
    assert ran == [("ok1", 0), ("ok1", 1), ("ok2", 0), ("ok2", 1)]
    assert all(r.steps > 0 and not r.violations for r in results if r.test_case_id != "bad")
    # only invalid cases: answered without running anything
    request = simulator_pb2.RunEpisodesRequest(subject="cartpole", test_cases=cases[1:2], invalid_as_results=True)
    request.model.name = "cartpole-ppo"
    assert [len(r.result.violations) for r in sim.RunEpisodes(request, timeout=60)] == [1]


def test_unknown_subject_and_model_are_not_found_listing_what_exists(suite: LocalSuite) -> None:
    sim = stub(suite, "simulator", simulator_pb2_grpc.SimulatorServiceStub)
    with pytest.raises(grpc.RpcError) as err:
        sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpol"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "cartpole" in err.value.details()
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    config = CampaignConfig(subject="cartpole", model="no-such-model", budget={"max_executions": 5})
    with pytest.raises(grpc.RpcError) as err:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-model" in err.value.details() and "cartpole-ppo" in err.value.details()
    config = CampaignConfig(subject="cartpole", model="cartpole-ppo", strategy="genius", budget={"max_executions": 5})
    with pytest.raises(grpc.RpcError) as err:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "random" in err.value.details()


def test_model_that_does_not_fit_the_subject_is_refused(suite: LocalSuite) -> None:
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    config = CampaignConfig(subject="cartpole", model="lunarlander-ppo", budget={"max_executions": 5})
    with pytest.raises(grpc.RpcError) as err:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Box(8,)" in err.value.details() and "Box(4,)" in err.value.details()


def test_out_of_range_campaign_field_is_named(suite: LocalSuite) -> None:
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    spec = CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 5}).to_proto()
    spec.batch_size = 100000
    with pytest.raises(grpc.RpcError) as err:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=spec))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.batch_size" in err.value.details() and "4096" in err.value.details()


def test_agent_rejects_malformed_observations(suite: LocalSuite) -> None:
    agent = stub(suite, "agent", agent_pb2_grpc.AgentServiceStub)
    with pytest.raises(grpc.RpcError) as err:
        agent.Act(
            agent_pb2.ActRequest(
                model=common_pb2.ModelRef(name="cartpole-ppo"),
                observations=common_pb2.Tensor(dtype=1, shape=[2, 4], data=b"abc"),
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bytes" in err.value.details()
    import numpy as np

    reply = agent.Act(
        agent_pb2.ActRequest(
            model=common_pb2.ModelRef(name="cartpole-ppo"), observations=to_tensor(np.zeros((3, 4), np.float32))
        )
    )
    assert from_tensor(reply.actions).shape == (3,)


def test_translator_lists_the_bundled_ones_and_names_unknown(suite: LocalSuite) -> None:
    tr = stub(suite, "translator", translator_pb2_grpc.TranslatorServiceStub)
    names = [t.name for t in tr.ListTranslators(translator_pb2.ListTranslatorsRequest()).translators]
    assert "pix2pix-urban" in names  # DESIGNATE's translator (tests/system/test_designate_e2e.py exercises it)
    with pytest.raises(grpc.RpcError) as err:
        tr.Translate(translator_pb2.TranslateRequest(translator="pix2pixhd"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "pix2pix-urban" in err.value.details()


def test_killed_simulator_mid_campaign_records_every_execution_once(suite: LocalSuite) -> None:
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    config = CampaignConfig(
        subject="cartpole", model="cartpole-ppo", seed=5, budget={"max_executions": 600}, batch_size=100, parallelism=16
    )
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status
    deadline = time.time() + 180  # a hang guard, not a speed check: a loaded 2-core machine took over 60 s
    while gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=started.campaign_id)).status.executions < 120:
        assert time.time() < deadline
        time.sleep(0.05)
    simulator = suite.services["simulator"]
    simulator.process.send_signal(signal.SIGKILL)  # dies mid-episode, mid-batch
    simulator.process.wait()
    time.sleep(1.0)
    # a new simulator on the same endpoint; the generator retries until it answers
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulator_service",
            "--port",
            str(simulator.port),
            "--metrics-port",
            "0",
            "--agent-endpoint",
            suite.endpoint("agent"),
            "--translator-endpoint",  # as the suite started it: later tests of the session run image subjects
            suite.endpoint("translator"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
    suite.services["simulator"] = Service("simulator", proc, ready["port"], ready["metrics_port"], simulator.log_path)
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    status = events[-1].status
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    rows = executions(suite, started.campaign_id)
    assert [r.index for r in rows] == list(range(1, 601))
    assert sorted(r.test_case.id for r in rows) == [f"t{i:07d}" for i in range(1, 601)]


def test_session_snapshot_and_restore_replay_the_same_trajectory(suite: LocalSuite) -> None:
    import numpy as np

    sim = stub(suite, "simulator", simulator_pb2_grpc.SimulatorServiceStub)
    space = ParameterSpace.from_proto(
        sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")).parameter_space
    )
    step = simulator_pb2.OpenSessionRequest(step=simulator_pb2.SessionStep(action=to_tensor(np.array(1, np.int64))))
    opened = simulator_pb2.OpenSessionRequest(
        open=simulator_pb2.SessionOpen(subject="cartpole", test_case=space.test_case_to_proto("s", CARTPOLE), seed=3)
    )
    snapshot = simulator_pb2.OpenSessionRequest(snapshot=simulator_pb2.SessionSnapshot())
    # snapshot ids are minted by the server, so the restore is sent after reading the snapshot reply
    import queue

    outbox: queue.Queue = queue.Queue()
    for command in (opened, step, snapshot):
        outbox.put(command)
    replies = sim.OpenSession(iter(outbox.get, None))
    first, _, snap = next(replies), next(replies), next(replies)
    np.testing.assert_allclose(from_tensor(first.observation), list(CARTPOLE.values()), rtol=1e-6)
    outbox.put(step)
    ahead = next(replies)
    outbox.put(simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=snap.snapshot_id)))
    restored = next(replies)
    outbox.put(step)
    again = next(replies)
    outbox.put(simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id="nope")))
    with pytest.raises(grpc.RpcError) as err:
        next(replies)
    outbox.put(None)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert (ahead.step, restored.step, again.step) == (2, 1, 2)
    np.testing.assert_array_equal(from_tensor(ahead.observation), from_tensor(again.observation))
    with pytest.raises(grpc.RpcError) as err:
        list(sim.OpenSession(iter([step])))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "open" in err.value.details()


def test_render_returns_an_rgb_frame(suite: LocalSuite) -> None:
    sim = stub(suite, "simulator", simulator_pb2_grpc.SimulatorServiceStub)
    space = ParameterSpace.from_proto(
        sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")).parameter_space
    )
    frame = from_tensor(
        sim.Render(
            simulator_pb2.RenderRequest(
                subject="cartpole", test_case=space.test_case_to_proto("r", CARTPOLE), seed=0, steps=2
            )
        ).image
    )
    assert frame.dtype.name == "uint8" and frame.ndim == 3 and frame.shape[2] == 3 and frame.max() > 0


def test_inputs_the_subject_rejects_are_stored_invalid_not_run(suite: LocalSuite) -> None:
    # uniform draws give Taxi's passenger == destination about 1 time in 11: stored as invalid, not run
    config = CampaignConfig(
        subject="taxi_large",
        model="taxi-qlearning",
        seed=2,
        budget={"max_executions": 120},
        batch_size=40,
        parallelism=20,
    )
    gen = stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120).status
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    status = events[-1].status
    rows = executions(suite, status.campaign_id)
    invalid = [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_INVALID]
    # the budget counts run tests: rejected inputs are extra rows
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and len(rows) - len(invalid) == 120
    assert invalid and all("passenger" in r.reason and r.steps == 0 for r in invalid)
    # ... and they are no executions anywhere: not in any progress event (a bar never shows 13x/120), not in the
    # final status, not in the metrics a summary shows (whose failure rate is out of the same 120)
    assert max(e.status.executions for e in events) == status.executions == 120
    assert status.invalid_inputs == len(invalid)
    analysis = stub(suite, "analysis", analysis_pb2_grpc.AnalysisServiceStub)
    metrics = analysis.ComputeMetrics(
        analysis_pb2.ComputeMetricsRequest(campaign_ids=[status.campaign_id]), timeout=120
    ).metrics[0]
    assert (metrics.executions, metrics.invalid) == (120, len(invalid))
    assert metrics.failure_rate == pytest.approx(metrics.failures / 120)
    assert all(r.test_case.values["passenger"].integer == r.test_case.values["destination"].integer for r in invalid)
    assert all(r.steps > 0 for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID)
