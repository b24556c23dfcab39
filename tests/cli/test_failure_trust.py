"""Trust (issue 32): on a stochastic subject (a slippery copy of taxi_large, Gymnasium's rainy Taxi), each failure
rerun with fresh seeds carries a failure probability with its Wilson interval and a flaky label."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc, oracle_pb2
from common.seeding import episode_seed
from common.server import client_channel

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = """campaign:
  name: trust-rainy-taxi
  subject: taxi_rainy
  model: taxi-qlearning
  strategy: random
  seed: 11
  budget: {max_executions: 40}
  batch_size: 20
  parallelism: 20
"""


@pytest.fixture(scope="module")
def rainy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalSuite, Path]]:
    folder = tmp_path_factory.mktemp("rainy")
    subject = yaml.safe_load((ROOT / "subjects" / "taxi" / "taxi_large.yaml").read_text())
    subject.update(subject="taxi_rainy", deterministic=False, env_kwargs={"end_on_fault": True, "slip": 0.3})
    (folder / "subjects").mkdir()
    (folder / "subjects" / "taxi_rainy.yaml").write_text(yaml.safe_dump(subject))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GAUNTLET_SUBJECT_PATH", str(folder / "subjects"))  # every service process inherits it
        local = LocalSuite(
            store_url=f"sqlite:///{folder / 'store.db'}", log_dir=folder / "logs", report_root=folder / "reports"
        )
        local.start()
    try:
        yield local, folder
    finally:
        local.stop()


def gauntlet(suite: LocalSuite, *args: str) -> subprocess.CompletedProcess[str]:
    endpoints = ("--generator", suite.endpoint("generator"), "--analysis", suite.endpoint("analysis"))
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args, *endpoints],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_each_failure_of_a_stochastic_subject_carries_a_failure_probability(
    rainy: tuple[LocalSuite, Path],
) -> None:
    suite, folder = rainy
    (folder / "c.yaml").write_text(CAMPAIGN)
    out = gauntlet(suite, "run", str(folder / "c.yaml"), "--id", "trust-1")
    assert out.returncode == 0, out.stdout + out.stderr
    generator = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    listed = [r.execution for r in generator.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id="trust-1"))]
    failing = [e.test_case.id for e in listed if e.verdict == oracle_pb2.VERDICT_KIND_FAIL]
    assert failing, "the slippery taxi makes the agent fail some of 40 random inputs"
    answers = []
    for test_case_id in failing[:3]:
        request = generator_pb2.RerunExecutionRequest(campaign_id="trust-1", test_case_id=test_case_id, runs=20)
        r = generator.RerunExecution(request, timeout=600)
        answers.append(r)
        assert r.runs == 20 == len(r.verdicts) == len(r.seeds) and r.judged == 20
        assert r.failures == list(r.verdicts).count("fail")
        assert 0 <= r.failure_probability_low <= r.failure_probability <= r.failure_probability_high <= 1
        assert r.failure_probability == pytest.approx(r.failures / r.judged)
        assert r.flaky == (0 < r.failures < r.judged)
        assert len(set(r.seeds)) == 20 and episode_seed(11, test_case_id, 0) not in r.seeds  # fresh seeds
        assert not r.subject_deterministic
    assert any(r.flaky for r in answers), [(r.failures, r.judged) for r in answers]
    # the same reruns again: the same seeds and verdicts (fresh, yet reproducible)
    again = generator.RerunExecution(
        generator_pb2.RerunExecutionRequest(campaign_id="trust-1", test_case_id=failing[0], runs=20), timeout=600
    )
    assert list(again.verdicts) == list(answers[0].verdicts)
    out = gauntlet(suite, "rerun", "trust-1", failing[0], "--runs", "20")
    assert out.returncode == 0, out.stdout + out.stderr
    line = re.search(
        rf"{failing[0]}: failed (\d+) of 20 reruns with fresh seeds, p\(fail\) [\d.]+ % \[[\d.]+, [\d.]+\]", out.stdout
    )
    assert line and int(line.group(1)) == answers[0].failures, out.stdout
    assert ("flaky" in out.stdout) == answers[0].flaky


def test_every_distinct_failure_of_the_stochastic_campaign_gets_its_probability(
    rainy: tuple[LocalSuite, Path],
) -> None:
    """Not only the first few: `gauntlet rerun --first N` with N the number of distinct failing inputs prints one
    probability with its interval per distinct failure, in asking order, and no line for a repeated input."""
    suite, folder = rainy
    generator = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    if not any(
        c.campaign_id == "trust-1" for c in generator.ListCampaigns(generator_pb2.ListCampaignsRequest()).campaigns
    ):
        (folder / "c.yaml").write_text(CAMPAIGN)
        assert gauntlet(suite, "run", str(folder / "c.yaml"), "--id", "trust-1").returncode == 0
    listed = sorted(
        (r.execution for r in generator.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id="trust-1"))),
        key=lambda e: e.index,
    )
    distinct: dict[str, str] = {}  # input -> its first failure's id
    for e in listed:
        if e.verdict == oracle_pb2.VERDICT_KIND_FAIL:
            distinct.setdefault(str(sorted((k, str(v)) for k, v in e.test_case.values.items())), e.test_case.id)
    assert len(distinct) >= 2, distinct
    out = gauntlet(suite, "rerun", "trust-1", "--first", str(len(distinct)), "--runs", "10")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = re.findall(
        r"^(t\d{7}): failed (\d+) of (\d+) reruns with fresh seeds, p\(fail\) ([\d.]+) % \[([\d.]+), ([\d.]+)\]",
        out.stdout,
        re.M,
    )
    assert [line[0] for line in lines] == list(distinct.values()), out.stdout
    for _, failed, judged, p, low, high in lines:
        assert int(judged) == 10 and float(p) == pytest.approx(100 * int(failed) / 10, abs=0.05)
        assert float(low) <= float(p) <= float(high)
