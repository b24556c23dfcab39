"""`gauntlet dashboard` against a running suite: it starts, a campaign runs, and headless Chromium shows the campaign
live (executions and failures rising between two looks), lists its failures with their replay commands and draws
the comparison plot of the strategies run on its subject (random and PRT here); a second
dashboard given only the store's URL (no generator: as on another machine) lists the same running campaign."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.config import CampaignConfig
from tests.browser import FLAGS, VIEWPORT, chromium, screenshots_dir

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def dom(binary: str, url: str, profile: Path) -> str:
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}"]
    done = subprocess.run(
        [*cmd, "--virtual-time-budget=3000", "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def shown(page: str, campaign_id: str) -> tuple[int, int]:
    """(executions, failures) in the campaign's row of the dashboard's table."""
    row = re.search(rf'<tr class="pick[^"]*" data-id="{re.escape(campaign_id)}">(.*?)</tr>', page, re.DOTALL)
    assert row is not None, page[-3000:]
    executions = re.search(r'class="num executions">(\d+)', row.group(1))
    failures = re.search(r'class="num failures">(\d+)', row.group(1))
    assert executions and failures, row.group(1)
    return int(executions.group(1)), int(failures.group(1))


@contextlib.contextmanager
def dashboard(*args: str) -> Iterator[str]:
    """`gauntlet dashboard ARGS --port 0` running; yields its URL."""
    server = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "dashboard", *args, "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, line + (server.stderr.read() if server.poll() is not None and server.stderr else "")
        yield found.group(0)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_dashboard_shows_a_running_campaign_live(suite: LocalSuite, tmp_path: Path) -> None:
    binary = chromium()
    assert binary is not None
    with dashboard("--generator", suite.endpoint("generator")) as url:
        gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))

        def start(strategy: str, budget: int) -> str:
            config = CampaignConfig.model_validate(
                {
                    "name": f"dashboard-{strategy}",
                    "subject": "cartpole",
                    "model": "cartpole-ppo-seed1",  # a weak agent: failures come early
                    "strategy": strategy,
                    "seed": 3,
                    "budget": {"max_executions": budget},
                    "batch_size": 8,
                    "parallelism": 8,
                }
            )
            started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120)
            return str(started.status.campaign_id)

        # a second strategy on the subject, for the comparison plot: run to its end first, so that the live one is
        # the newest campaign (the one the page opens)
        other_cid = start("prt", 24)
        list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=other_cid), timeout=300))
        time.sleep(1.1)  # created_at has a resolution of a second
        cid = start("random", 400)
        looks = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            page = dom(binary, url, tmp_path / "profile")
            assert '<p id="errors" class="fail"></p>' in page, page[-2000:]
            looks.append(shown(page, cid))
            if len(looks) >= 2 and looks[-1][0] > looks[0][0] and looks[-1][1] > looks[0][1]:
                break
        assert len(looks) >= 2 and looks[-1][0] > looks[0][0] and looks[-1][1] > looks[0][1], looks
        # the failures, each with its replay command, and the curve
        assert f"gauntlet replay {cid} t" in page and 'id="curve"' in page
        # the comparison plot of the chosen campaign's subject: a line per campaign, coloured by strategy
        assert 'id="comparison"' in page and "Strategies on cartpole" in page, page[-3000:]
        finished = re.search(rf'data-id="{other_cid}">(.*?)</tr>', page, re.DOTALL)  # finished campaigns listed too
        assert finished and "<td>completed</td>" in finished.group(1), page[-3000:]
        assert 'data-strategy="random"' in page and 'data-strategy="prt"' in page, page[-3000:]
        compared = json.loads(urllib.request.urlopen(f"{url}api/compare?subject=cartpole", timeout=60).read())
        assert {cid, other_cid} <= {c["campaign_id"] for c in compared["campaigns"]}, compared
        assert {"random", "prt"} <= set(compared["strategies"]), compared
        detail = json.loads(urllib.request.urlopen(f"{url}api/campaign?id={cid}", timeout=60).read())
        assert detail["failures_total"] >= looks[-1][1] and detail["curve"][-1][1] == detail["failures_total"]
        shot = screenshots_dir("dashboard") / "dashboard.png"
        subprocess.run(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={tmp_path / 'profile'}",
                f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
                "--virtual-time-budget=3000",
                f"--screenshot={shot}",
                url,
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        # a second dashboard that reads the same store by its URL (as on another machine: no --generator) lists the
        # campaign the suite's generator runs (or has just finished), its counts and its failures
        with dashboard("--store-url", suite.store_url) as other:
            listed = json.loads(urllib.request.urlopen(f"{other}api/campaigns", timeout=60).read())
            assert listed["where"].endswith("(local)") and "error" not in listed, listed
            row = next(c for c in listed["campaigns"] if c["campaign_id"] == cid)
            assert row["executions"] >= looks[-1][0] and row["failures"] >= looks[-1][1], (row, looks)
            assert row["subject"] == "cartpole" and row["strategy"] == "random"
            page = dom(binary, other, tmp_path / "profile")
            assert shown(page, cid)[0] >= looks[-1][0] and f"gauntlet replay {cid} t" in page, page[-2000:]
        with contextlib.suppress(grpc.RpcError):  # stop it early (one that already completed cannot be cancelled)
            gen.CancelCampaign(generator_pb2.CancelCampaignRequest(campaign_id=cid), timeout=60)
