"""The suite as real containers: deploy/images.sh builds the images, deploy/smoke.py runs a campaign through them.

Skipped when no Docker engine answers (`docker info`); with GAUNTLET_REQUIRE_DOCKER=1 that is a failure instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = 77  # deploy/smoke.py's exit status when it finds no Docker engine


def docker_engine() -> str:
    """Why there is no usable engine, or "" when `docker info` answers."""
    if shutil.which("docker") is None:
        return "no docker command"
    done = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return f"no Docker engine answers `docker info` ({done.stderr.strip().splitlines()[-1:]})"
    return ""


@pytest.fixture(scope="module")
def engine() -> None:
    reason = docker_engine()
    if reason:
        if os.environ.get("GAUNTLET_REQUIRE_DOCKER"):
            pytest.fail(f"GAUNTLET_REQUIRE_DOCKER is set but {reason}")
        pytest.skip(f"{reason}; start one (e.g. `dockerd &` as root) to run the container smoke test")


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_suite_runs_as_containers_and_heals_a_killed_simulator(engine: None) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy/smoke.py")], capture_output=True, text=True, timeout=2900, cwd=ROOT
    )
    output = done.stdout + done.stderr
    print(output)  # the phases' times, in pytest's report (-s or on failure)
    if done.returncode == SKIP and not os.environ.get("GAUNTLET_REQUIRE_DOCKER"):
        pytest.skip(output.strip().splitlines()[-1])
    assert done.returncode == 0, output[-6000:]
    sizes = dict(re.findall(r"(\w+)=(\d+)", re.search(r"image sizes \(MB\): (.*)", output)[1]))  # type: ignore[index]
    assert set(sizes) == {"simulator", "agent", "translator", "oracle", "generator", "analysis"}
    # the images without torch; the generator's ribs (numba, llvmlite, pandas), pymoo, scipy and scikit-learn make
    # it the closest (830 MB before deploy/slim_venv.py, the startup-only bytecode and matplotlib's removal)
    for role in ("simulator", "oracle", "generator", "analysis"):
        assert int(sizes[role]) < 600, sizes
    assert int(sizes["agent"]) > int(sizes["oracle"]) + 500, sizes  # torch is in the agent's image, not the oracle's
    assert "600 executions recorded once each" in output
    assert "strategy campaigns completed: map_elites, designate, novelty_search, mdpfuzz" in output
    assert re.search(r"simulator restarted [1-9]\d*x", output)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_mario_image_serves_the_mario_subjects_and_their_sessions(engine: None) -> None:
    import grpc
    import numpy as np

    from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
    from common.tensor import from_tensor, to_tensor
    from tests.conftest import free_port

    built = subprocess.run(
        ["deploy/images.sh", "mario"], capture_output=True, text=True, timeout=1400, cwd=ROOT, check=False
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    size = int(re.search(r"image sizes \(MB\): mario=(\d+)", built.stdout)[1])  # type: ignore[index]
    assert size < 600, size  # no torch, no gymnasium box2d/mujoco: the emulator and the simulator service only
    port = free_port()
    name = f"gauntlet-mario-test-{port}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:{port}", "gauntlet-mario:0.1.0"]
        + ["--host", "0.0.0.0", "--port", str(port), "--metrics-port", "-1"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=120)
        stub = simulator_pb2_grpc.SimulatorServiceStub(channel)
        listed = stub.ListEnvironments(simulator_pb2.ListEnvironmentsRequest(), timeout=60)
        names = {e.subject for e in listed.environments}
        assert {"mario_1_1", "mario_1_2"} <= names and "cartpole" not in names  # --backend mario: its subjects only
        info = stub.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="mario_1_1"), timeout=60)
        assert list(info.observation_space.shape) == [4, 84, 84] and info.HasField("search")
        case = common_pb2.TestCase(id="noop")
        case.values["noop_frames"].integer = 7
        opened = simulator_pb2.SessionOpen(subject="mario_1_1", test_case=case)
        requests = [simulator_pb2.OpenSessionRequest(open=opened)]
        step = simulator_pb2.SessionStep(action=to_tensor(np.int64(1)))
        requests += [simulator_pb2.OpenSessionRequest(step=step)] * 12
        replies = list(stub.OpenSession(iter(requests), timeout=300))
        frames = [from_tensor(r.observation) for r in replies]
        assert all(f.shape == (4, 84, 84) and f.dtype == np.uint8 for f in frames) and replies[-1].step == 12
        assert not np.array_equal(frames[0], frames[-1])  # the emulator ran: Mario moved right
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
