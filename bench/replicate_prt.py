"""Replicates PRT's Table 3 (cost to the first failure) on Gauntlet's own subjects and zoo agents.

Each strategy runs `--reps` campaigns (seeds 0..reps-1) through the services with
stop-at-first-failure; a campaign without a failure within `--max-tests` counts as
`--max-tests` (as the paper counts its 100,000-test cap). Prints a table with the paper's
numbers beside ours, one-sided Mann–Whitney U (baseline cost > PRT's) and Vargha–Delaney
Â (P(baseline > PRT)), writes results/prt_table3_<subject>.{md,json}, and ends with
`prt_vs_random_first_failure=<mean tests PRT / mean tests random>` (paper: 62.65 / 491.5 ≈ 0.13).

    python bench/replicate_prt.py --subject cartpole --reps 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.progress import Progress  # noqa: E402

from analysis_service.statistics import compare  # noqa: E402
from cli.launcher import LocalSuite  # noqa: E402
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc  # noqa: E402
from common.server import client_channel  # noqa: E402
from generator_service.config import CampaignConfig  # noqa: E402
from generator_service.strategies import strategies  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"cartpole": "cartpole-ppo", "lunarlander": "lunarlander-ppo",
          "lunarlander_continuous": "lunarlander-continuous-ppo", "mountaincar_continuous": "mountaincar-continuous-sac"}
# PRT paper, Table 3 (mean tests, mean seconds to the first failure over 20 runs); PRT's LL and MC are the
# continuous variants. Our strategy names -> the paper's rows.
PAPER = {
    "cartpole": {"prt": (62.65, 1.85), "mdpfuzz": (2341.4, 465.7), "map_elites": (1616.5, 48.6), "random": (491.5, 15.2)},
    "lunarlander_continuous": {"prt": (70.15, 1.60), "mdpfuzz": (616.1, 92.7), "map_elites": (566.9, 13.2),
                               "random": (532.8, 12.7)},
    "mountaincar_continuous": {"prt": (444.3, 2.20), "mdpfuzz": (96.0, 4.68), "map_elites": (656.1, 4.23),
                               "random": (2177.1, 10.26)},
}


def run(subject: str, model: str, strategy: str, reps: int, max_tests: int, batch: int,
        gen: generator_pb2_grpc.GeneratorServiceStub, bar: Progress) -> list[tuple[float, float]]:
    costs = []
    task = bar.add_task(f"{strategy:>11s}", total=reps)
    for seed in range(reps):
        config = CampaignConfig(name=f"table3-{subject}-{strategy}-{seed}", subject=subject, model=model,
                                strategy=strategy, seed=seed, budget={"max_executions": max_tests},
                                batch_size=batch, parallelism=batch, stop_at_first_failure=True)
        cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
        status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
        if status.failures:
            costs.append((float(status.first_failure_index), status.first_failure_seconds))
        else:
            costs.append((float(max_tests), status.wall_seconds))
        bar.advance(task)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", default="cartpole", choices=sorted(MODELS))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--max-tests", type=int, default=5000, help="cap per campaign (paper: 100,000)")
    parser.add_argument("--batch", type=int, default=16, help="tests asked at once (adaptive strategies learn per batch)")
    parser.add_argument("--strategies", default="prt,random,map_elites,fuzzer,mdpfuzz")
    args = parser.parse_args()
    known = strategies()
    names = [s for s in args.strategies.split(",") if s in known]
    missing = sorted(set(args.strategies.split(",")) - set(names))
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}")
    if "prt" not in names or "random" not in names:
        raise SystemExit("error: the comparison needs the prt and random strategies")

    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            LocalSuite(store_url=f"sqlite:///{tmp}/table3.db", log_dir=Path(tmp) / "logs") as local, Progress() as bar:
        gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
        for name in names:
            results[name] = run(args.subject, MODELS[args.subject], name, args.reps, args.max_tests, args.batch, gen, bar)

    prt_tests = [t for t, _ in results["prt"]]
    prt_secs = [s for _, s in results["prt"]]
    paper = PAPER.get(args.subject, {})
    lines = [f"PRT Table 3 replication on `{args.subject}` ({MODELS[args.subject]}), {args.reps} runs, cap {args.max_tests} tests, batch {args.batch}",
             "", "| strategy | tests to 1st failure (ours) | (p, Â) vs PRT | seconds (ours) | (p, Â) vs PRT | paper tests | paper seconds |",
             "|---|---|---|---|---|---|---|"]
    summary = {}
    for name, costs in results.items():
        tests, secs = [t for t, _ in costs], [s for _, s in costs]
        row = {"tests": tests, "seconds": secs, "mean_tests": statistics.mean(tests), "mean_seconds": statistics.mean(secs)}
        cells = [f"{row['mean_tests']:.1f} ± {statistics.pstdev(tests):.1f}", "", f"{row['mean_seconds']:.2f}", ""]
        if name != "prt":
            ct, cs = compare(tests, prt_tests), compare(secs, prt_secs)
            cells[1], cells[3] = f"({ct.p_value:.2f}, {ct.a12:.2f})", f"({cs.p_value:.2f}, {cs.a12:.2f})"
            row.update(p_tests=ct.p_value, a12_tests=ct.a12, p_seconds=cs.p_value, a12_seconds=cs.a12)
        ref = paper.get(name)
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | "
                     f"{ref[0] if ref else '-'} | {ref[1] if ref else '-'} |")
        summary[name] = row
    ratio = summary["prt"]["mean_tests"] / summary["random"]["mean_tests"]
    lines += ["", f"prt_vs_random_first_failure={ratio:.3f} (paper on CartPole: 62.65 / 491.5 = 0.127)"]
    text = "\n".join(lines)
    print(text)
    out = ROOT / "results"
    out.mkdir(exist_ok=True)
    (out / f"prt_table3_{args.subject}.md").write_text(text + "\n")
    (out / f"prt_table3_{args.subject}.json").write_text(json.dumps({"args": vars(args), "results": summary}, indent=2))
    print(f"prt_vs_random_first_failure={ratio:.3f}")


if __name__ == "__main__":
    main()
