"""Offline evaluation and a campaign judge the same inputs alike: `gauntlet evaluate --inputs` against the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2
from common.space import case_values
from generator_service.config import CampaignConfig
from tests.conftest import MODEL_ROOT
from tests.system.test_services_e2e import executions, run_campaign

ROOT = Path(__file__).resolve().parents[2]
SEED = 3


def gauntlet(*args: str) -> subprocess.CompletedProcess[str]:
    root = ("--model-root", str(MODEL_ROOT)) if MODEL_ROOT else ()
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args, *root], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_evaluate_gives_a_campaigns_verdicts_input_by_input(suite: LocalSuite, tmp_path: Path) -> None:
    # PRT puts CartPole tests on the domain's boundary, where the bundled agent fails: both verdicts appear in
    # 64 tests, so the comparison below covers failures and passes. The strategy only picks the inputs; offline
    # evaluation reads them from a file, named by the campaign's test-case ids.
    config = CampaignConfig(
        name="offline-vs-campaign",
        subject="cartpole",
        model="cartpole-ppo",
        strategy="prt",
        seed=SEED,
        budget={"max_executions": 64},
        batch_size=16,
        parallelism=8,
    )
    status = run_campaign(suite, config)
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED
    rows = executions(suite, status.campaign_id)
    assert len(rows) == 64 and {r.verdict for r in rows} <= {oracle_pb2.VERDICT_KIND_PASS, oracle_pb2.VERDICT_KIND_FAIL}
    campaign_failed = {r.test_case.id for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_FAIL}
    assert 0 < len(campaign_failed) < len(rows), "the comparison needs both verdicts"

    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text(
        "".join(json.dumps({"id": r.test_case.id, "values": case_values(r.test_case)}) + "\n" for r in rows)
    )
    journal = tmp_path / "journal.jsonl"
    # Episode seeds: the simulator seeds test case `id` of a campaign with seed S by episode_seed(S, id);
    # evaluate --inputs --seed S does the same, so both paths run the very same episodes.
    out = gauntlet(
        "evaluate", "cartpole-ppo", "--inputs", str(inputs), "--seed", str(SEED), "--parallelism", "5",
        "--chunk", "20", "--journal", str(journal),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert (summary["eval_tests"], summary["eval_errors"]) == (64, 0)
    # The journal lists every failing input (the summary only the first 50), with its id and values
    failed_rows = [f for line in journal.read_text().splitlines()[1:] for f in json.loads(line)["failed"]]
    offline_failed = {f["id"] for f in failed_rows}
    assert offline_failed == campaign_failed  # every other input passed on both paths
    assert summary["eval_failures"] == len(campaign_failed)
    values = {r.test_case.id: case_values(r.test_case) for r in rows}
    assert all(values[f["id"]] == f["values"] for f in failed_rows)


def test_evaluate_names_a_bad_inputs_line(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.jsonl"
    good = {"x": 0.1, "x_dot": 0.0, "theta": 0.01, "theta_dot": 0.0}
    inputs.write_text(
        json.dumps({"id": "a", "values": good}) + "\n" + json.dumps({"id": "b", "values": {**good, "x": 2.0}}) + "\n"
    )
    out = gauntlet("evaluate", "cartpole-ppo", "--inputs", str(inputs))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"inputs {inputs}:2" in out.stderr and "x=2" in out.stderr
    inputs.write_text(json.dumps({"id": "a", "values": good}) + "\n" + json.dumps({"id": "a", "values": good}) + "\n")
    out = gauntlet("evaluate", "cartpole-ppo", "--inputs", str(inputs))
    assert out.returncode == 2 and "id 'a' appears twice" in out.stderr
