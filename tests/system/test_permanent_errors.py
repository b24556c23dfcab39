"""Permanent errors fail a campaign fast; killed services only interrupt it (issue 19, defect 5).

A downstream INVALID_ARGUMENT (an agent refusing the subject's observations) keeps its code from the agent through
the simulator to the generator, which ends the campaign `failed` at once with the agent's sentence, and
`gauntlet run` exits non-zero. A service killed without supervision leaves the campaign `interrupted` (resumable),
never `cancelled`; a generator stopped mid-campaign marks it interrupted by its shutdown and resumes it on start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from cli.launcher import LocalSuite, Service
from cli.supervisor import RestartPolicy
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.store import CampaignStore
from tests.conftest import one_model_root

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "agent_service" / "zoo"
RUNNING = generator_pb2.CAMPAIGN_STATE_RUNNING


def _campaign_file(folder: Path, model: str, executions: int) -> Path:
    path = folder / "campaign.yaml"
    campaign = {
        "name": "permanent-errors",
        "subject": "cartpole",
        "model": model,
        "strategy": "random",
        "seed": 5,
        "budget": {"max_executions": executions},
        "batch_size": 32,
        "parallelism": 16,
    }
    path.write_text(yaml.safe_dump({"campaign": campaign}))
    return path


def _gauntlet_run(local: LocalSuite, campaign: Path, cid: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "run", str(campaign), "--id", cid]
        + ["--generator", local.endpoint("generator"), "--analysis", local.endpoint("analysis")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, COLUMNS="120"),
    )


def _status(local: LocalSuite, cid: str) -> generator_pb2.CampaignStatus | None:
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
    try:
        return gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=cid), timeout=10).status
    except Exception:  # noqa: BLE001 - not started yet, or the generator is down
        return None


def _wait_for(
    local: LocalSuite, cid: str, done: Callable[[generator_pb2.CampaignStatus], bool], timeout: float = 180
) -> generator_pb2.CampaignStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = _status(local, cid)
        if status is not None and done(status):
            return status
        assert time.monotonic() < deadline, f"campaign {cid}: {status}"
        time.sleep(0.1)


def _restart(local: LocalSuite, service: Service) -> Service:
    """What the supervisor does, by hand: the same module, arguments and ports."""
    return local.start_service(
        service.name, service.module, *service.args, port=service.port, metrics_port=service.metrics_port
    )


def test_an_agent_that_refuses_the_observations_fails_the_campaign_in_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A model that fits the subject when the campaign starts (the simulator checks and remembers the fit), then an
    # agent restarted with another model under the same name: its Act refuses CartPole's 4-value observations.
    models = tmp_path / "models"
    (models / "probe").mkdir(parents=True)
    shutil.copy(ZOO / "cartpole-ppo" / "model.zip", models / "probe" / "model.zip")
    manifest = {"models": {"probe": {"subject": "cartpole", "algorithm": "PPO", "description": "swapped in tests"}}}
    (models / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    retry_seconds = 300.0  # a retried permanent error would keep the campaign running this long
    lanes = Path(tempfile.mkdtemp(prefix="lanes-"))  # short: the agent's socket paths must fit 107 bytes
    monkeypatch.setenv("TMPDIR", str(lanes))  # where the agents make their lane folders
    with LocalSuite(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        log_dir=tmp_path / "logs",
        report_root=tmp_path / "reports",
        model_root=models,
        generator_retry_seconds=retry_seconds,
        restart_policy=RestartPolicy(),
    ) as local:
        run = _gauntlet_run(local, _campaign_file(tmp_path, "probe", 100_000), "refused")
        try:
            _wait_for(local, "refused", lambda s: s.executions >= 32)
            shutil.copy(ZOO / "lunarlander-ppo" / "model.zip", models / "probe" / "model.zip")  # 8 observations
            killed = time.monotonic()
            os.kill(local.services["agent"].process.pid, signal.SIGKILL)
            out, err = run.communicate(timeout=240)
        finally:
            run.kill()
        took = time.monotonic() - killed
        status = _status(local, "refused")
        # issue 35: the SIGKILLed agent's lane folder is removed by the agent restarted in its place
        assert len(list(lanes.glob("gauntlet-lanes-*"))) == 1, list(lanes.iterdir())
    assert not list(lanes.glob("gauntlet-lanes-*")), list(lanes.iterdir())  # and the live one's at the stop
    shutil.rmtree(lanes, ignore_errors=True)
    assert status is not None and status.state == generator_pb2.CAMPAIGN_STATE_FAILED, status
    sentence = "model 'probe' expects observations of shape (batch, 8)"
    assert sentence in status.error and status.error.startswith("simulator RunEpisodes: INVALID_ARGUMENT: ")
    assert took < 120, f"{took:.0f}s: the permanent error was retried"  # an agent restart, not the retry budget
    assert run.returncode == 3, (out, err)
    assert f"error: campaign refused failed: {status.error}" in " ".join(err.split()), err
    assert "Traceback" not in err


def test_killed_services_interrupt_a_campaign_and_a_stopped_generator_resumes_it(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    with LocalSuite(
        store_url=store_url,
        log_dir=tmp_path / "logs",
        report_root=tmp_path / "reports",
        model_root=one_model_root(tmp_path / "models", "cartpole-ppo"),
        generator_retry_seconds=3.0,  # no supervision: a dead service stays dead, so give up soon
    ) as local:
        campaign = _campaign_file(tmp_path, "cartpole-ppo", 96)
        gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))

        # kill -9 of the simulator: interrupted after the retry budget, and resumable to exactly N executions
        spec = generator_pb2.StartCampaignRequest(campaign_id="sim-killed")
        spec.spec.CopyFrom(_spec(campaign))
        gen.StartCampaign(spec, timeout=300)
        _wait_for(local, "sim-killed", lambda s: s.executions >= 32)
        simulator = local.services["simulator"]
        simulator.process.kill()
        status = _wait_for(local, "sim-killed", lambda s: s.state != RUNNING, timeout=60)
        assert status.state == generator_pb2.CAMPAIGN_STATE_INTERRUPTED, status
        assert status.stop_reason == "error" and "UNAVAILABLE" in status.error
        simulator.process.wait()
        _restart(local, simulator)
        gen.ResumeCampaign(generator_pb2.ResumeCampaignRequest(campaign_id="sim-killed"), timeout=60)
        status = _wait_for(local, "sim-killed", lambda s: s.state != RUNNING)
        assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and status.executions == 96, status

        # SIGTERM of the generator: it marks the campaign interrupted by its shutdown, and its successor resumes it
        spec.campaign_id = "generator-stopped"
        gen.StartCampaign(spec, timeout=300)
        _wait_for(local, "generator-stopped", lambda s: s.executions >= 32)
        generator = local.services["generator"]
        generator.process.send_signal(signal.SIGTERM)
        assert generator.process.wait(timeout=60) == 0
        row = CampaignStore(store_url).campaign("generator-stopped")
        assert row is not None and (row.state, row.stop_reason) == ("interrupted", "shutdown"), row
        _restart(local, generator)
        status = _wait_for(local, "generator-stopped", lambda s: s.state != RUNNING)
        assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED and status.executions == 96, status
        rows = list(CampaignStore(store_url).executions("generator-stopped"))
        assert sorted(r.test_case_id for r in rows) == [f"t{i:07d}" for i in range(1, 97)]

        # kill -9 of the agent while `gauntlet run` watches: interrupted (not cancelled), and the command says so
        run = _gauntlet_run(local, campaign, "agent-killed")
        try:
            _wait_for(local, "agent-killed", lambda s: s.executions >= 32)
            local.services["agent"].process.kill()
            out, err = run.communicate(timeout=120)
        finally:
            run.kill()
        status = _status(local, "agent-killed")
    assert status is not None and status.state == generator_pb2.CAMPAIGN_STATE_INTERRUPTED, status
    assert "agent service: UNAVAILABLE" in status.error
    assert run.returncode == 4, (out, err)
    assert "resume it with: gauntlet resume agent-killed" in " ".join(err.split()), err


def _spec(campaign: Path) -> generator_pb2.CampaignSpec:
    from generator_service.config import CampaignConfig

    return CampaignConfig.model_validate(yaml.safe_load(campaign.read_text())["campaign"]).to_proto()
