"""From a failure to a fix (issue 32): every failure names its id, reason and replay command in the CLI, the HTML
and the JSON; `gauntlet replay` runs a stored execution again with its episode seeds, says whether the verdict is the
same (exit 1 when not) and writes the episode as an animation through the simulator's RenderEpisode."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
import yaml
from PIL import Image, ImageSequence

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import (
    analysis_pb2,
    analysis_pb2_grpc,
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    oracle_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.seeding import episode_seed
from common.space import value_from_proto

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = """campaign:
  name: lifecycle-cartpole
  subject: cartpole
  model: cartpole-ppo
  strategy: random
  seed: 7
  budget: {max_executions: 20}
  batch_size: 10
  parallelism: 10
"""


def gauntlet(suite: LocalSuite, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    endpoints = ("--generator", suite.endpoint("generator"), "--analysis", suite.endpoint("analysis"))
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args, *endpoints],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def failed_campaign(suite: LocalSuite, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict]:
    """A stored CartPole campaign with a failure: (campaign id, `gauntlet run` output, its JSON report)."""
    folder = tmp_path_factory.mktemp("lifecycle")
    (folder / "c.yaml").write_text(CAMPAIGN)
    out = gauntlet(suite, "run", str(folder / "c.yaml"), "--id", "lifecycle-1")
    assert out.returncode == 0, out.stdout + out.stderr
    json_path = re.search(r"^\s+(\S+report-lifecycle-1\.json)$", out.stdout, re.M)
    assert json_path, out.stdout
    return "lifecycle-1", out.stdout, json.loads(Path(json_path.group(1)).read_text())


def test_every_failure_names_its_id_reason_and_replay_command(failed_campaign: tuple[str, str, dict]) -> None:
    campaign_id, printed, report = failed_campaign
    failures = report["campaigns"][0]["failures"]
    assert failures, "the demo campaign's seed gives a failure"
    for f in failures:
        assert re.fullmatch(r"t\d{7}", f["test_case_id"])
        assert f["reason"], "the oracle's reason travels into the JSON"
        assert f["replay"] == f"gauntlet replay {campaign_id} {f['test_case_id']}"
        assert f["episode_seed"] == episode_seed(7, f["test_case_id"], 0)
        # the CLI line: "failure t0000002: pole angle left its limit at step 22", then the replay command
        assert f"failure {f['test_case_id']}: {f['reason']}" in printed
        assert f"gauntlet replay {campaign_id} {f['test_case_id']}" in printed
    html = Path(str(report_html(printed))).read_text()
    for f in failures:
        assert f"<code>{f['test_case_id']}</code>" in html
        assert f["reason"] in html
        assert f"gauntlet replay {campaign_id} {f['test_case_id']}" in html
    assert "first failure" in printed and failures[0]["test_case_id"] in printed


def frames_in(path: Path) -> int:
    with Image.open(path) as image:
        return sum(1 for _ in ImageSequence.Iterator(image))


def report_html(printed: str) -> str:
    found = re.search(r"^report: (\S+\.html)$", printed, re.M)
    assert found, printed
    return found.group(1)


def test_replay_reproduces_the_verdict_and_writes_an_animation(
    suite: LocalSuite, failed_campaign: tuple[str, str, dict], tmp_path: Path
) -> None:
    campaign_id, _, report = failed_campaign
    failure = report["campaigns"][0]["failures"][0]
    gif = tmp_path / "failure.gif"
    out = gauntlet(suite, "replay", campaign_id, failure["test_case_id"], "--render", str(gif))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "same verdict" in out.stdout
    assert f"episode seed {failure['episode_seed']}" in out.stdout
    assert f"replayed fail: {failure['reason']}" in out.stdout
    assert frames_in(gif) > 10
    with Image.open(gif) as image:
        assert image.size[0] >= 100
    webp = tmp_path / "failure.webp"
    out = gauntlet(suite, "replay", campaign_id, failure["test_case_id"], "--render", str(webp), "--max-frames", "12")
    assert out.returncode == 0, out.stdout + out.stderr
    assert 6 <= frames_in(webp) <= 12  # the frame limit thins the episode, it does not cut its end
    # a video: H.264 in MP4, 20 frames a second, the same frames as the GIF (padded to even sizes)
    import imageio_ffmpeg

    mp4 = tmp_path / "failure.mp4"
    out = gauntlet(suite, "replay", campaign_id, failure["test_case_id"], "--render", str(mp4))
    assert out.returncode == 0, out.stdout + out.stderr
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(mp4))
    sent = re.search(r"animation: \S+ \((\d+) frames of repetition", out.stdout)
    assert sent and frames == int(sent.group(1)) > 10, out.stdout  # every frame (a GIF merges repeated ones)
    assert seconds == pytest.approx(frames / 20, abs=0.1)
    meta = next(imageio_ffmpeg.read_frames(str(mp4)))
    with Image.open(gif) as image:
        assert meta["codec"] == "h264" and meta["size"] == (
            image.size[0] + image.size[0] % 2,
            image.size[1] + image.size[1] % 2,
        )


def test_replay_says_when_the_verdict_differs(suite: LocalSuite, failed_campaign: tuple[str, str, dict]) -> None:
    campaign_id, _, report = failed_campaign
    failing = {f["test_case_id"] for f in report["campaigns"][0]["failures"]}
    passing = next(f"t{i:07d}" for i in range(1, 21) if f"t{i:07d}" not in failing)
    out = gauntlet(suite, "replay", campaign_id, passing)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "replayed pass" in out.stdout and "same verdict" in out.stdout
    # the store says it failed: the replay must notice, exit 1 and say so (the row is put back afterwards)
    set_verdict(suite, campaign_id, passing, "fail")
    try:
        out = gauntlet(suite, "replay", campaign_id, passing)
    finally:
        set_verdict(suite, campaign_id, passing, "pass")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the verdict differs" in out.stdout
    assert "gave pass, the campaign stored fail" in out.stderr
    assert "Traceback" not in out.stderr


def set_verdict(suite: LocalSuite, campaign_id: str, test_case_id: str, verdict: str) -> None:
    engine = sa.create_engine(suite.store_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE executions SET verdict = :v WHERE campaign_id = :c AND test_case_id = :t"),
            {"v": verdict, "c": campaign_id, "t": test_case_id},
        )
    engine.dispose()


def test_replay_of_an_unknown_id_names_stored_ones(suite: LocalSuite, failed_campaign: tuple[str, str, dict]) -> None:
    campaign_id, _, _ = failed_campaign
    out = gauntlet(suite, "replay", campaign_id, "t9999999")
    assert out.returncode == 2
    assert "has no execution 't9999999'" in out.stderr and "t0000001" in out.stderr
    out = gauntlet(suite, "replay", campaign_id, "t0000001", "--render", "x.mov")
    assert out.returncode == 2 and "must end in .gif, .webp or .mp4" in out.stderr


def test_export_keeps_the_failures_as_a_regression_campaign(
    suite: LocalSuite, failed_campaign: tuple[str, str, dict], tmp_path: Path
) -> None:
    campaign_id, _, report = failed_campaign
    failures = report["campaigns"][0]["failures"]
    regression = tmp_path / "reg.yaml"
    out = gauntlet(suite, "export", campaign_id, "--failures", "--out", str(regression))
    assert out.returncode == 0, out.stdout + out.stderr
    data = yaml.safe_load(regression.read_text())["campaign"]
    assert data["strategy"] == "replay" and data["model"] == "cartpole-ppo"
    cases = data["strategy_params"]["cases"]
    assert [c["id"] for c in cases] == [f["test_case_id"] for f in failures]
    assert [c["episode_seed"] for c in cases] == [f["episode_seed"] for f in failures]
    # against the same model every input fails again, under its own seed: exit 1 naming the original ids
    out = gauntlet(suite, "run", str(regression), "--id", "lifecycle-regression-1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"{len(cases)} of {len(cases)} inputs still fail" in out.stderr
    for f in failures:
        assert f"{f['test_case_id']} ({f['reason']})" in out.stderr
    # another CartPole agent of the zoo passes these inputs: exit 0
    out = gauntlet(
        suite, "export", campaign_id, "--failures", "--out", str(regression), "--model", "cartpole-ppo-seed1"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    out = gauntlet(suite, "run", str(regression), "--id", "lifecycle-regression-2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"regression: all {len(cases)} inputs pass" in out.stdout
    # an edited seed is refused before anything runs, naming the case
    text = regression.read_text().replace(f"episode_seed: {cases[0]['episode_seed']}", "episode_seed: 1")
    regression.write_text(text)
    out = gauntlet(suite, "run", str(regression), "--id", "lifecycle-regression-3")
    assert out.returncode == 2 and f"case {cases[0]['id']}: episode_seed 1" in out.stderr


def test_shrunk_failures_still_fail_under_their_seed_and_are_no_farther_from_nominal(
    suite: LocalSuite, failed_campaign: tuple[str, str, dict]
) -> None:
    campaign_id, _, report = failed_campaign
    generator = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(suite.endpoint("generator")))
    simulator = simulator_pb2_grpc.SimulatorServiceStub(grpc.insecure_channel(suite.endpoint("simulator")))
    oracle = oracle_pb2_grpc.OracleServiceStub(grpc.insecure_channel(suite.endpoint("oracle")))
    failures = report["campaigns"][0]["failures"]
    for f in failures:
        request = generator_pb2.ShrinkExecutionRequest(campaign_id=campaign_id, test_case_id=f["test_case_id"])
        s = generator.ShrinkExecution(request, timeout=600)
        assert s.original.test_case.id == f["test_case_id"]
        assert s.shrunk.verdict == oracle_pb2.VERDICT_KIND_FAIL
        assert s.shrunk_distance <= s.original_distance + 1e-12
        assert 0 < s.executions <= 60
        assert set(s.moved) <= set(s.nominal)
        origin = s.shrunk.test_case.seed_origin
        assert (origin.campaign_seed, origin.test_case_id) == (7, f["test_case_id"])
        # independently: the shrunk input fails when the simulator runs it (any request seed: its origin decides)
        signals = next(
            o.required_signals
            for o in oracle.ListOracles(oracle_pb2.ListOraclesRequest()).oracles
            if o.name == "cartpole_balance"
        )
        run = simulator_pb2.RunEpisodesRequest(
            request_id=f"check/{f['test_case_id']}",
            subject="cartpole",
            seed=12345,
            repetitions=1,
            trace=common_pb2.TraceSpec(signals=list(signals)),
            test_cases=[s.shrunk.test_case],
        )
        run.model.name = "cartpole-ppo"
        episodes = [r.result for r in simulator.RunEpisodes(run, timeout=120)]
        assert episodes[0].seed == f["episode_seed"]
        verdict = oracle.Evaluate(oracle_pb2.EvaluateRequest(oracle="cartpole_balance", episodes=episodes)).verdicts[0]
        assert verdict.verdict == oracle_pb2.VERDICT_KIND_FAIL and verdict.reason == s.shrunk.reason
    # each answer was stored: ListShrinks gives it back as ShrinkExecution answered it
    listed = generator.ListShrinks(generator_pb2.ListShrinksRequest(campaign_id=campaign_id)).shrinks
    assert [s.original.test_case.id for s in listed] == sorted(f["test_case_id"] for f in failures)
    assert all(s.shrunk.verdict == oracle_pb2.VERDICT_KIND_FAIL for s in listed)
    # a passing execution is no failure to shrink
    failing = {f["test_case_id"] for f in failures}
    passing = next(f"t{i:07d}" for i in range(1, 21) if f"t{i:07d}" not in failing)
    out = gauntlet(suite, "shrink", campaign_id, passing)
    assert out.returncode == 2 and "only a failure can be shrunk" in out.stderr
    out = gauntlet(suite, "shrink", campaign_id, "--first", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{failures[0]['test_case_id']}: {failures[0]['reason']}" in out.stdout
    assert "shrunk    distance" in out.stdout and "still fails:" in out.stdout


def test_a_campaign_shrinks_its_failures_at_its_end_stores_them_and_reports_them_beside_the_originals(
    suite: LocalSuite, tmp_path: Path
) -> None:
    """`gauntlet run --shrink 2` sets the spec's shrink.first (the file's shrink.max_executions stays): the generator
    shrinks the first 2 distinct failures before the campaign completes and stores them; the CLI prints them, and
    the report (HTML and JSON, through ListShrinks) shows each beside its original."""
    campaign = CAMPAIGN.replace("max_executions: 20", "max_executions: 60")
    (tmp_path / "c.yaml").write_text(campaign + "  shrink: {max_executions: 30}\n")
    out = gauntlet(suite, "run", str(tmp_path / "c.yaml"), "--id", "lifecycle-shrink", "--shrink", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    generator = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(suite.endpoint("generator")))
    simulator = simulator_pb2_grpc.SimulatorServiceStub(grpc.insecure_channel(suite.endpoint("simulator")))
    oracle = oracle_pb2_grpc.OracleServiceStub(grpc.insecure_channel(suite.endpoint("oracle")))
    status = generator.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id="lifecycle-shrink")).status
    assert (status.spec.shrink.first, status.spec.shrink.max_executions) == (2, 30)
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED
    failing = [
        r.execution
        for r in generator.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id="lifecycle-shrink"))
        if r.execution.verdict == oracle_pb2.VERDICT_KIND_FAIL
    ]
    assert len(failing) >= 2, "seed 7 gives at least two failures in 60 inputs"
    shrinks = list(generator.ListShrinks(generator_pb2.ListShrinksRequest(campaign_id="lifecycle-shrink")).shrinks)
    first_two = [e.test_case.id for e in sorted(failing, key=lambda e: e.index)][:2]
    assert [s.original.test_case.id for s in shrinks] == first_two
    space = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")).parameter_space
    ranges = {p.name: (p.real.low, p.real.high) for p in space.parameters}
    signals = next(
        o.required_signals
        for o in oracle.ListOracles(oracle_pb2.ListOraclesRequest()).oracles
        if o.name == "cartpole_balance"
    )

    def distance(values: dict) -> float:
        return sum(((values[n] - (lo + hi) / 2) / (hi - lo)) ** 2 for n, (lo, hi) in ranges.items()) ** 0.5

    for s in shrinks:
        original = {k: v.real for k, v in s.original.test_case.values.items()}
        shrunk = {k: v.real for k, v in s.shrunk.test_case.values.items()}
        assert 0 < s.executions <= 30
        assert s.original_distance == pytest.approx(distance(original))
        assert s.shrunk_distance == pytest.approx(distance(shrunk)) and distance(shrunk) <= distance(original) + 1e-12
        # independently: the shrunk input fails when the simulator runs it under the original episode's seed
        case = common_pb2.TestCase()
        case.CopyFrom(s.shrunk.test_case)
        case.seed_origin.campaign_seed, case.seed_origin.test_case_id = 7, s.original.test_case.id
        run = simulator_pb2.RunEpisodesRequest(
            request_id=f"check-stored/{s.original.test_case.id}",
            subject="cartpole",
            seed=999,
            repetitions=1,
            trace=common_pb2.TraceSpec(signals=list(signals)),
            test_cases=[case],
        )
        run.model.name = "cartpole-ppo"
        episodes = [r.result for r in simulator.RunEpisodes(run, timeout=120)]
        assert episodes[0].seed == episode_seed(7, s.original.test_case.id, 0)
        verdict = oracle.Evaluate(oracle_pb2.EvaluateRequest(oracle="cartpole_balance", episodes=episodes)).verdicts[0]
        assert verdict.verdict == oracle_pb2.VERDICT_KIND_FAIL and verdict.reason == s.shrunk.reason
        assert f"{s.original.test_case.id}: {s.original.reason}" in out.stdout  # the CLI prints each
    assert out.stdout.count("still fails:") == 2
    # the store holds them (the table ShrinkExecution writes)
    with sa.create_engine(suite.store_url).connect() as conn:
        stored = conn.execute(
            sa.text("SELECT test_case_id, verdict FROM shrinks WHERE campaign_id = 'lifecycle-shrink'")
        ).all()
    assert sorted(stored) == [(tid, "fail") for tid in first_two]
    # the report: the JSON lists each shrink beside its original, the HTML shows both inputs side by side
    json_path = re.search(r"^\s+(\S+report-lifecycle-shrink\.json)$", out.stdout, re.M)
    assert json_path, out.stdout
    entries = json.loads(Path(json_path.group(1)).read_text())["campaigns"][0]["shrinks"]
    assert [e["test_case_id"] for e in entries] == first_two
    html = Path(report_html(out.stdout)).read_text()
    assert "Shrunk failures" in html
    for e, s in zip(entries, shrinks):
        assert e["original"]["distance"] == pytest.approx(s.original_distance)
        assert e["shrunk"]["distance"] == pytest.approx(s.shrunk_distance)
        assert e["shrunk"]["distance"] <= e["original"]["distance"]
        assert e["shrunk"]["verdict"] == "fail" and e["shrunk"]["reason"] == s.shrunk.reason
        assert e["executions"] == s.executions and e["shrunk"]["moved"] == list(s.moved)
        assert e["original"]["values"] == pytest.approx({k: v.real for k, v in s.original.test_case.values.items()})
        assert e["shrunk"]["values"] == pytest.approx({k: v.real for k, v in s.shrunk.test_case.values.items()})
        assert f"<th>original {e['test_case_id']}</th><th>shrunk</th>" in html
        assert f"shrunk in {e['executions']} executions" in html
        for name, value in e["shrunk"]["values"].items():
            assert f"{value:.4g}" in html and f"{e['original']['values'][name]:.4g}" in html


def test_the_shrink_option_is_range_checked_naming_the_field(suite: LocalSuite, tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CAMPAIGN + "  shrink: {first: 101}\n")
    out = gauntlet(suite, "run", str(tmp_path / "c.yaml"), "--id", "lifecycle-shrink-bad")
    assert out.returncode == 2 and "shrink.first: must be an integer in [0, 100]" in out.stderr, out.stderr
    out = gauntlet(suite, "run", str(tmp_path / "c.yaml"), "--shrink", "0")
    assert out.returncode == 2 and "--shrink must be in [1, 100] (got 0)" in out.stderr, out.stderr
    generator = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(suite.endpoint("generator")))
    spec = generator_pb2.CampaignSpec(
        name="bad-shrink", subject="cartpole", strategy="random", batch_size=1, parallelism=1, repetitions=1
    )
    spec.model.name = "cartpole-ppo"
    spec.budget.max_executions = 1
    spec.shrink.first, spec.shrink.max_executions = 1, 5000
    with pytest.raises(grpc.RpcError) as raised:
        generator.StartCampaign(generator_pb2.StartCampaignRequest(spec=spec), timeout=60)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.shrink.max_executions: must be an integer in [1, 1000]" in str(raised.value.details())
    assert "Traceback" not in str(raised.value.details())


def test_the_report_shows_the_first_failures_as_filmstrips(
    suite: LocalSuite, failed_campaign: tuple[str, str, dict]
) -> None:
    campaign_id, _, report = failed_campaign
    out = gauntlet(suite, "report", campaign_id, "--filmstrips", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(Path(re.search(r"^\s+(\S+\.json)$", out.stdout, re.M).group(1)).read_text())  # type: ignore[union-attr]
    strips = data["campaigns"][0]["filmstrips"]
    first = report["campaigns"][0]["failures"][0]
    assert strips[0]["test_case_id"] == first["test_case_id"] and strips[0]["reason"] == first["reason"]
    assert strips[0]["frames"] > 1 and strips[0]["note"] == ""
    assert all(isinstance(s["cluster"], int) for s in strips)  # one per failure cluster first
    html = Path(report_html(out.stdout)).read_text()
    assert "First failures, replayed" in html
    assert (
        f'alt="frames of {first["test_case_id"]}, from the reset to the end of the episode" src="data:image/png' in html
    )
    out = gauntlet(suite, "report", campaign_id, "--filmstrips", "11")
    assert out.returncode == 2 and "--filmstrips must be in [0, 10]" in out.stderr


PARKING = """campaign:
  name: lifecycle-parking
  subject: parking
  model: parking-her-sac
  strategy: random
  seed: 3
  budget: {max_executions: 12}
  batch_size: 12
  parallelism: 12
"""


def test_replay_of_a_highway_env_parking_failure_writes_its_animation(suite: LocalSuite, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PARKING)
    out = gauntlet(suite, "run", str(tmp_path / "p.yaml"), "--id", "lifecycle-parking-1")
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"failure (t\d{7}): (not parked[^\n]*)", out.stdout)
    assert found, out.stdout
    gif = tmp_path / "parking.gif"
    out = gauntlet(suite, "replay", "lifecycle-parking-1", found.group(1), "--render", str(gif))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "same verdict" in out.stdout and f"replayed fail: {found.group(2)}" in out.stdout
    assert frames_in(gif) > 10


# Prior Random Testing of CartPole (examples/cartpole_prt.yaml), 500 inputs: 6 failures on each of seeds 11 and 12
SEEN_CAMPAIGN = """campaign:
  name: seen-cartpole
  subject: cartpole
  model: cartpole-ppo
  strategy: prt
  strategy_params: {{lam: 20, variant: paper, mapping: hints}}
  seed: {seed}
  budget: {{max_executions: 500}}
  batch_size: 256
  parallelism: 64
"""


def _distinct_failures(generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str) -> list[tuple[str, dict]]:
    """(test case id, values) of the campaign's failures with distinct inputs, in asking order."""
    listed = generator.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=campaign_id), timeout=120)
    failing = sorted((r.execution for r in listed if r.execution.verdict == 2), key=lambda e: e.index)
    out, seen = [], set()
    for e in failing:
        values = {k: value_from_proto(v) for k, v in e.test_case.values.items()}
        key = json.dumps(values, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append((e.test_case.id, values))
    return out


def test_failures_of_a_second_campaign_are_new_or_seen_before_as_they_cluster(
    suite: LocalSuite, tmp_path: Path
) -> None:
    """Two campaigns on one subject and model with different seeds: each distinct failure of the second is seen
    before exactly when a failure of the first falls in its cluster of the pooled clustering."""
    from analysis_service.failure_clusters import encode_inputs, select_clustering

    first = "lifecycle-seen-1"
    for seed, name in ((11, first), (12, "lifecycle-seen-2")):
        (tmp_path / f"{name}.yaml").write_text(SEEN_CAMPAIGN.format(seed=seed))
        out = gauntlet(suite, "run", str(tmp_path / f"{name}.yaml"), "--id", name)
        assert out.returncode == 0, out.stdout + out.stderr
    listed = gauntlet(suite, "failures", "lifecycle-seen-2", "--against", first)
    assert listed.returncode == 0, listed.stdout + listed.stderr

    analysis = analysis_pb2_grpc.AnalysisServiceStub(grpc.insecure_channel(suite.endpoint("analysis")))
    answer = analysis.ClusterFailures(
        analysis_pb2.ClusterFailuresRequest(campaign_id="lifecycle-seen-2", against=[first]), timeout=300
    )
    generator = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(suite.endpoint("generator")))
    mine, theirs = _distinct_failures(generator, "lifecycle-seen-2"), _distinct_failures(generator, first)
    assert [f.test_case_id for f in answer.failures] == [i for i, _ in mine] and len(mine) >= 2
    assert [f.test_case_id for f in answer.earlier] == [i for i, _ in theirs] and theirs
    assert list(answer.against) == [first]
    # the same partition as Indago's clustering of the pooled failing inputs (seed 0, k at most 30)
    found = select_clustering(encode_inputs([v for _, v in mine + theirs]), 0, max_k=30)
    assert [f.cluster for f in list(answer.failures) + list(answer.earlier)] == [int(x) for x in found.labels]
    assert answer.clusters == found.k
    earlier_clusters = {f.cluster: f.test_case_id for f in reversed(answer.earlier)}  # the first of each cluster
    for f in answer.failures:
        assert f.seen_before == (f.cluster in earlier_clusters), f
        if f.seen_before:
            assert (f.seen_campaign_id, f.seen_test_case_id) == (first, earlier_clusters[f.cluster])
        label = "seen before" if f.seen_before else "new"
        assert f"{f.test_case_id} {label}, cluster {f.cluster}" in listed.stdout
        assert f"gauntlet replay lifecycle-seen-2 {f.test_case_id}" in listed.stdout
    seen = sum(f.seen_before for f in answer.failures)
    assert 0 < seen < len(mine), "seeds 11 and 12 give both new and seen-before failures"
    assert f"{len(mine)} distinct failures, {len(mine) - seen} new, {seen} seen before" in listed.stdout

    # by default, every earlier campaign on the subject: the first is among them, the second never is
    default = analysis.ClusterFailures(analysis_pb2.ClusterFailuresRequest(campaign_id="lifecycle-seen-2"), timeout=300)
    assert first in default.against and "lifecycle-seen-2" not in default.against


def test_failures_against_the_campaign_itself_is_refused_naming_the_field(
    suite: LocalSuite, failed_campaign: tuple[str, str, dict]
) -> None:
    out = gauntlet(suite, "failures", failed_campaign[0], "--against", failed_campaign[0])
    assert out.returncode == 2, out.stdout + out.stderr
    assert "against[0]" in out.stderr and "the campaign itself" in out.stderr and "Traceback" not in out.stderr


# A search-based test input on taxi_large, executed alone as trace fuzzing runs traces (agent_steps 0): from the search
# start (row 8, col 6, the passenger at A bound for B) it moves east and west twice, then drops off a passenger it
# does not carry at its 5th action (an illegal drop-off: a fault, which ends the episode); 7 more actions follow.
TRACE = [2, 3, 2, 3, 5, 2, 3, 2, 3, 2, 3, 2]
TRACE_CAMPAIGN = {
    "name": "lifecycle-trace",
    "subject": "taxi_large",
    "model": "taxi-qlearning",
    "strategy": "replay",
    "strategy_params": {
        "cases": [
            {
                "id": "t0000001",
                "campaign_seed": 0,
                "values": {"taxi_row": 8, "taxi_col": 6, "passenger": 0, "destination": 1},
                "action_trace": {"actions": TRACE, "agent_steps": 0},
            }
        ]
    },
    "seed": 0,
    "budget": {"max_executions": 1},
    "batch_size": 1,
    "parallelism": 1,
}


def test_an_action_trace_failure_shrinks_to_its_shortest_failing_prefix(suite: LocalSuite, tmp_path: Path) -> None:
    from analysis_service.shrinks import shrink_entry, shrinks_section

    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"campaign": TRACE_CAMPAIGN}))
    out = gauntlet(suite, "run", str(tmp_path / "t.yaml"), "--id", "lifecycle-trace")
    assert out.returncode == 1 and "1 of 1 inputs still fail" in out.stderr, out.stdout + out.stderr
    generator = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(suite.endpoint("generator")))
    simulator = simulator_pb2_grpc.SimulatorServiceStub(grpc.insecure_channel(suite.endpoint("simulator")))
    oracle = oracle_pb2_grpc.OracleServiceStub(grpc.insecure_channel(suite.endpoint("oracle")))
    request = generator_pb2.ShrinkExecutionRequest(campaign_id="lifecycle-trace", test_case_id="t0000001")
    s = generator.ShrinkExecution(request, timeout=600)
    assert list(s.original.test_case.action_trace.actions) == TRACE
    assert s.shrunk.verdict == oracle_pb2.VERDICT_KIND_FAIL and "illegal pick-up or drop-off" in s.shrunk.reason
    # the fault is the 5th action: its prefix is the shortest that fails, found in a few batched executions
    assert list(s.shrunk.test_case.action_trace.actions) == TRACE[:5]
    assert s.shrunk.test_case.action_trace.agent_steps == 0 and 0 < s.executions <= 60
    assert s.shrunk_distance <= s.original_distance + 1e-12

    # independently: the shrunk input fails when the simulator runs it, and one action fewer passes
    listed = oracle.ListOracles(oracle_pb2.ListOraclesRequest()).oracles
    signals = next(o.required_signals for o in listed if o.name == "taxi_fault")

    def verdict(case: common_pb2.TestCase) -> int:
        run = simulator_pb2.RunEpisodesRequest(
            request_id=f"check-trace/{len(case.action_trace.actions)}",
            subject="taxi_large",
            seed=5,
            repetitions=1,
            trace=common_pb2.TraceSpec(signals=list(signals)),
            test_cases=[case],
        )
        run.model.name = "taxi-qlearning"
        episodes = [r.result for r in simulator.RunEpisodes(run, timeout=120)]
        return oracle.Evaluate(oracle_pb2.EvaluateRequest(oracle="taxi_fault", episodes=episodes)).verdicts[0].verdict

    shrunk = common_pb2.TestCase()
    shrunk.CopyFrom(s.shrunk.test_case)
    assert verdict(shrunk) == oracle_pb2.VERDICT_KIND_FAIL
    del shrunk.action_trace.actions[-1]
    assert verdict(shrunk) == oracle_pb2.VERDICT_KIND_PASS

    # the CLI and the report show both lengths
    printed = gauntlet(suite, "shrink", "lifecycle-trace", "--first", "1")
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert "trace     12 actions -> 5 (the shortest failing prefix found)" in printed.stdout
    stored = generator.ListShrinks(generator_pb2.ListShrinksRequest(campaign_id="lifecycle-trace")).shrinks
    entry = shrink_entry(stored[0], "lifecycle-trace")
    assert (entry["original"]["actions"], entry["shrunk"]["actions"]) == (12, 5)
    html = shrinks_section([entry])
    assert "trace actions 12 → 5" in html
    assert "<tr><td>action trace length</td><td class=num></td><td class=num>12</td><td class=num>5</td></tr>" in html


@pytest.mark.parametrize(
    ("subject", "model"),
    [("lunarlander", "lunarlander-ppo"), ("hopper", "hopper-ppo")],
    ids=["box2d-lunarlander", "mujoco-hopper"],
)
def test_box2d_and_mujoco_subjects_render_their_episodes(suite: LocalSuite, subject: str, model: str) -> None:
    """The frames a replay's animation and the report's filmstrips are made of (RenderEpisode) come for a Box2D and
    a MuJoCo subject too, headless: a MuJoCo scene is drawn through EGL (the simulator's default without a display)."""
    import ctypes.util

    import numpy as np

    from common.space import ParameterSpace
    from common.tensor import from_tensor
    from generator_service.shrink import nominal

    if subject == "hopper" and not os.environ.get("MUJOCO_GL") and ctypes.util.find_library("EGL") is None:
        pytest.skip("no EGL library to draw MuJoCo scenes without a display (install libegl1 and Mesa's EGL)")
    simulator = simulator_pb2_grpc.SimulatorServiceStub(grpc.insecure_channel(suite.endpoint("simulator")))
    described = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=120)
    space = ParameterSpace.from_proto(described.parameter_space)
    request = simulator_pb2.RenderEpisodeRequest(
        subject=subject,
        test_case=space.test_case_to_proto("r0000001", nominal(space)),
        seed=3,
        max_steps=24,
        max_width=240,
    )
    request.model.name = model
    frames, results = [], []
    for item in simulator.RenderEpisode(request, timeout=300):
        if item.HasField("frame"):
            frames.append(from_tensor(item.frame))
        else:
            results.append(item.result)
    assert len(results) == 1 and not results[0].error
    assert len(frames) == results[0].steps + 1 > 10  # the frame after the reset, then one per step
    height, width, channels = frames[0].shape
    assert channels == 3 and 0 < width <= 240 and height > 0 and frames[0].dtype == np.uint8
    assert frames[0].std() > 0 and any(not np.array_equal(frames[0], f) for f in frames[1:])  # a scene that moves
