"""DESIGNATE's urban subject through the real service processes: the translator and the DNN served by name,
random campaigns with and without the translator, and determinism of images and verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    analysis_pb2,
    analysis_pb2_grpc,
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    oracle_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
    translator_pb2,
    translator_pb2_grpc,
)
from common.server import client_channel
from common.tensor import from_tensor, to_tensor
from generator_service.config import CampaignConfig
from tests.system.test_services_e2e import executions, run_campaign

POSE = {"x": 14.0, "y": 1.5, "yaw": 8.0}
SIGNALS = ["image", "realistic_image", "prediction_simulated", "prediction_realistic", "features"]


def _stub(suite: LocalSuite, name: str, cls: type) -> object:
    return cls(client_channel(suite.endpoint(name)))


def test_translator_serves_pix2pix_by_name_and_refuses_a_wrong_shape(suite: LocalSuite) -> None:
    tr = _stub(suite, "translator", translator_pb2_grpc.TranslatorServiceStub)
    listed = {t.name: t for t in tr.ListTranslators(translator_pb2.ListTranslatorsRequest()).translators}
    assert listed["pix2pix-urban"].input_kind == "label_map"
    maps = np.zeros((3, 64, 128), dtype=np.uint8)
    maps[:, 40:] = 0  # road below, sky above
    maps[:, :40] = 4
    out = from_tensor(
        tr.Translate(translator_pb2.TranslateRequest(translator="pix2pix-urban", images=to_tensor(maps))).images
    )
    assert out.shape == (3, 64, 128, 3) and out.dtype == np.uint8
    with pytest.raises(grpc.RpcError) as err:
        tr.Translate(translator_pb2.TranslateRequest(translator="pix2pix-urban", images=to_tensor(maps[:, :32])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "takes uint8 label maps of shape (batch, 64, 128)" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        tr.Translate(translator_pb2.TranslateRequest(translator="pix2pix-urban", images=to_tensor(maps + 9)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "outside its class table" in err.value.details()


def test_dnn_serves_label_maps_and_features_and_refuses_a_wrong_shape(suite: LocalSuite) -> None:
    agent = _stub(suite, "agent", agent_pb2_grpc.AgentServiceStub)
    info = agent.DescribeModel(agent_pb2.DescribeModelRequest(name="segnet-urban"))
    assert list(info.observation_space.shape) == [64, 128, 3] and list(info.action_space.shape) == [64, 128]
    images = np.full((2, 64, 128, 3), 120, dtype=np.uint8)
    ref = common_pb2.ModelRef(name="segnet-urban")
    labels = from_tensor(agent.Act(agent_pb2.ActRequest(model=ref, observations=to_tensor(images))).actions)
    assert labels.shape == (2, 64, 128) and labels.dtype == np.uint8
    features = from_tensor(agent.Embed(agent_pb2.EmbedRequest(model=ref, images=to_tensor(images))).features)
    assert features.shape[0] == 2 and features.dtype == np.float32
    with pytest.raises(grpc.RpcError) as err:
        agent.Act(agent_pb2.ActRequest(model=ref, observations=to_tensor(images[:, :32])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "(batch, 64, 128, 3)" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        agent.Embed(agent_pb2.EmbedRequest(model=common_pb2.ModelRef(name="cartpole-ppo"), images=to_tensor(images)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "no image encoder" in err.value.details()


def _run_pose(suite: LocalSuite, translator: str) -> tuple[common_pb2.EpisodeResult, oracle_pb2.Verdict]:
    sim = _stub(suite, "simulator", simulator_pb2_grpc.SimulatorServiceStub)
    case = common_pb2.TestCase(id="pose", values={k: common_pb2.Value(real=v) for k, v in POSE.items()})
    oracle = _stub(suite, "oracle", oracle_pb2_grpc.OracleServiceStub)
    info = next(o for o in oracle.ListOracles(oracle_pb2.ListOraclesRequest()).oracles if o.name == "iou_car")
    request = simulator_pb2.RunEpisodesRequest(
        subject="urban",
        model=common_pb2.ModelRef(name="segnet-urban"),
        test_cases=[case],
        trace=common_pb2.TraceSpec(signals=[*info.required_signals, "image", "realistic_image"]),
        observation_translator=translator,
    )
    (reply,) = list(sim.RunEpisodes(request, timeout=120))
    (verdict,) = oracle.Evaluate(oracle_pb2.EvaluateRequest(oracle="iou_car", episodes=[reply.result])).verdicts
    return reply.result, verdict


def test_same_pose_same_images_and_verdict_through_the_services(suite: LocalSuite) -> None:
    first, v1 = _run_pose(suite, "")
    second, v2 = _run_pose(suite, "")
    assert not first.error
    for name in SIGNALS:
        assert first.signals[name] == second.signals[name], name
    assert from_tensor(first.signals["realistic_image"]).shape == (64, 128, 3)
    assert (v1.verdict, v1.margin, list(v1.descriptors), v1.reason) == (
        v2.verdict,
        v2.margin,
        list(v2.descriptors),
        v2.reason,
    )
    no_gan, verdict = _run_pose(suite, "none")
    assert from_tensor(no_gan.signals["realistic_image"]).shape == (0,)
    assert no_gan.signals["image"] == first.signals["image"]
    assert verdict.margin == 2.0 or "simulator image" in verdict.reason


def _random_campaign(suite: LocalSuite, translator: str) -> generator_pb2.CampaignStatus:
    key = f"random{translator}"
    if key not in _CAMPAIGNS:
        config = CampaignConfig(
            name=f"designate-random{translator}",
            subject="urban",
            model="segnet-urban",
            strategy="random",
            seed=3,
            budget={"max_executions": 24},
            batch_size=12,
            parallelism=12,
            observation_translator=translator,
        )
        _CAMPAIGNS[key] = run_campaign(suite, config)
    return _CAMPAIGNS[key]


@pytest.mark.parametrize("translator", ["", "none"])
def test_random_campaign_on_the_urban_subject(suite: LocalSuite, translator: str) -> None:
    status = _random_campaign(suite, translator)
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    rows = executions(suite, status.campaign_id)
    # the random strategy draws uniformly from the box: poses off the road are stored as invalid, never run
    off_road = [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_INVALID]
    assert off_road and all("off the road" in r.reason for r in off_road)
    rows = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID]
    assert len(rows) == 24
    judged_on = "realistic image" if translator == "" else "simulator image"
    for row in rows:
        assert row.verdict in (oracle_pb2.VERDICT_KIND_PASS, oracle_pb2.VERDICT_KIND_FAIL)
        if row.reason.startswith("irrelevant:"):
            assert row.margin == 2.0 and row.verdict == oracle_pb2.VERDICT_KIND_PASS
        else:
            assert 0.0 <= row.margin <= 1.0 and judged_on in row.reason
        assert len(row.descriptors) > 7  # the 7 scalars, then the encoder's feature vector
    gen = _stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    assert (
        gen.GetCampaign(
            generator_pb2.GetCampaignRequest(campaign_id=status.campaign_id)
        ).status.spec.observation_translator
        == translator
    )


def _archive(suite: LocalSuite, campaign_id: str, images: bool) -> tuple[generator_pb2.ArchiveSummary, list]:
    gen = _stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    request = generator_pb2.ListArchiveRequest(campaign_id=campaign_id, include_images=images)
    first, *rest = list(gen.ListArchive(request, timeout=300))
    assert first.WhichOneof("item") == "summary" and all(r.WhichOneof("item") == "member" for r in rest)
    return first.summary, [r.member for r in rest]


_CAMPAIGNS: dict[str, generator_pb2.CampaignStatus] = {}  # small campaigns run once, shared by several tests


def _designate_campaign(suite: LocalSuite, variant: str) -> generator_pb2.CampaignStatus:
    if variant not in _CAMPAIGNS:
        config = CampaignConfig(
            name=f"designate-{variant}",
            subject="urban",
            model="segnet-urban",
            strategy="designate",
            # 3 x 6 seeds and 6 generations: with urban's minimum car share (issue 30) 2 x 6 and 2 generations kept a
            # single member, and the tests need a few
            strategy_params={"variant": variant, "seed_populations": 3, "population_size": 6, "generations": 6},
            oracle="iou_car_pix" if variant == "pix" else "",
            seed=5,
            budget={"max_executions": 1000},
            batch_size=12,
            parallelism=12,
        )
        _CAMPAIGNS[variant] = run_campaign(suite, config)
    return _CAMPAIGNS[variant]


@pytest.mark.parametrize("variant", ["designate", "pix"])
def test_designate_campaign_keeps_its_archive_and_list_archive_returns_it_with_images(
    suite: LocalSuite, variant: str
) -> None:
    from common.image_diversity import pixel_digest
    from subjects.urban.metrics import class_iou

    status = _designate_campaign(suite, variant)
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    assert status.stop_reason == "strategy_exhausted"
    rows = executions(suite, status.campaign_id)
    assert len(rows) == 3 * 6 + 6 * 6  # seeding, then six generations of N; off-road poses stored invalid
    run = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID]
    assert run and all(len(r.descriptors) == 7 + (512 if variant == "pix" else 384) for r in run)

    summary, members = _archive(suite, status.campaign_id, images=False)
    assert (summary.strategy, summary.variant, summary.members) == ("designate", variant, len(members))
    assert summary.distance == ("pixels" if variant == "pix" else "features")
    assert summary.t_diversity_source == "seed populations" and summary.diversity_percentile == 50.0
    assert summary.t_diversity > 0 and not summary.HasField("t_relevance")
    assert members, "the archive holds at least the best relevant seed"
    stored = {r.test_case.id: r for r in rows}
    for m in members:  # only relevant, judged images; each is a stored execution of the campaign
        assert m.f_accuracy < 2.0 and m.execution.margin == m.f_accuracy
        assert m.execution == stored[m.execution.test_case.id]
        assert not m.HasField("image")
    again = _archive(suite, status.campaign_id, images=False)
    assert again == (summary, members)  # the replay is deterministic
    if variant == "designate":  # `gauntlet designate archive` prints the same, one JSON line each
        from tests.cli.test_cli import gauntlet

        out = gauntlet("designate", "archive", status.campaign_id, "--generator", suite.endpoint("generator"))
        assert out.returncode == 0, out.stderr
        head, *lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert head["t_diversity_source"] == "seed populations" and head["members"] == len(members)
        assert [(x["test_case"], x["f_accuracy"]) for x in lines] == [
            (m.execution.test_case.id, m.f_accuracy) for m in members
        ]

    _, rendered = _archive(suite, status.campaign_id, images=True)
    assert [m.execution for m in rendered] == [m.execution for m in members]
    for m in rendered:  # the re-rendered images give back the stored verdict
        image, truth, predicted = (from_tensor(t) for t in (m.image, m.label_map, m.prediction))
        assert image.shape == (64, 128, 3) and image.dtype == np.uint8
        assert truth.shape == predicted.shape == (64, 128) and truth.dtype == np.uint8
        assert from_tensor(m.simulator_image).shape == (64, 128, 3)
        assert from_tensor(m.features).shape == (384,)
        iou = class_iou(truth, predicted, 5)
        assert (0.0 if np.isnan(iou) else iou) == pytest.approx(m.f_accuracy, abs=1e-9)
        vector = np.asarray(m.execution.descriptors[7:])
        expected = pixel_digest(image) if variant == "pix" else from_tensor(m.features)
        np.testing.assert_allclose(vector, expected, rtol=1e-6)


def test_list_archive_refuses_a_strategy_without_an_archive_and_an_unknown_campaign(suite: LocalSuite) -> None:
    config = CampaignConfig(
        name="designate-random-archive",
        subject="urban",
        model="segnet-urban",
        strategy="random",
        seed=4,
        budget={"max_executions": 6},
        batch_size=6,
    )
    status = run_campaign(suite, config)
    gen = _stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    with pytest.raises(grpc.RpcError) as err:
        list(gen.ListArchive(generator_pb2.ListArchiveRequest(campaign_id=status.campaign_id)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ran strategy 'random', which keeps no archive" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        list(gen.ListArchive(generator_pb2.ListArchiveRequest(campaign_id="no-such-campaign")))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def _render_report(suite: LocalSuite, *campaign_ids: str) -> tuple[dict, str]:
    analysis = _stub(suite, "analysis", analysis_pb2_grpc.AnalysisServiceStub)
    reply = analysis.RenderReport(
        analysis_pb2.RenderReportRequest(campaign_ids=list(campaign_ids), output_dir="designate"), timeout=300
    )
    return json.loads(reply.json), Path(reply.html_path).read_text()


def test_report_of_a_designate_campaign_shows_its_archive_and_an_image_grid(suite: LocalSuite) -> None:
    from analysis_service.designate_archive_report import fetch_archive
    from common.image_diversity import mean_pairwise_distance

    status = _designate_campaign(suite, "designate")
    summary, members = _archive(suite, status.campaign_id, images=False)
    data, page = _render_report(suite, status.campaign_id)
    archive = data["campaigns"][0]["archive"]
    assert archive["source"] == "archive" and archive["accuracy_name"] == "IoU_car"
    assert archive["members"] == summary.members == len(members)
    assert archive["summary"]["variant"] == "designate"
    assert archive["summary"]["t_diversity"] == pytest.approx(summary.t_diversity)
    assert archive["summary"]["t_diversity_source"] == "seed populations"
    assert archive["member_indices"] == [m.execution.index for m in members]
    accuracy = [m.f_accuracy for m in members]
    assert archive["accuracy"]["n"] == len(members)
    assert archive["accuracy"]["median"] == pytest.approx(float(np.median(accuracy)))
    assert archive["accuracy"]["min"] == pytest.approx(min(accuracy))
    rows = executions(suite, status.campaign_id)
    relevant = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID and r.margin < 2.0]
    assert archive["relevant_images"] == len(relevant) >= len(members)
    # the designate oracle stores features for every execution; digests come from the re-rendered members
    assert archive["feature_diversity"]["source"] == "stored"
    assert archive["feature_diversity"]["members"] == len(members)
    assert archive["rendered"] == min(len(members), 24)
    assert archive["pixel_diversity"]["source"] == "re-rendered"
    assert len(members) >= 2  # a diversity, and the cap of 1 below leaves some out
    features = [np.asarray(m.execution.descriptors[7:]) for m in members]
    assert archive["feature_diversity"]["value"] == pytest.approx(mean_pairwise_distance(features, "features"))
    assert 0.0 < archive["pixel_diversity"]["value"] <= 1.0
    assert "<h3>Archive</h3>" in page and 'aria-label="archive image grid, designate-designate"' in page
    assert 'alt="IoU_car over the archive, designate-designate"' in page
    # a cap below the archive's size: only the first members are re-rendered, the rest still counted
    gen = _stub(suite, "generator", generator_pb2_grpc.GeneratorServiceStub)
    capped = fetch_archive(gen, status.campaign_id, [], "", max_images=1)
    assert capped is not None and capped.indices == archive["member_indices"]
    assert [r.index for r in capped.rendered] == archive["member_indices"][:1]
    bare = fetch_archive(gen, status.campaign_id, [], "", max_images=0)
    assert bare is not None and bare.rendered == [] and bare.accuracy == accuracy


def test_report_of_a_random_image_campaign_shows_its_relevant_images_and_a_cartpole_one_no_archive(
    suite: LocalSuite,
) -> None:
    status = _random_campaign(suite, "")
    cartpole = run_campaign(
        suite,
        CampaignConfig(
            name="designate-no-archive",
            subject="cartpole",
            model="cartpole-ppo",
            seed=1,
            budget={"max_executions": 8},
            batch_size=8,
        ),
    )
    data, page = _render_report(suite, status.campaign_id, cartpole.campaign_id)
    images, other = data["campaigns"]
    rows = executions(suite, status.campaign_id)
    relevant = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID and r.margin < 2.0]
    assert images["archive"]["source"] == "relevant images"
    assert images["archive"]["members"] == images["archive"]["relevant_images"] == len(relevant)
    assert images["archive"]["rendered"] == 0 and images["archive"]["pixel_diversity"]["value"] is None
    assert "archive" not in other
    assert page.count("<h3>Relevant images (no archive") == 1 and "<h3>Archive</h3>" not in page
    assert "archive image grid" not in page


def test_compare_designate_with_random_gives_the_rq1_table(suite: LocalSuite) -> None:
    designate, random = _designate_campaign(suite, "designate"), _random_campaign(suite, "")
    _, members = _archive(suite, designate.campaign_id, images=False)
    analysis = _stub(suite, "analysis", analysis_pb2_grpc.AnalysisServiceStub)
    reply = analysis.Compare(
        analysis_pb2.CompareRequest(campaign_ids=[designate.campaign_id, random.campaign_id], output_dir="designate"),
        timeout=300,
    )
    data = json.loads(reply.json)
    rows = {r["strategy"]: r for r in data["rq1"]}
    assert set(rows) == {"designate", "random"} and data["baseline"] == "random"
    assert rows["designate"]["source"] == "archive" and rows["random"]["source"] == "relevant images"
    assert rows["designate"]["images_per_campaign"] == len(members)
    assert rows["designate"]["accuracy"]["median"] == pytest.approx(float(np.median([m.f_accuracy for m in members])))
    rows_random = executions(suite, random.campaign_id)
    relevant = [r for r in rows_random if r.verdict != oracle_pb2.VERDICT_KIND_INVALID and r.margin < 2]
    assert rows["random"]["images_per_campaign"] == len(relevant)  # no T_relevance in force: the subject's filter
    test = rows["designate"]["versus_baseline"]
    a = [m.f_accuracy for m in members]
    b = [r.margin for r in relevant]
    expected = float(np.mean([(x > y) + 0.5 * (x == y) for x in a for y in b]))
    assert test["a12"] == pytest.approx(expected) and 0.0 <= test["p_value"] <= 1.0
    assert "versus_baseline" not in rows["random"]
    keys = [m["key"] for m in data["metrics"]]
    assert "archive_median_accuracy" in keys and "feature_diversity" in keys
    page = Path(reply.html_path).read_text()
    assert "Archives (DESIGNATE&#x27;s RQ1)" in page or "Archives (DESIGNATE's RQ1)" in page
