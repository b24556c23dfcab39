"""Statistics over repeated campaigns: shared grid, quartiles, tests against a baseline, the HTML, the RPC and CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis_service.comparison import build_comparison, comparison_stem, render_comparison_html
from analysis_service.metrics import ExecutionRecord
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import analysis_pb2, analysis_pb2_grpc, generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.config import CampaignConfig

ROOT = Path(__file__).resolve().parents[2]


def campaign(
    strategy: str, seed: int, n: int = 40, fail_above: float = 0.8, spread: float = 1.0
) -> tuple[dict, list[ExecutionRecord]]:
    """Inputs x, y in [0, spread); a test fails when x > fail_above; descriptors = the inputs."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(1, n + 1):
        x, y = rng.random(2) * spread
        records.append(
            ExecutionRecord(
                i,
                {"x": float(x), "y": float(y)},
                "fail" if x > fail_above else "pass",
                fail_above - x,
                10,
                1.0,
                0.1 * i,
                (float(x), float(y)),
            )
        )
    return {"campaign_id": f"{strategy}-{seed}", "strategy": strategy, "seed": seed, "subject": "synthetic"}, records


def by_strategy(comparison: dict, name: str) -> dict:
    return next(s for s in comparison["strategies"] if s["strategy"] == name)


def test_behaviour_cells_and_entropy_use_one_grid_for_all_campaigns() -> None:
    # "narrow" explores a quarter of each axis: on its own grid it would cover as many cells as "wide"
    runs = [campaign("wide", s, n=400) for s in range(3)] + [
        campaign("narrow", 10 + s, n=400, spread=0.25) for s in range(3)
    ]
    c = build_comparison(runs, baseline="wide")
    assert c["shared_grid"]["descriptor_high"][0] > 0.99 and c["shared_grid"]["descriptor_low"][0] < 0.01
    wide, narrow = by_strategy(c, "wide")["summary"], by_strategy(c, "narrow")["summary"]
    # a quarter of each axis spans at most 13 x 13 of the shared 50 x 50 cells; its own grid would give it ~370
    assert narrow["behaviour_cells"]["max"] <= 13 * 13 < wide["behaviour_cells"]["min"]
    assert narrow["input_entropy"]["median"] < wide["input_entropy"]["median"] - 1.0  # log(1/16) ≈ -2.8 in 2-D
    versus = by_strategy(c, "narrow")["versus_baseline"]
    assert versus["behaviour_cells"]["a12"] == 0.0 and versus["behaviour_cells"]["effect"] == "large"
    assert versus["behaviour_cells"]["favours"] == "baseline"


def test_entropy_at_three_k_and_final_state_sparsity_only_where_final_states_were_kept() -> None:
    from dataclasses import replace

    def kept(info_records: tuple[dict, list[ExecutionRecord]]) -> tuple[dict, list[ExecutionRecord]]:
        info, records = info_records  # the final state = the input scaled by 10 (FS in those units)
        return info, [replace(r, final_observation=(10 * r.values["x"], 10 * r.values["y"])) for r in records]

    runs = (
        [kept(campaign("wide", s, n=400)) for s in range(3)]
        + [kept(campaign("narrow", 10 + s, n=400, fail_above=0.1, spread=0.25)) for s in range(3)]
        + [campaign("plain", 20 + s, n=400) for s in range(3)]
    )
    c = build_comparison(runs, baseline="wide")
    wide, narrow, plain = (by_strategy(c, n)["summary"] for n in ("wide", "narrow", "plain"))
    for key in ("input_entropy_k5", "input_entropy", "input_entropy_k20"):
        assert narrow[key]["median"] < wide[key]["median"] - 1.0
    # 400 uniform points in a 10 x 10 square: 3-NN distances near 0.5 * 10 / sqrt(400) x ~1.5; a quarter-square: 1/4
    assert 0.2 < wide["final_state_sparsity"]["median"] < 1.5
    assert narrow["final_state_sparsity"]["median"] == pytest.approx(
        wide["final_state_sparsity"]["median"] / 4, rel=0.3
    )
    assert narrow["failure_state_sparsity"]["n"] == 3 and plain["final_state_sparsity"] == {"n": 0}
    assert by_strategy(c, "narrow")["versus_baseline"]["final_state_sparsity"]["favours"] == "baseline"
    assert "final-state sparsity FS" in render_comparison_html(c)


def test_quartiles_tests_and_censored_first_failures() -> None:
    # "sharp" fails on most inputs; "blunt" on none (x never exceeds 2)
    runs = [campaign("sharp", s, fail_above=0.2) for s in range(5)] + [
        campaign("blunt", s, fail_above=2.0) for s in range(5)
    ]
    c = build_comparison(runs, baseline="blunt", alternative="less")
    sharp, blunt = by_strategy(c, "sharp"), by_strategy(c, "blunt")
    assert (sharp["found_failure"], blunt["found_failure"]) == (5, 0)
    assert blunt["summary"]["tests_to_first_failure"]["median"] == 40  # no failure: the executions, a lower bound
    firsts = [o["tests_to_first_failure"] for o in c["campaigns"] if o["strategy"] == "sharp"]
    q = sharp["summary"]["tests_to_first_failure"]
    assert q["median"] == np.median(firsts) and q["q1"] == np.percentile(firsts, 25) and q["n"] == 5
    t = sharp["versus_baseline"]["tests_to_first_failure"]
    assert t["p_value"] < 0.01 and t["a12"] == 0.0 and t["favours"] == "row"  # fewer tests: better
    assert sharp["versus_baseline"]["faults"]["favours"] == "row"
    assert "versus_baseline" not in blunt
    assert sharp["cumulative_faults"]["median"][-1] == np.median(
        [sum(r.verdict == "fail" for r in recs) for info, recs in runs[:5]]
    )


def test_refusals_name_the_problem() -> None:
    with pytest.raises(ValueError, match="at least 2 campaigns"):
        build_comparison([campaign("a", 0)])
    with pytest.raises(ValueError, match="baseline 'nope'"):
        build_comparison([campaign("a", 0), campaign("b", 1)], baseline="nope")
    with pytest.raises(ValueError, match="alternative"):
        build_comparison([campaign("a", 0), campaign("b", 1)], alternative="bigger")
    assert comparison_stem(["b", "a"]) == comparison_stem(["a", "b"]) != comparison_stem(["a", "c"])


def test_html_has_the_statistics_table_and_plots() -> None:
    c = build_comparison(
        [campaign("random", s) for s in range(3)] + [campaign("prt", s + 5, fail_above=0.5) for s in range(3)]
    )
    assert c["baseline"] == "random"
    page = render_comparison_html(c)
    assert "Against the baseline (random)" in page and "Â12" in page and "(large)" in page
    assert page.count("data:image/png;base64,") == 3
    # one script, inline: the campaigns table's sort and filter (html_kit.TABLE_SCRIPT); nothing from outside
    assert page.count("<script") == 1 and "<script src" not in page and 'id="campaigns-table"' in page


def run_campaign(gen: generator_pb2_grpc.GeneratorServiceStub, config: CampaignConfig) -> str:
    cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120).status.campaign_id
    status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid), timeout=300))[-1].status
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED
    return cid


def test_compare_rpc_and_cli_on_real_campaigns(suite: LocalSuite) -> None:
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    ids = [
        run_campaign(
            gen,
            CampaignConfig(
                name=f"cmp-{strategy}-{seed}",
                subject="cartpole",
                model="cartpole-ppo",
                strategy=strategy,
                seed=seed,
                budget={"max_executions": 24},
                batch_size=24,
                parallelism=24,
            ),
        )
        for strategy in ("random", "prt")
        for seed in (0, 1)
    ]
    analysis = analysis_pb2_grpc.AnalysisServiceStub(client_channel(suite.endpoint("analysis")))
    # output_dir is a folder under the service's report root: a client never picks a server path
    done = analysis.Compare(analysis_pb2.CompareRequest(campaign_ids=ids, output_dir="compare-rpc"), timeout=300)
    assert Path(done.json_path).parent == (suite.report_root / "compare-rpc").resolve()
    data = json.loads(done.json)
    assert data["baseline"] == "random" and [s["strategy"] for s in data["strategies"]] == ["random", "prt"]
    assert all(o["executions"] == 24 for o in data["campaigns"])
    assert len(data["shared_grid"]["descriptor_low"]) >= 1  # CartPole's oracle reports descriptors
    prt = by_strategy(data, "prt")
    assert set(prt["versus_baseline"]) >= {
        "faults",
        "tests_to_first_failure",
        "failing_behaviour_cells",
        "input_entropy",
    }
    page = Path(done.html_path).read_text()
    # two seeds a strategy: too few for a test, so a warning instead of p and Â12
    assert "Too few campaigns for a test" in page and "prt (n = 2) against random (n = 2)" in page
    assert page.count("data:image/png;base64,") == 3
    # every campaign id links to its own report, written beside the comparison and linking back
    for cid in ids:
        assert f'href="report-{cid}.html"' in page
        beside = Path(done.html_path).with_name(f"report-{cid}.html").read_text()
        assert f'href="{Path(done.html_path).name}"' in beside
    with pytest.raises(Exception, match="at least 2"):
        analysis.Compare(analysis_pb2.CompareRequest(campaign_ids=ids[:1]), timeout=60)
    with pytest.raises(Exception, match="baseline 'nope' is not among"):
        analysis.Compare(analysis_pb2.CompareRequest(campaign_ids=ids, baseline="nope"), timeout=60)

    # the CLI selects the same campaigns by name against the running suite
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "report",
            "--compare",
            "--match",
            "cmp-*",
            "--baseline",
            "prt",
            "--generator",
            suite.endpoint("generator"),
            "--analysis",
            suite.endpoint("analysis"),
            "--report-dir",
            "compare-cli",  # with --analysis: relative to that service's --report-root
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "baseline prt" in out.stdout and "random" in out.stdout
    assert list((suite.report_root / "compare-cli").glob("compare-4-*.html"))


def test_cli_refuses_empty_or_misapplied_selections() -> None:
    def gauntlet(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )

    out = gauntlet("report", "--compare")
    assert out.returncode == 2 and "--match GLOB" in out.stderr and "Traceback" not in out.stderr
    out = gauntlet("report", "some-id", "--baseline", "random")
    assert out.returncode == 2 and "--compare only" in out.stderr
