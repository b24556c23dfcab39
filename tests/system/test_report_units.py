"""A report prints inputs with the units the subject declares (issue 33): the analysis service asks the generator
for the campaign with its subject's parameter space (GetCampaign with_parameter_space, which the generator asks of
its simulator); a generator without a simulator still answers the campaign, with an empty space (bare numbers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import analysis_pb2, analysis_pb2_grpc, generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.config import CampaignConfig

CARTPOLE_UNITS = {"x": "m", "x_dot": "m/s", "theta": "rad", "theta_dot": "rad/s"}  # subjects/classic/cartpole.yaml


def test_a_report_prints_inputs_with_the_subjects_units(suite: LocalSuite, tmp_path: Path) -> None:
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    config = CampaignConfig(
        subject="cartpole", model="cartpole-ppo-seed1", strategy="prt", seed=5, budget={"max_executions": 24}
    )
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120).status
    cid = started.campaign_id
    list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid), timeout=300))

    plain = gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=cid), timeout=30)
    assert not plain.HasField("parameter_space")  # only when asked: a status poll does not reach the simulator
    asked = gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=cid, with_parameter_space=True), timeout=30)
    assert {p.name: p.unit for p in asked.parameter_space.parameters} == CARTPOLE_UNITS

    analysis = analysis_pb2_grpc.AnalysisServiceStub(client_channel(suite.endpoint("analysis")))
    done = analysis.RenderReport(analysis_pb2.RenderReportRequest(campaign_ids=[cid], output_dir="units"), timeout=300)
    assert json.loads(done.json)["campaigns"][0]["info"]["units"] == CARTPOLE_UNITS
    page = Path(done.html_path).read_text(encoding="utf-8")
    assert '<th data-name="theta_dot">theta_dot <span class=meta>[rad/s]</span></th>' in page
    if json.loads(done.json)["campaigns"][0]["metrics"]["failures"]:  # the failing inputs, each value with its unit
        assert re.search(r"theta_dot: -?[0-9.e+-]+ rad/s[,}]", page) and re.search(r"\bx: -?[0-9.e+-]+ m[,}]", page)

    # a generator with no simulator behind it (as `gauntlet report` starts one): the campaign, without a space
    reader = LocalSuite(
        store_url=suite.store_url,
        log_dir=tmp_path / "logs",
        resume_on_start=False,
        agent_preload=False,
        roles=frozenset({"generator"}),
    ).start()
    try:
        alone = generator_pb2_grpc.GeneratorServiceStub(client_channel(reader.endpoint("generator")))
        answer = alone.GetCampaign(
            generator_pb2.GetCampaignRequest(campaign_id=cid, with_parameter_space=True), timeout=60
        )
        assert answer.status.campaign_id == cid and not answer.parameter_space.parameters
    finally:
        reader.stop()
