"""A non-Python client: examples/node-client drives the running suite through the generated TypeScript/JavaScript
client (clients/typescript, buf + protoc-gen-es)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cli.launcher import LocalSuite

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "examples" / "node-client"


def _unavailable(reason: str) -> None:
    """Skip, or fail when GAUNTLET_REQUIRE_NODE says Node.js must be there (CI)."""
    if os.environ.get("GAUNTLET_REQUIRE_NODE"):
        pytest.fail(f"{reason} (GAUNTLET_REQUIRE_NODE is set)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node() -> str:
    """Path of the node binary; checked before the (expensive) suite fixture starts."""
    found = shutil.which("node")
    if found is None:
        _unavailable("Node.js not installed: `node` is not on PATH")
    for folder in (CLIENT_DIR, REPO / "clients" / "typescript"):
        if not (folder / "node_modules").is_dir():
            _unavailable(f"Node.js dependencies not installed: run `npm ci` in {folder.relative_to(REPO)}")
    return found  # type: ignore[return-value]


def test_node_client_drives_suite(node: str, suite: LocalSuite) -> None:
    done = subprocess.run(
        [
            node,
            str(CLIENT_DIR / "client.js"),
            "--simulator",
            suite.endpoint("simulator"),
            "--generator",
            suite.endpoint("generator"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    output = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, output
    lines = done.stdout.strip().splitlines()
    assert lines, output
    summary = json.loads(lines[-1])
    assert summary["executions"] == 20, output
    assert summary["state"] == "CAMPAIGN_STATE_COMPLETED", output
    assert summary["campaign_id"], output
    assert 0 <= summary["failures"] <= 20, output
    assert "cartpole" in done.stdout, output
    assert "NOT_FOUND" in done.stdout, output
    # the strategy parameters, built from the JSON Schema ListStrategies serves, were accepted by StartCampaign
    assert 'prt parameters from its schema: lam=1 variant="paper" mapping="hints"' in done.stdout, output
    # read through the generated types: a oneof domain (case/value) and camelCase fields
    assert re.search(r"^  \w+: real \[-?[\d.e-]+, -?[\d.e-]+\]", done.stdout, re.M), output
