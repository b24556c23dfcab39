"""Starting a local suite: only the services a command calls, all at once, a line per service as it answers.

The services are real processes on loopback (cli.launcher.LocalSuite); nothing is mocked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from cli.launcher import ROLES, LaunchError, LocalSuite, campaign_roles, report_roles
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
EVERY_ROLE_BUT_TRANSLATOR = frozenset(ROLES) - {"translator"}


def test_a_campaign_starts_the_translator_only_when_its_episodes_translate() -> None:
    assert campaign_roles("cartpole") == EVERY_ROLE_BUT_TRANSLATOR  # an RL subject: no GAN stage
    assert campaign_roles("lunarlander") == EVERY_ROLE_BUT_TRANSLATOR
    assert campaign_roles("urban") == frozenset(ROLES)  # DESIGNATE's subject declares pix2pix-urban
    assert campaign_roles("urban", "none") == EVERY_ROLE_BUT_TRANSLATOR  # DESIGNATE_NoGAN
    assert campaign_roles("cartpole", "pix2pix-urban") == frozenset(ROLES)  # the campaign names one
    assert campaign_roles("no_such_subject") == EVERY_ROLE_BUT_TRANSLATOR  # StartCampaign says it is unknown


def test_a_report_starts_what_it_replays_through_and_nothing_else() -> None:
    store_readers = {"generator", "analysis"}
    assert report_roles([("cartpole", "")], 0) == store_readers
    assert report_roles([("cartpole", ""), ("taxi", "")], 0) == store_readers
    assert report_roles([("cartpole", "")], 2) == store_readers | {"simulator", "agent", "oracle"}  # filmstrips
    assert report_roles([("urban", "")], 0) == store_readers | {"simulator", "agent", "translator"}  # its archive
    assert report_roles([("urban", "none")], 0) == store_readers | {"simulator", "agent"}
    assert report_roles([("mars", "")], 1) == frozenset(ROLES)


def test_the_roles_start_at_once_each_pointed_at_the_others(tmp_path: Path) -> None:
    heard: list[tuple[str, float]] = []
    roles = frozenset({"oracle", "simulator", "generator", "analysis"})
    local = LocalSuite(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        log_dir=tmp_path / "logs",
        artifact_root=tmp_path,
        roles=roles,
        on_ready=lambda role, seconds: heard.append((role, seconds)),
    ).start()
    try:
        assert sorted(role for role, _ in heard) == sorted(roles)  # each once, when it answered
        assert all(0 < seconds < 120 for _, seconds in heard)
        assert list(local.services) == [r for r in ROLES if r in roles]  # listed (and stopped) in dependency order
        # the generator was started before the simulator answered, pointed at its port: it reaches it
        generator = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(local.endpoint("generator")))
        strategies = generator.ListStrategies(generator_pb2.ListStrategiesRequest(), timeout=60).strategies
        assert "random" in {s.name for s in strategies}
        args = local.services["generator"].args
        assert args[args.index("--simulator-endpoint") + 1] == local.endpoint("simulator")
        assert args[args.index("--oracle-endpoint") + 1] == local.endpoint("oracle")
        assert not (tmp_path / "logs" / "agent.log").exists()
    finally:
        local.stop()


def test_a_service_that_does_not_start_stops_the_others_and_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "models"
    broken.mkdir()
    (broken / "manifest.yaml").write_text("models: [unclosed\n")  # the agent exits on it at start
    heard: list[str] = []
    local = LocalSuite(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        log_dir=tmp_path / "logs",
        artifact_root=tmp_path,
        model_root=broken,
        roles=frozenset({"oracle", "agent", "analysis"}),
        on_ready=lambda role, _: heard.append(role),
    )
    with pytest.raises(LaunchError, match=r"^agent service did not start \(exit code 1\)"):
        local.start()
    assert local.services == {}
    for name in ("oracle", "analysis"):  # started beside it, then stopped: no process of it is left
        assert (tmp_path / "logs" / f"{name}.log").exists()
        assert _processes_with(f"--port\0{local._ports[name]}\0") == []


def _processes_with(argument: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `argument` (NUL-separated arguments)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in cmdline.read_bytes():
                state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_run_prints_a_line_per_service_it_starts_and_starts_no_translator(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "campaign:\n  subject: cartpole\n  model: cartpole-ppo\n  strategy: random\n  seed: 3\n"
        "  budget: {max_executions: 4}\n  batch_size: 4\n  parallelism: 4\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")}
    out = subprocess.run(  # stdout is a pipe, not a terminal: plain lines, no spinner frames
        [sys.executable, "-m", "cli.main", "run", "c.yaml", "--id", "start-1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "120"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "starting the Gauntlet services on loopback: oracle, agent, simulator, generator, analysis"
    ready = [m.group(1) for line in lines if (m := re.fullmatch(r"  (\w+) ready \((\d+\.\d) s\)", line))]
    assert sorted(ready) == sorted(EVERY_ROLE_BUT_TRANSLATOR)
    assert re.fullmatch(r"  all ready in \d+\.\d s", lines[len(ready) + 1])
    assert "\x1b" not in out.stdout and "⠋" not in out.stdout
    logs = sorted(p.stem for p in (tmp_path / "runs" / "logs").glob("*.log"))
    assert logs == sorted(EVERY_ROLE_BUT_TRANSLATOR)


def test_the_agent_preloads_only_the_models_it_is_given(tmp_path: Path) -> None:
    from agent_service.registry import ModelRegistry

    registry = ModelRegistry()
    assert len(registry.entries) > 2
    registry.preload(["cartpole-ppo"])
    assert set(registry._loaded) == {"cartpole-ppo"}
    local = LocalSuite(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        log_dir=tmp_path / "logs",
        artifact_root=tmp_path,
        roles=frozenset({"agent"}),
        agent_models=("cartpole-ppo",),
    ).start()
    try:
        assert local.services["agent"].args == ("--preload-model", "cartpole-ppo")
    finally:
        local.stop()
