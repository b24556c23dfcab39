"""The two urban example campaigns (issue 17): the synthetic one and the AirSim one differ only in their `subject:`
line, and the AirSim one runs to completion against a toy AirSim host (tests/fake_airsim_server.py) through the
real service processes: bundled DNN (segnet-urban), translator (pix2pix-urban) and oracle (iou_car)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.commands import load_campaign_file
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2
from subjects.airsim.backend import ENDPOINT_ENV
from tests.fake_airsim_server import FakeAirSimServer
from tests.system.test_services_e2e import executions, run_campaign

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = ROOT / "examples" / "urban_random.yaml"
AIRSIM = ROOT / "examples" / "airsim_urban_random.yaml"


def test_the_two_example_campaigns_differ_only_in_the_subject_line() -> None:
    synthetic, airsim = SYNTHETIC.read_text().splitlines(), AIRSIM.read_text().splitlines()
    assert len(synthetic) == len(airsim)
    differing = [(a, b) for a, b in zip(synthetic, airsim, strict=True) if a != b]
    assert differing == [("  subject: urban", "  subject: airsim_urban")]
    (config_s, _), (config_a, _) = load_campaign_file(SYNTHETIC), load_campaign_file(AIRSIM)
    assert config_s.model_copy(update={"subject": "airsim_urban"}) == config_a
    assert (config_s.model, config_s.observation_translator) == ("segnet-urban", "pix2pix-urban")


@pytest.fixture(scope="module")
def host() -> Iterator[FakeAirSimServer]:
    with FakeAirSimServer() as server:
        yield server


@pytest.fixture(scope="module")
def urban_suite(host: FakeAirSimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    root = tmp_path_factory.mktemp("airsim-urban")
    suite = LocalSuite(store_url=f"sqlite:///{root / 'store.db'}", log_dir=root / "logs")  # the bundled models
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENDPOINT_ENV, host.endpoint)  # the simulator service's one AirSim host
        suite.start()
    yield suite
    suite.stop()


def test_the_airsim_example_completes_against_a_fake_host(urban_suite: LocalSuite, host: FakeAirSimServer) -> None:
    config, _ = load_campaign_file(AIRSIM)
    wanted = config.budget.max_executions
    status = run_campaign(urban_suite, config)
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    rows = executions(urban_suite, status.campaign_id)
    assert sorted(r.index for r in rows) == list(range(1, len(rows) + 1))
    assert len({r.test_case.id for r in rows}) == len(rows)
    # poses off the lane map are stored invalid and never reach the host; every other one is judged, exactly N
    unrun = [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_INVALID]
    assert all("off the road" in r.reason for r in unrun), [r.reason for r in unrun]
    judged = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID]
    assert len(judged) == wanted
    for row in judged:
        assert row.verdict in (oracle_pb2.VERDICT_KIND_PASS, oracle_pb2.VERDICT_KIND_FAIL)
        assert row.reason and row.steps == 1
        if row.reason.startswith("irrelevant:"):
            assert row.margin == 2.0
        else:
            assert 0.0 <= row.margin <= 1.0 and "realistic image" in row.reason
        assert len(row.descriptors) > 7  # the oracle's scalars, then the encoder's features of the realistic image
    assert host.calls.count("simGetImages") == wanted  # one capture (Scene + Segmentation) per judged pose
