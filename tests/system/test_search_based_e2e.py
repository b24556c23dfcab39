"""Search-based testing of RL through the real services: a DFS over a simulator session, safety suites and trace
fuzzing as campaigns on taxi_large (Q-learning agent), with nothing but the subject's YAML `search` section."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_service.performance_testing import measure_performance
from bench.harness import campaign_executions, run_campaign
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import (
    analysis_pb2,
    analysis_pb2_grpc,
    generator_pb2_grpc,
    oracle_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from generator_service.config import CampaignConfig
from generator_service.search_based.performance import write_traces
from generator_service.search_based.safety_metrics import measure_suite
from generator_service.search_based.trace_fuzzing import fittest_traces
from replications.replicate_search_based import search_reference

# A hand-made reference on taxi_large from its search start (row 8, col 6): east, east, west, then its boundary
# states at depths 1 and 2, so that the suites stay small (the DFS's own reference there has |DB| = 8; see the docs
# page).
REFERENCE = {
    "format": "gauntlet.search_reference.v1",
    "subject": "taxi_large",
    "initial": {"taxi_row": 8, "taxi_col": 6, "passenger": 0, "destination": 1},
    "seed": 0,
    "search_actions": [0, 1, 2, 3, 4, 5],
    "agent_actions": 6,
    "success": True,
    "reference_actions": [2, 2, 3],
    "reference_rewards": [-1.0, -1.0, -1.0],
    "boundary": [{"depth": 1, "state": [0]}, {"depth": 2, "state": [0]}],
    "stats": {},
}


def test_dfs_runs_over_a_real_session_and_stores_its_artifact(suite: LocalSuite) -> None:
    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint("simulator")))
    path = suite.artifact_root / "search" / "taxi_dfs.json"
    document = search_reference(sim, "taxi_large", path, max_samples=300)
    stored = json.loads(path.read_text())
    assert stored["format"] == "gauntlet.search_reference.v1" and stored["stats"]["samples"] == 300
    assert stored["stats"]["stopped"] == "budget" and document["stats"]["visited"] > 1
    assert stored["agent_actions"] == 6 and stored["initial"]["taxi_row"] == 8


def test_safety_suites_and_trace_fuzzing_run_as_campaigns(suite: LocalSuite) -> None:
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    (suite.artifact_root / "search").mkdir(parents=True, exist_ok=True)
    (suite.artifact_root / "search" / "taxi_ref.json").write_text(json.dumps(REFERENCE))
    common = {"subject": "taxi_large", "model": "taxi-qlearning", "seed": 0, "budget": {"max_executions": 1000}}
    measured = {}
    for suite_name, extra in (("ST", {}), ("AC", {"k": 2})):
        config = CampaignConfig(
            name=f"e2e-{suite_name}",
            strategy="search_safety",
            strategy_params={"reference": "search/taxi_ref.json", "suite": suite_name, "agent_steps": 40, **extra},
            oracle="trace_safety",
            repetitions=3,
            **common,
        )
        status = run_campaign(gen, config)
        rows = campaign_executions(gen, status.campaign_id)
        assert all(r.test_case.action_trace.agent_steps == 40 for r in rows)
        assert all(r.repetitions == 3 or r.verdict == oracle_pb2.VERDICT_KIND_INVALID for r in rows)
        measured[suite_name] = measure_suite(rows)
    assert measured["ST"].tests == 2  # |ST| = |DB|
    assert measured["AC"].tests == 6**2 * 2  # |AC(2)| = |A|^2·|DB|
    assert measured["AC"].invalid > 0  # e.g. pick-up or drop-off at the taxi's start: the prefix itself is a fault
    assert set(measured["AC"].per_boundary) <= {0, 1}
    assert all(0.0 <= f <= 1.0 for f in measured["AC"].fail_frequency.values())

    fuzz = CampaignConfig(
        name="e2e-fuzz",
        strategy="trace_fuzzing",
        strategy_params={"reference": "search/taxi_ref.json", "generations": 2, "population": 8},
        oracle="trace_outcome",
        batch_size=8,
        **common,
    )
    status = run_campaign(gen, fuzz)
    rows = campaign_executions(gen, status.campaign_id)
    assert status.stop_reason == "strategy_exhausted" and len(rows) == 1 + 2 * 8  # the seed, then g·p offspring
    assert all(r.verdict != oracle_pb2.VERDICT_KIND_INVALID for r in rows)
    assert all(len(r.descriptors) >= 3 and r.test_case.action_trace.agent_steps == 0 for r in rows)

    # Step 4 on the fuzzing's fittest traces: robust performance testing as a campaign, its curves in the report
    traces = fittest_traces(rows)
    assert traces, "every generation keeps its fittest trace"
    write_traces(suite.artifact_root / "search" / "taxi_tfit.json", [t * 3 for t in traces])  # long enough for pl 2
    perf = CampaignConfig(
        name="e2e-robust",
        strategy="trace_performance",
        strategy_params={
            "reference": "search/taxi_ref.json",
            "traces": "search/taxi_tfit.json",
            "mode": "robust",
            "n_test": 2,
            "width": 1,
            "horizon": 20,
        },
        oracle="trace_outcome",
        repetitions=2,
        **common,
    )
    status = run_campaign(gen, perf)
    rows = campaign_executions(gen, status.campaign_id)
    measured = measure_performance((r.test_case.action_trace.labels, r.total_reward) for r in rows)
    lengths = measured.robust_lengths()
    assert lengths[:2] == [1, 2] and len(rows) == 2 * 2 * len(lengths)  # n_test agent + n_test trace per length
    ana = analysis_pb2_grpc.AnalysisServiceStub(client_channel(suite.endpoint("analysis")))
    report = ana.RenderReport(analysis_pb2.RenderReportRequest(campaign_ids=[status.campaign_id]), timeout=300)
    html = Path(report.html_path).read_text()
    assert "<h3>Performance testing</h3>" in html and 'alt="robust performance, e2e-robust"' in html
    for pl in lengths:  # one table row per prefix length, with the measured means
        assert f"<tr><td>{pl}</td><td>{measured.agent[pl]:.2f}</td><td>{measured.traces[pl]:.2f}</td>" in html
