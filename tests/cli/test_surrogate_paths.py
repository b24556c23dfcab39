"""`gauntlet surrogate train` names its artifact as the generator resolves it: relative to the artifact root."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from bench.harness import run_campaign
from cli.launcher import LocalSuite
from cli.surrogate_commands import usage_hint
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.config import CampaignConfig

ROOT = Path(__file__).resolve().parents[2]


def campaign(surrogate: str) -> CampaignConfig:
    return CampaignConfig.model_validate(
        {
            "name": "surrogate-path",
            "subject": "cartpole",
            "model": "cartpole-ppo",
            "strategy": "indago",
            "strategy_params": {"surrogate": surrogate, "setting": "hc_rnd", "max_iterations": 2, "neighbourhood": 4},
            "budget": {"max_executions": 2},
            "batch_size": 2,
        }
    )


def test_the_printed_surrogate_path_is_the_one_a_campaign_runs_with(suite: LocalSuite, tmp_path: Path) -> None:
    # the user's sequence: train in a working folder, paste the printed path into a campaign of `gauntlet run`,
    # whose generator's artifact root is that folder's runs/
    trained = subprocess.run(
        [sys.executable, "-m", "cli.main", "surrogate", "train", "--model", "cartpole-ppo", "--grid", "tiny"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "300"},
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    printed = re.search(r"strategy_params \{surrogate: (\S+)\}", trained.stdout)
    assert printed, trained.stdout[-1000:]
    name = printed[1]
    assert not name.startswith("runs/") and (tmp_path / "runs" / name / "surrogate.json").exists()
    # the suite's generator has its own artifact root: the artifact goes there under the same relative name
    shutil.copytree(tmp_path / "runs" / name, suite.artifact_root / name)
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    status = run_campaign(gen, campaign(name))
    assert status.executions == 2
    # the path as the old hint printed it (relative to the working folder) is refused, and the refusal says
    # what the path is relative to
    with pytest.raises(grpc.RpcError) as err:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=campaign(f"runs/{name}").to_proto()), timeout=120)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert f"runs/{name} does not exist" in details and "relative to the generator's artifact root" in details
    assert str(suite.artifact_root.resolve()) not in details  # the root is named, its server path is not shown


def test_an_artifact_outside_the_root_is_said_to_need_moving(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    inside = usage_hint(root / "surrogates" / "a", root)
    assert "{surrogate: surrogates/a}" in inside
    outside = usage_hint(tmp_path / "elsewhere" / "a", root)
    assert "outside" in outside and "--artifact-root" in outside and "surrogate:" not in outside
