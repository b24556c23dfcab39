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

ROOT = Path(__file__).resolve().parent.parent
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
    for role in ("simulator", "oracle", "analysis"):  # images without torch
        assert int(sizes[role]) < 600, sizes
    # the generator has no torch either, but ribs (numba, llvmlite, pandas), pymoo (matplotlib), scipy and
    # scikit-learn weigh ~650 MB installed: 830 MB measured, over the 600 MB target (deploy/README.md)
    assert int(sizes["generator"]) < 1000, sizes
    assert int(sizes["agent"]) > int(sizes["oracle"]) + 500, sizes  # torch is in the agent's image, not the oracle's
    assert "600 executions recorded once each" in output
    assert re.search(r"simulator restarted [1-9]\d*x", output)
