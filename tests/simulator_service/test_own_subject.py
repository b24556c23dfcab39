"""A subject, an agent and a campaign of the user's own, from YAML files in a folder of their own only.

The three files are the blocks of docs/subjects/index.md (its subject, recipe and campaign blocks), so the page's
example is the one that is shown to work: the agent is trained with `gauntlet train --recipe --model-root` (a few
thousand steps instead of the recipe's budget), and tested with `gauntlet run --model-root` through the real
services, the subject coming from $GAUNTLET_SUBJECT_PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml

from tests.project.test_docs import code_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "subjects" / "index.md"
GAUNTLET = str(Path(sys.executable).parent / "gauntlet")
EXECUTIONS = 24
TRAINING_STEPS = 4096


def page_block(kind: str) -> str:
    """The body of the page's one block with the docs-test marker `kind`."""
    bodies = [b.body for b in code_blocks(PAGE) if b.kind == kind]
    assert len(bodies) == 1, f"{PAGE.name}: expected one {kind} block, found {len(bodies)}"
    return bodies[0] + "\n"


def gauntlet(folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAUNTLET_SUBJECT_PATH": str(folder / "my-subjects")}
    return subprocess.run(
        [GAUNTLET, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture()
def own_folder(tmp_path: Path) -> Path:
    """The page's subject, recipe and campaign saved where the page says (the campaign cut to a few tests)."""
    (tmp_path / "my-subjects").mkdir()
    (tmp_path / "my-subjects" / "acrobot.yaml").write_text(page_block("subject"))
    (tmp_path / "acrobot-recipes.yaml").write_text(page_block("recipe"))
    campaign = yaml.safe_load(page_block("campaign"))
    campaign["campaign"]["budget"] = {"max_executions": EXECUTIONS}
    (tmp_path / "acrobot_random.yaml").write_text(yaml.safe_dump(campaign))
    return tmp_path


def test_an_acrobot_agent_is_trained_and_tested_from_yaml_files_only(own_folder: Path) -> None:
    from generator_service.store import CampaignStore

    trained = gauntlet(
        own_folder,
        *("train", "acrobot-ppo", "--recipe", "acrobot-recipes.yaml", "--model-root", "my-models"),
        *("--timesteps", str(TRAINING_STEPS)),
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    manifest = yaml.safe_load((own_folder / "my-models" / "manifest.yaml").read_text())["models"]
    assert manifest["acrobot-ppo"]["subject"] == "acrobot" and manifest["acrobot-ppo"]["timesteps"] == TRAINING_STEPS
    assert (own_folder / "my-models" / "acrobot-ppo" / "model.zip").is_file()

    listed = gauntlet(own_folder, "models", "--model-root", "my-models")
    assert listed.returncode == 0 and "acrobot-ppo" in listed.stdout, listed.stderr[-3000:]
    measured = gauntlet(own_folder, "evaluate", "acrobot-ppo", "--model-root", "my-models", "--tests", "16")
    assert measured.returncode == 0, measured.stderr[-3000:]
    assert json.loads(measured.stdout[measured.stdout.index("{") :])["eval_tests"] == 16

    store_url = f"sqlite:///{own_folder / 'store.db'}"
    ran = gauntlet(own_folder, "run", "acrobot_random.yaml", "--model-root", "my-models", "--store-url", store_url)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]

    store = CampaignStore(store_url)
    (campaign,) = store.list_campaigns()
    assert (campaign.state, campaign.stop_reason) == ("completed", "max_executions")
    rows = list(store.executions(campaign.id))
    assert len(rows) == EXECUTIONS and len({r.test_case_id for r in rows}) == EXECUTIONS
    for row in rows:  # goal_not_reached: a failure ran to the 500-step limit, a pass swung up before it
        assert set(row.values) == {"theta1", "theta2"} and all(-0.1 <= v <= 0.1 for v in row.values.values())
        if row.verdict == "fail":
            assert row.steps == 500 and "did not terminate" in row.reason
        else:
            assert row.verdict == "pass" and row.steps < 500 and "reached its goal" in row.reason


def _misfit_subject(folder: Path) -> None:
    """The page's subject with Acrobot's 4-value state declared as its (6-value) observation."""
    subject = page_block("subject")
    declared = "indices: {theta1: 0, theta2: 1}}"
    assert declared in subject
    subject = subject.replace(declared, "indices: {theta1: 0, theta2: 1}, observation: state}")
    (folder / "my-subjects" / "acrobot.yaml").write_text(subject)


def test_training_refuses_a_subject_whose_first_observation_misses_its_space(own_folder: Path) -> None:
    _misfit_subject(own_folder)
    refused = gauntlet(own_folder, "train", "acrobot-ppo", "--recipe", "acrobot-recipes.yaml", "--model-root", "m")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "first observation of shape (4,)" in refused.stderr and "(6,), float32)" in refused.stderr
    assert not (own_folder / "m").exists()


def test_the_simulator_refuses_such_a_subject_when_it_first_describes_it(own_folder: Path) -> None:
    from common.generated.gauntlet.v1 import simulator_pb2, simulator_pb2_grpc
    from common.server import client_channel

    _misfit_subject(own_folder)
    env = {**os.environ, "GAUNTLET_SUBJECT_PATH": str(own_folder / "my-subjects")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator_service", "--port", "0", "--metrics-port", "-1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = json.loads(proc.stdout.readline())["port"]  # type: ignore[union-attr]
        sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(f"127.0.0.1:{port}"))
        with pytest.raises(grpc.RpcError) as refused:
            sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="acrobot"), timeout=60)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        detail = refused.value.details()
        assert "subject acrobot" in detail and "shape (4,)" in detail and "(6,), float32)" in detail
        described = sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole"), timeout=60)
        assert list(described.observation_space.shape) == [4]  # the other subjects are served as before
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bad_recipes_and_model_roots_are_explained_in_one_line(own_folder: Path) -> None:
    (own_folder / "broken-recipes.yaml").write_text("acrobot-ppo: {subject: acrobot, seed: 0}\n")
    cases = [
        (("train", "../evil", "--recipe", "acrobot-recipes.yaml"), "recipe name must be 1 to 64 characters"),
        (("train", "nope", "--recipe", "acrobot-recipes.yaml"), "unknown recipe 'nope' in acrobot-recipes.yaml"),
        (("train", "acrobot-ppo", "--recipe", "broken-recipes.yaml"), "missing algorithm, timesteps, n_envs"),
        (("train", "acrobot-ppo", "--recipe", "missing.yaml"), "recipe file missing.yaml cannot be read"),
        (("models", "--model-root", "no-models"), "--model-root no-models has no manifest.yaml"),
    ]
    for args, expected in cases:
        done = gauntlet(own_folder, *args)
        assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
