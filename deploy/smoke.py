#!/usr/bin/env python3
"""Container smoke test: the suite as containers on one Docker network, a campaign driven from the host's CLI.

    .venv/bin/python deploy/smoke.py            # builds (or reuses) the images, runs, removes its containers
    .venv/bin/python deploy/smoke.py --keep     # leave the containers running afterwards (to inspect them)

Phases, each timed (`phase <name>: <s> s`, then `smoke: total <s> s`):
  images     deploy/images.sh (Docker's layer cache makes a rebuild with unchanged dependencies a source-layer one)
  start      the services of deploy/compose.yaml, each started with `docker run` from its compose definition
             (image, command, environment, restart policy, health check, volumes) on one network; only the
             generator's and the analysis service's ports are published, on free loopback ports. PostgreSQL when a
             postgres image is here (compose's postgres:16), else the generator's SQLite store in a volume.
  campaign   `gauntlet run CAMPAIGN --generator ... --analysis ...` on the host; once 120 executions are recorded
             the simulator's process is SIGKILLed from the host (a crash: Docker's restart policy restarts it; a
             `docker kill` would count as a manual stop and not be restarted), the generator retries until the
             new one answers and the campaign completes
  check      the simulator restarted, ListExecutions has indices 1..N once each and N distinct test-case ids,
             the report the analysis container wrote is copied out (docker cp) and names the campaign
  strategies a short campaign of each strategy whose libraries the generator imports only on a campaign's first
             batch (pyribs, pymoo, scipy, scikit-learn: STRATEGIES): the images' trimming must leave them working
Exit status: 0 passed, 1 failed, 77 no Docker engine (the reason is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the project's packages (the .venv has them installed anyway)

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc  # noqa: E402
from common.server import client_channel  # noqa: E402

SKIP = 77
EXECUTIONS = 600
KILL_AFTER = 120
CAMPAIGN = {
    "campaign": {
        "name": "container-smoke",
        "subject": "cartpole",
        "model": "cartpole-ppo",
        "strategy": "random",
        "seed": 5,
        "budget": {"max_executions": EXECUTIONS, "max_wall_seconds": 900},
        "batch_size": 100,
        "parallelism": 16,
    }
}
# strategy -> its campaign's other settings; the comment says what the generator imports for it
STRATEGIES: dict[str, dict[str, Any]] = {
    "map_elites": {  # pyribs (numba, llvmlite, pandas)
        "subject": "lunarlander_qd",
        "model": "lunarlander-ppo",
        "strategy_params": {"initial_tests": 20, "cells": 10, "descriptor_bounds": [[-1.0, 1.0], [-2.0, 0.5]]},
    },
    "designate": {  # pymoo's NSGA-II operators (without a translator: the image-to-image model is not the point)
        "subject": "urban",
        "model": "segnet-urban",
        "observation_translator": "none",
        "strategy_params": {"population_size": 12, "seed_populations": 1, "generations": 2},
    },
    "novelty_search": {  # scipy's cKDTree
        "subject": "cartpole",
        "model": "cartpole-ppo",
        "strategy_params": {"initial_tests": 20, "population": 10},
    },
    "mdpfuzz": {  # scikit-learn's GaussianMixture
        "subject": "cartpole",
        "model": "cartpole-ppo",
        "strategy_params": {"initial_tests": 20},
    },
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def docker(*args: str, check: bool = True, timeout: float = 300) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR:-default} substitution, recursively."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: env.get(m[1]) or (m[2] or ""), value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def run_args(name: str, spec: dict[str, Any], project: str, network: str) -> list[str]:
    """`docker run` arguments for one compose service (the keys deploy/compose.yaml uses; ports: see publish)."""
    args = ["run", "-d", "--name", f"{project}-{name}", "--network", network, "--network-alias", name]
    args += ["--restart", spec.get("restart", "no")]
    if "stop_grace_period" in spec:
        args += ["--stop-timeout", str(int(str(spec["stop_grace_period"]).rstrip("s")))]
    for key, value in (spec.get("environment") or {}).items():
        args += ["-e", f"{key}={value}"]
    for volume in spec.get("volumes") or []:
        source, _, target = str(volume).partition(":")
        args += ["-v", f"{project}-{source}:{target}"]
    check = spec.get("healthcheck")
    if check:
        test = check["test"]
        command = test[1] if test[0] == "CMD-SHELL" else " ".join(test[1:])
        # the compose file's 10 s interval would make a smoke test wait; the check itself is the same
        args += ["--health-cmd", command, "--health-interval", "2s", "--health-retries", str(check.get("retries", 3))]
        args += ["--health-timeout", str(check.get("timeout", "5s"))]
    return args


def wait_healthy(container: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = json.loads(docker("inspect", "-f", "{{json .State}}", container))
        health = (state.get("Health") or {}).get("Status")
        if health == "healthy":
            return
        if not state["Running"] and not state.get("Restarting"):
            raise RuntimeError(f"{container} exited: {docker('logs', '--tail', '30', container, check=False)}")
        time.sleep(0.5)
    raise RuntimeError(f"{container} not healthy in {timeout:.0f} s: {docker('logs', '--tail', '30', container)}")


def published_port(container: str, port: int) -> int:
    return int(docker("port", container, f"{port}/tcp").splitlines()[0].rsplit(":", 1)[1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the containers, network and volumes")
    parser.add_argument("--tag", default=os.environ.get("GAUNTLET_TAG", "0.1.0"))
    args = parser.parse_args(argv)
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        print("smoke: skipped: no Docker engine answers `docker info`", flush=True)
        return SKIP

    times: dict[str, float] = {}
    total = time.monotonic()
    project = f"gauntlet-smoke-{os.getpid()}"
    started: list[str] = []
    try:
        t = time.monotonic()
        subprocess.run([str(ROOT / "deploy/images.sh")], check=True, timeout=3600)
        times["images"] = time.monotonic() - t

        t = time.monotonic()
        env = dict(os.environ, GAUNTLET_TAG=args.tag)
        compose = interpolate(yaml.safe_load((ROOT / "deploy/compose.yaml").read_text()), env)
        services: dict[str, dict[str, Any]] = compose["services"]
        docker("network", "create", project)
        postgres = subprocess.run(["docker", "image", "inspect", services["postgres"]["image"]], capture_output=True)
        order = ["agent", "oracle", "translator", "simulator", "generator", "analysis"]
        if postgres.returncode == 0:
            order.insert(0, "postgres")
            print(f"smoke: store: PostgreSQL ({services['postgres']['image']})", flush=True)
        else:
            # no registry to pull postgres from: the generator's default SQLite store, in a volume at its home
            spec = services["generator"]
            spec["environment"] = {k: v for k, v in spec["environment"].items() if k != "GAUNTLET_STORE_URL"}
            spec["volumes"] = ["store:/home/gauntlet"]
            print(f"smoke: store: SQLite in a volume (no {services['postgres']['image']} image here)", flush=True)
        # the generator's default retry window (60 s) is sized for a quick restart; a loaded 2-core CI machine can
        # take longer to start the simulator's container again, and waiting longer changes nothing else
        services["generator"]["command"] += ["--retry-seconds", "300"]
        for name in order:
            spec = services[name]
            extra: list[str] = []
            if name in ("generator", "analysis"):
                extra = ["-p", f"127.0.0.1::{spec['command'][spec['command'].index('--port') + 1]}"]
            docker(*run_args(name, spec, project, project), *extra, spec["image"], *spec.get("command", []))
            started.append(f"{project}-{name}")
        for container in started:
            wait_healthy(container, 180)
        generator = f"127.0.0.1:{published_port(f'{project}-generator', 50054)}"
        analysis = f"127.0.0.1:{published_port(f'{project}-analysis', 50055)}"
        times["start"] = time.monotonic() - t
        print(f"smoke: {len(started)} containers healthy; generator {generator}, analysis {analysis}", flush=True)

        t = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="gauntlet-smoke-"))
        (work / "campaign.yaml").write_text(yaml.safe_dump(CAMPAIGN))
        campaign_id = f"smoke-{os.getpid()}"
        cli = subprocess.Popen(
            [str(Path(sys.executable).parent / "gauntlet"), "run", str(work / "campaign.yaml"), "--id", campaign_id,
             "--generator", generator, "--analysis", analysis, "--report-dir", campaign_id],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        stub = generator_pb2_grpc.GeneratorServiceStub(client_channel(generator))
        simulator = f"{project}-simulator"
        deadline = time.monotonic() + 300
        while True:
            try:
                status = stub.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=campaign_id), timeout=10).status
                if status.executions >= KILL_AFTER:
                    break
            except Exception:  # noqa: BLE001 - not started yet (NOT_FOUND) or momentarily busy: poll again
                pass
            if cli.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"campaign did not reach {KILL_AFTER} executions: {cli.communicate()[0]}")
            time.sleep(0.1)
        pid = int(docker("inspect", "-f", "{{.State.Pid}}", simulator))
        os.kill(pid, signal.SIGKILL)  # the service's process dies mid-batch, as in a crash or an OOM kill
        killed_at = status.executions
        print(f"smoke: killed the simulator (pid {pid}) at {killed_at} executions", flush=True)
        output, _ = cli.communicate(timeout=900)
        times["campaign"] = time.monotonic() - t
        print(output, flush=True)
        if cli.returncode != 0:
            raise RuntimeError(f"gauntlet run exited {cli.returncode}")

        t = time.monotonic()
        restarts = int(docker("inspect", "-f", "{{.RestartCount}}", simulator))
        if restarts < 1:
            raise RuntimeError(f"{simulator} was not restarted (RestartCount {restarts})")
        rows = [
            r.execution
            for r in stub.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=campaign_id), timeout=120)
        ]
        indices = [r.index for r in rows]
        if indices != list(range(1, EXECUTIONS + 1)):
            raise RuntimeError(f"executions are not recorded once each: {len(rows)} rows, indices {indices[:5]}...")
        if len({r.test_case.id for r in rows}) != EXECUTIONS:
            raise RuntimeError("test-case ids repeat")
        reports = work / "reports"
        docker("cp", f"{project}-analysis:/reports/{campaign_id}", str(reports))
        names = sorted(p.name for p in reports.rglob("*") if p.is_file())
        report_json = next(reports.rglob("*.json"), None)
        if report_json is None or campaign_id not in report_json.read_text():
            raise RuntimeError(f"no report naming the campaign in the analysis container: {names}")
        times["check"] = time.monotonic() - t
        print(
            f"smoke: simulator restarted {restarts}x, killed at {killed_at}; {EXECUTIONS} executions recorded once "
            f"each; report fetched: {', '.join(names)}",
            flush=True,
        )

        t = time.monotonic()
        for strategy, settings in STRATEGIES.items():
            spec = {"name": f"container-{strategy}", "strategy": strategy, "seed": 3, **settings}
            spec |= {"budget": {"max_executions": 48, "max_wall_seconds": 300}, "batch_size": 12, "parallelism": 8}
            (work / f"{strategy}.yaml").write_text(yaml.safe_dump({"campaign": spec}))
            run = subprocess.run(
                [str(Path(sys.executable).parent / "gauntlet"), "run", str(work / f"{strategy}.yaml"),
                 "--id", f"{campaign_id}-{strategy}", "--generator", generator, "--analysis", analysis,
                 "--report-dir", f"{campaign_id}-{strategy}"],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            if run.returncode != 0:
                raise RuntimeError(
                    f"the {strategy} campaign exited {run.returncode}: {(run.stdout + run.stderr)[-3000:]}"
                )
        times["strategies"] = time.monotonic() - t
        print(f"smoke: strategy campaigns completed: {', '.join(STRATEGIES)}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
        return 0
    except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        print(f"smoke: FAILED: {error}", flush=True)
        for container in started:
            print(f"--- {container} ---\n{docker('logs', '--tail', '20', container, check=False)}", flush=True)
        return 1
    finally:
        for name, seconds in times.items():
            print(f"phase {name}: {seconds:.1f} s", flush=True)
        print(f"smoke: total {time.monotonic() - total:.1f} s", flush=True)
        if not args.keep:
            t = time.monotonic()
            for container in started:
                docker("rm", "-f", "-v", container, check=False)
            docker("network", "rm", project, check=False)
            volumes = docker("volume", "ls", "-q", "--filter", f"name={project}-", check=False).split()
            if volumes:
                docker("volume", "rm", *volumes, check=False)
            print(f"phase cleanup: {time.monotonic() - t:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
