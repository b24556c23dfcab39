"""Replicates PRT's Table 3 (cost to the first failure) on Gauntlet's own subjects and zoo agents.

Each strategy runs `--reps` campaigns (seeds 0..reps-1) through the services with
stop-at-first-failure; a campaign without a failure within `--max-tests` counts as
`--max-tests` (as the paper counts its 100,000-test cap: the mean is then a lower bound, marked ≥,
and the table says how many runs found a failure). Prints a table with the paper's numbers
beside ours: mean ± sd of tests and seconds to the first failure, one-sided Mann–Whitney U
(baseline cost > PRT's) and Vargha–Delaney Â (P(baseline > PRT)); writes
results/prt_table3_<subject>.{md,json}; optionally (`--report-dir`) the analysis service's
comparison report of all campaigns; and ends with
`prt_vs_random_first_failure=<mean tests PRT / mean tests random>` (paper: 62.65 / 491.5 ≈ 0.13).

MAP-Elites starts with `--me-init` uniform random tests (default 100, as the PRT authors' QD code
initialises it; the QD paper used 1,000) drawn like random testing's from the same seed, so until
then its first failure is random's; the fuzzers (fuzzer, mdpfuzz, curefuzz) collect `--fuzz-init`
seeds (a random input and one mutant each) before any guidance. Both are parameters so that another
initialisation can be tried. G-Model pre-trains its diffusion model (no executions) and takes no feedback.

PRT's Table 4 (`prt_entropy:`): each strategy generates `--entropy-tests` test cases (paper: 10,000) for
`--entropy-reps` seeds, and the Kozachenko–Leonenko entropy (k = 10, inputs min–max scaled by the
parameter bounds, the PRT authors' convention) of each set is printed as mean ± sd per strategy. No episode
runs: the feedback-driven strategies are told what the PRT paper reports CartPole's reward gives them, every
test passing with the same reward (constant margin, no behaviour descriptors).

    python replications/replicate_prt.py --subject cartpole --reps 20
    python replications/replicate_prt.py --subject mountaincar_continuous --reps 5 --max-tests 2000

Every finished campaign is appended to <out>/prt_table3_<subject>[_<tag>].runs.jsonl with the settings it ran
under. `--resume` keeps that file and skips the (strategy, seed) pairs it already holds, so a long bench survives
an interruption; `--first-rep K` runs seeds K..K+reps-1 (a share of a bench split over processes or sessions,
each with its own --out, which may leave out prt or random), and `--from-runs A B ...` makes the table from
saved runs without running anything (runs with different settings are refused, naming the field):

    S="--subject mountaincar_continuous"
    python replications/replicate_prt.py $S --reps 10 --strategies random --first-rep 0 --out runs/a
    python replications/replicate_prt.py $S --reps 10 --strategies random --first-rep 10 --out runs/b
    python replications/replicate_prt.py $S --from-runs runs/a/*.runs.jsonl runs/b/*.runs.jsonl ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from rich.progress import Progress

from analysis_service.api import compare, kl_entropy
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import analysis_pb2, analysis_pb2_grpc, generator_pb2, generator_pb2_grpc
from common.server import client_channel
from generator_service.api import CampaignConfig, Result, as_test_case, make_strategy, strategies
from replications.harness import load_saved_runs, repo_relative
from simulator_service.api import get_subject

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "cartpole": "cartpole-ppo",
    "lunarlander": "lunarlander-ppo",
    "lunarlander_continuous": "lunarlander-continuous-ppo",
    "mountaincar_continuous": "mountaincar-continuous-sac",
    # the documented MuJoCo substitute for the paper's Humanoid (issue 28: humanoid-sac falls on 993 of 1,000 inputs):
    # Hopper-v5 with the initial-pose offsets widened to +-0.11, where hopper-ppo fails on 3.75 % of random inputs
    "hopper_wide": "hopper-ppo-wide",
}
# PRT paper, Table 3 (mean tests, mean seconds to the first failure over 20 runs); the paper's LL and MC are the
# continuous variants. Our strategy names -> the paper's rows (QD is our map_elites).
PAPER = {
    "cartpole": {
        "prt": (62.65, 1.85),
        "mdpfuzz": (2341.4, 465.7),
        "map_elites": (1616.5, 48.6),
        "random": (491.5, 15.2),
        "curefuzz": (2182.6, 68.4),
        "g_model": (657.5, 24.5),
    },
    "lunarlander_continuous": {
        "prt": (70.15, 1.60),
        "mdpfuzz": (616.1, 92.7),
        "map_elites": (566.9, 13.2),
        "random": (532.8, 12.7),
        "curefuzz": (613.5, 15.1),
        "g_model": (836.3, 24.2),
    },
    "mountaincar_continuous": {
        "prt": (444.3, 2.20),
        "mdpfuzz": (96.0, 4.68),
        "map_elites": (656.1, 4.23),
        "random": (2177.1, 10.26),
        "curefuzz": (1502.4, 8.42),
        "g_model": ("96192+", "968+"),
    },
    "humanoid": {
        "prt": (524.9, 165.9),
        "mdpfuzz": (1268.0, 400.1),
        "map_elites": (1789.3, 572.3),
        "random": (1261.3, 393.2),
        "curefuzz": (1116.6, 352.4),
        "g_model": (4008.2, 1310),
    },
}
# the paper ran only the continuous LunarLander, and Humanoid where we run its substitute hopper_wide: its numbers stand
# beside ours, labelled with the paper's subject
PAPER_SOURCE = {"lunarlander": "lunarlander_continuous", "hopper_wide": "humanoid"}
NOT_HERE = ("curefuzz", "g_model")  # paper rows printed even when this bench did not run them
# PRT paper, Table 4 (k = 10): entropy of 10,000 generated test cases, mean over 20 runs
PAPER_ENTROPY: dict[str, dict[str, float]] = {
    "cartpole": {
        "prt": 0.4513,
        "mdpfuzz": -0.3097,
        "curefuzz": -0.3093,
        "g_model": -22.0423,
        "map_elites": -4.3464,
        "random": 0.2142,
    },
    "lunarlander_continuous": {
        "prt": 0.1054,
        "mdpfuzz": -0.0360,
        "curefuzz": -0.0104,
        "g_model": -9.0635,
        "map_elites": -1.1395,
        "random": 0.0215,
    },
    "humanoid": {  # beside hopper_wide, the substitute: other dimensions, so the pattern compares, not the values
        "prt": 14.9516,
        "mdpfuzz": 2.3939,
        "curefuzz": 11.6711,
        "g_model": -52.3097,
        "map_elites": -80.6062,
        "random": 14.6885,
    },
    "mountaincar_continuous": {
        "prt": 0.0880,
        "mdpfuzz": -0.5727,
        "curefuzz": -0.0148,
        "g_model": -9.5217,
        "map_elites": -1.1994,
        "random": 0.0215,
    },
}
ENTROPY_K = 10


# the settings a saved run records; runs summarised together must agree on all of them
RUN_SETTINGS = ("subject", "max_tests", "batch", "me_init", "fuzz_init")


def run(
    strategy: str,
    params: dict[str, Any],
    seeds: range,
    done: dict[int, dict[str, Any]],
    args: argparse.Namespace,
    model: str,
    gen: generator_pb2_grpc.GeneratorServiceStub,
    bar: Progress,
    saved: Path,
) -> list[dict[str, Any]]:
    """One stop-at-first-failure campaign per seed; a run without a failure costs the cap (censored). Seeds in
    `done` (runs a resumed bench saved before) are not run again; each new run is appended to `saved`."""
    subject, max_tests, batch = args.subject, args.max_tests, args.batch
    runs = []
    task = bar.add_task(f"{strategy:>11s}", total=len(seeds))
    for seed in seeds:
        if seed in done:
            runs.append(done[seed])
            bar.advance(task)
            continue
        config = CampaignConfig(
            name=f"table3-{subject}-{strategy}-{seed}",
            subject=subject,
            model=model,
            strategy=strategy,
            strategy_params=params,
            seed=seed,
            budget={"max_executions": max_tests},
            batch_size=batch,
            parallelism=batch,
            stop_at_first_failure=True,
        )
        cid = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto())).status.campaign_id
        status = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid)))[-1].status
        if status.error:
            raise SystemExit(f"error: campaign {cid} ({strategy}, seed {seed}) stopped: {status.error}")
        found = status.failures > 0
        runs.append(
            {
                "campaign_id": cid,
                "seed": seed,
                "found": found,
                "executions": status.executions,
                "tests": float(status.first_failure_index) if found else float(max_tests),
                "seconds": status.first_failure_seconds if found else status.wall_seconds,
                "wall_seconds": status.wall_seconds,
            }
        )
        with saved.open("a") as stream:
            stream.write(
                json.dumps({"strategy": strategy, **{k: getattr(args, k) for k in RUN_SETTINGS}, **runs[-1]}) + "\n"
            )
        bar.advance(task)
        if not bar.console.is_terminal:  # a log file gets a line per campaign instead of the bar
            first = f"first failure at test {status.first_failure_index}" if found else f"no failure in {max_tests}"
            bar.console.print(f"{strategy} seed {seed}: {first} ({status.wall_seconds:.1f} s)")
    return runs


def _parse_run(row: dict[str, Any]) -> None:
    row["tests"], row["seconds"], row["found"] = float(row["tests"]), float(row["seconds"]), bool(row["found"])


def load_runs(paths: list[Path]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Runs saved in .runs.jsonl files, per strategy in seed order, and the settings they share
    (replications/harness.py's reader: malformed lines, mixed settings and a (strategy, seed) saved twice are refused,
    naming file:line)."""
    results, settings = load_saved_runs(paths, "strategy", RUN_SETTINGS, parse=_parse_run)
    for runs in results.values():
        for row in runs:  # the settings are the table's, not each run's
            for key in RUN_SETTINGS:
                del row[key]
    return results, settings


def mean_sd(values: list[float], censored: bool, digits: int) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{'≥' if censored else ''}{statistics.mean(values):.{digits}f} ± {sd:.{digits}f}"


def notes(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> list[str]:
    """Sentences that explain rows which are equal by construction, or have no failure at all."""
    out = []
    tests = {name: [r["tests"] for r in runs] for name, runs in results.items()}
    if "map_elites" in tests:
        first = max(tests["map_elites"])
        if first <= args.me_init:
            same = (
                " (identical to random's: the same seeds draw the same inputs)"
                if tests["map_elites"] == tests.get("random")
                else ""
            )
            out.append(
                f"map_elites: every first failure came within its {args.me_init} uniform initial tests "
                f"(latest at test {first:.0f}), before the quality-diversity search starts, so its cost is "
                f"random testing's{same}; `--me-init` shortens the initialisation."
            )
    fuzzers = [n for n in ("fuzzer", "mdpfuzz") if n in tests]
    collecting = [n for n in ("fuzzer", "mdpfuzz", "curefuzz") if n in tests]
    if len(collecting) >= 2 and len({len(tests[n]) for n in collecting}) == 1:
        same = sum(
            len({tests[n][i] for n in collecting}) == 1 and tests[collecting[0]][i] <= 2 * args.fuzz_init
            for i in range(len(tests[collecting[0]]))
        )
        if same and same < len(tests[collecting[0]]):
            out.append(
                f"{', '.join(collecting)} collect their {args.fuzz_init}-seed corpus alike (same seed, same inputs): "
                f"in {same} of {len(tests[collecting[0]])} runs the first failure came while collecting and is the "
                "same test for all of them; the other runs show their guidance."
            )
    for name in fuzzers:
        if max(tests[name]) <= 2 * args.fuzz_init and any(r["found"] for r in results[name]):
            out.append(
                f"{name}: every first failure came while collecting its {args.fuzz_init}-seed corpus (a random "
                "input and one mutant per seed), before any guidance."
            )
    if len(fuzzers) == 2 and tests["fuzzer"] == tests["mdpfuzz"] and any(r["found"] for r in results["fuzzer"]):
        out.append(
            "fuzzer and mdpfuzz share that seed-collection phase (same seed, same inputs), hence equal costs; "
            "the PRT paper excludes seed preparation from its MDPFuzz costs."
        )
    for name, runs in results.items():
        missed = sum(not r["found"] for r in runs)
        if missed == len(runs):
            out.append(f"{name}: no failure within {args.max_tests} tests in any of the {len(runs)} runs.")
        elif missed:
            out.append(
                f"{name}: {missed} of {len(runs)} runs found no failure within {args.max_tests} tests; they count "
                f"as {args.max_tests} (the paper's convention), so its mean is a lower bound (≥)."
            )
    if not any(r["found"] for runs in results.values() for r in runs):
        total = sum(len(runs) for runs in results.values()) * args.max_tests
        out.append(
            f"No strategy found a failure ({total} tests in all): with this agent the subject cannot rank "
            "strategies by their cost to the first failure (PRT's agents have at least 1 failure in 100,000 "
            "random tests), and the ratio below is 1 by construction."
        )
    return out


def table(
    results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, model: str, wall: float | None
) -> tuple[list[str], dict]:
    prt_tests = [r["tests"] for r in results["prt"]]
    prt_secs = [r["seconds"] for r in results["prt"]]
    source = PAPER_SOURCE.get(args.subject, args.subject)
    paper = PAPER.get(source, {})
    paper_label = "paper" if source == args.subject else f"paper ({source})"
    inits = ([f"MAP-Elites init {args.me_init}"] if "map_elites" in results else []) + (
        [f"fuzzer seeds {args.fuzz_init}"] if {"fuzzer", "mdpfuzz", "curefuzz"} & set(results) else []
    )
    counts = sorted({len(runs) for runs in results.values()})
    reps = f"{counts[0]} runs per strategy" if len(counts) == 1 else "runs per strategy as in the table"
    lines = [
        f"PRT Table 3 replication on `{args.subject}` ({model}), {reps}, cap {args.max_tests} "
        f"tests per run, batch {args.batch}"
        + "".join(f", {i}" for i in inits)
        + "; "
        + (
            ("campaign walls summed " if getattr(args, "wall_summed", False) else "wall ") + f"{wall / 60:.1f} min"
            if wall is not None
            else "wall not recorded"
        ),
        "",
        f"| strategy | runs with a failure | tests to 1st failure, mean ± sd | (p, Â) vs PRT | seconds, mean ± sd "
        f"| (p, Â) vs PRT | {paper_label} tests | {paper_label} seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, Any] = {}
    for name, runs in results.items():
        tests, secs = [r["tests"] for r in runs], [r["seconds"] for r in runs]
        found = sum(r["found"] for r in runs)
        censored = found < len(runs)
        row: dict[str, Any] = {
            "tests": tests,
            "seconds": secs,
            "found": [r["found"] for r in runs],
            "runs_with_failure": found,
            "mean_tests": statistics.mean(tests),
            "sd_tests": statistics.stdev(tests) if len(tests) > 1 else 0.0,
            "mean_seconds": statistics.mean(secs),
            "sd_seconds": statistics.stdev(secs) if len(secs) > 1 else 0.0,
        }
        if found == 0:
            cells = [f"no failure within {args.max_tests} tests", "", f"≥{row['mean_seconds']:.2f} (all runs)", ""]
        else:
            cells = [mean_sd(tests, censored, 1), "", mean_sd(secs, censored, 2), ""]
        if name != "prt" and (found or any(r["found"] for r in results["prt"])):  # two all-censored samples: no test
            ct, cs = compare(tests, prt_tests), compare(secs, prt_secs)
            cells[1], cells[3] = f"({ct.p_value:.2f}, {ct.a12:.2f})", f"({cs.p_value:.2f}, {cs.a12:.2f})"
            row.update(p_tests=ct.p_value, a12_tests=ct.a12, p_seconds=cs.p_value, a12_seconds=cs.a12)
        ref = paper.get(name)
        lines.append(
            f"| {name} | {found}/{len(runs)} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | "
            f"{ref[0] if ref else '-'} | {ref[1] if ref else '-'} |"
        )
        summary[name] = row
    for name in NOT_HERE:
        if name in paper and name not in results:
            lines.append(f"| {name} (paper only: not run here) | | | | | | {paper[name][0]} | {paper[name][1]} |")
    return lines, summary


def strategy_params(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each strategy's parameters in this bench (the initialisations the options set)."""
    return {
        "map_elites": {"initial_tests": args.me_init},
        "fuzzer": {"initial_tests": args.fuzz_init},
        "mdpfuzz": {"initial_tests": args.fuzz_init},
        "curefuzz": {"initial_tests": args.fuzz_init},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", default="cartpole", choices=sorted(MODELS))
    parser.add_argument("--reps", type=int, default=20, help="campaigns per strategy, seeds 0..reps-1 (paper: 20)")
    parser.add_argument("--max-tests", type=int, default=5000, help="cap per campaign (paper: 100,000)")
    parser.add_argument(
        "--batch", type=int, default=16, help="tests asked at once (adaptive strategies learn per batch)"
    )
    parser.add_argument(
        "--strategies",
        default="prt,random,map_elites,fuzzer,mdpfuzz,curefuzz,g_model",
        help="comma-separated; must include prt and random",
    )
    parser.add_argument(
        "--me-init",
        type=int,
        default=100,
        help="MAP-Elites' uniform initial tests (the PRT authors' QD code: 100; QD paper: 1,000)",
    )
    parser.add_argument(
        "--fuzz-init", type=int, default=1000, help="seeds the fuzzer/mdpfuzz/curefuzz collect first (QD paper: 1,000)"
    )
    parser.add_argument(
        "--entropy-tests",
        type=int,
        default=10_000,
        help="test cases each strategy generates for Table 4's entropy (paper: 10,000; 0 skips it)",
    )
    parser.add_argument("--entropy-reps", type=int, default=3, help="seeds per strategy for Table 4 (paper: 20)")
    parser.add_argument("--report-dir", type=Path, help="also write the analysis service's comparison report here")
    parser.add_argument("--out", type=Path, default=ROOT / "results", help="folder for prt_table3_<subject>.{md,json}")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="rewrite the table and notes from a stored "
        "prt_table3_*.json (no campaigns run); its settings replace the command line's",
    )
    parser.add_argument(
        "--tag",
        default="",
        help="suffix of the result files (prt_table3_<subject>_<tag>.md), "
        "to keep runs with other settings beside the default one",
    )
    parser.add_argument(
        "--first-rep",
        type=int,
        default=None,
        metavar="K",
        help="run seeds K..K+reps-1: a share of a bench split over processes or sessions (each with "
        "its own --out; a share may leave out prt or random and then writes no table)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the saved .runs.jsonl in --out and skip the (strategy, seed) runs it holds",
    )
    parser.add_argument(
        "--from-runs",
        type=Path,
        nargs="+",
        metavar="RUNS",
        help="make the table from these saved .runs.jsonl files (their settings replace the command "
        "line's); no campaigns run",
    )
    args = parser.parse_args()
    for flag in ("reps", "max_tests", "batch", "me_init", "fuzz_init", "entropy_reps"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.entropy_tests < 0 or 0 < args.entropy_tests <= ENTROPY_K:
        parser.error(f"--entropy-tests must be 0 (skip) or more than k = {ENTROPY_K}, got {args.entropy_tests}")
    if args.first_rep is not None and args.first_rep < 0:
        parser.error(f"--first-rep must be at least 0, got {args.first_rep}")
    if args.tag and not args.tag.replace("-", "").replace("_", "").isalnum():
        parser.error(f"--tag must be letters, digits, '-' or '_', got {args.tag!r}")
    if args.report_dir and (args.resume or args.from_runs):
        parser.error("--report-dir needs every campaign in this run's store; it cannot follow --resume or --from-runs")
    known = strategies()
    asked = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(asked) - set(known))
    if unknown:
        parser.error(f"--strategies: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if ("prt" not in asked or "random" not in asked) and args.first_rep is None:
        parser.error(
            "--strategies must include prt and random (the table compares every strategy with PRT and "
            "ends with PRT's cost relative to random's); only a share (--first-rep) may leave them out"
        )
    names = [s for s in ("prt", "random") if s in asked] + [
        s for s in dict.fromkeys(asked) if s not in ("prt", "random")
    ]
    params = strategy_params(args)
    if args.render:
        stored = json.loads(args.render.read_text())
        for key, value in stored["args"].items():  # the settings the results were measured with
            if key not in ("render", "out"):
                setattr(args, key, Path(value) if key == "report_dir" and value else value)
        if "entropy_tests" not in stored["args"]:  # measured before Table 4 existed: no entropy was asked for
            args.entropy_tests = 0
        # files written before runs recorded "found" counted a run without a failure as exactly the cap
        results = {
            name: [
                {"found": f, "tests": t, "seconds": s}
                for f, t, s in zip(
                    row.get("found", [t < args.max_tests for t in row["tests"]]), row["tests"], row["seconds"]
                )
            ]
            for name, row in stored["results"].items()
        }
        write(
            results,
            args,
            stored.get("model", MODELS[args.subject]),
            stored.get("wall_seconds"),
            stored.get("entropy"),
            compute_entropy=False,
        )
        return
    if args.from_runs:
        results, settings = load_runs(args.from_runs)
        vars(args).update(settings)  # the subject and settings the runs were measured with
        missing = [s for s in ("prt", "random") if s not in results]
        if missing:
            parser.error(f"the saved runs hold no {' or '.join(missing)} runs; the table needs both")
        args.reps = max(len(runs) for runs in results.values())
        args.strategies = ",".join(results)
        order = ["prt", "random"] + [s for s in results if s not in ("prt", "random")]
        args.wall_summed = True
        write({name: results[name] for name in order}, args, MODELS[args.subject], summed_wall(results))
        return
    model = MODELS[args.subject]
    first = args.first_rep or 0
    seeds = range(first, first + args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / f"prt_table3_{args.subject}{f'_{args.tag}' if args.tag else ''}.runs.jsonl"
    done: dict[str, list[dict[str, Any]]] = {}
    if args.resume and saved.exists():
        done, settings = load_runs([saved])
        for key, value in settings.items():
            if getattr(args, key) != value:
                parser.error(f"--resume: {saved} ran with {key} = {value!r}, this command has {getattr(args, key)!r}")
        print(f"resuming: {sum(map(len, done.values()))} runs saved in {saved} are kept")
    else:
        saved.write_text("")
    kept = {name: {r["seed"]: r for r in done.get(name, []) if r["seed"] in seeds} for name in names}
    results: dict[str, list[dict[str, Any]]] = {}
    wall = 0.0
    if all(len(kept[name]) == len(seeds) for name in names):  # a resumed bench that had finished: nothing to run
        results = {name: [kept[name][seed] for seed in seeds] for name in names}
    else:
        with (
            tempfile.TemporaryDirectory() as tmp,
            LocalSuite(
                store_url=f"sqlite:///{tmp}/table3.db",
                log_dir=Path(tmp) / "logs",
                # the analysis service writes under its report root only: make it the folder asked for
                report_root=args.report_dir or Path(tmp) / "reports",
            ) as local,
            Progress() as bar,
        ):
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            # one uncounted batch first, so that loading the model and warming the services is nobody's cost
            warm = CampaignConfig(
                name="table3-warm-up",
                subject=args.subject,
                model=model,
                budget={"max_executions": args.batch},
                batch_size=args.batch,
                parallelism=args.batch,
            )
            list(
                gen.WatchCampaign(
                    generator_pb2.WatchCampaignRequest(
                        campaign_id=gen.StartCampaign(
                            generator_pb2.StartCampaignRequest(spec=warm.to_proto())
                        ).status.campaign_id
                    )
                )
            )
            start = time.perf_counter()
            for name in names:
                results[name] = run(name, params.get(name, {}), seeds, kept[name], args, model, gen, bar, saved)
            wall = time.perf_counter() - start
            if args.report_dir:
                analysis = analysis_pb2_grpc.AnalysisServiceStub(client_channel(local.endpoint("analysis")))
                ids = [r["campaign_id"] for runs in results.values() for r in runs]
                report = analysis.Compare(
                    analysis_pb2.CompareRequest(campaign_ids=ids, baseline="prt"),
                    timeout=600,
                )
                print(f"comparison report: {report.html_path}")
    if "prt" not in results or "random" not in results:  # a share without the table's two anchors
        print(f"saved {sum(map(len, results.values()))} runs to {saved}; summarise the shares with --from-runs")
        return
    if args.resume:  # this process ran only part of the campaigns
        args.wall_summed, wall = True, summed_wall(results)
    write(results, args, model, wall)


def summed_wall(results: dict[str, list[dict[str, Any]]]) -> float:
    """The campaigns' own wall times added up (runs saved before they were recorded count their seconds)."""
    return sum(r.get("wall_seconds", r["seconds"]) for runs in results.values() for r in runs)


# Table 4 without episodes: MAP-Elites' grid over the stand-in behaviour (the 4-D normalised input when no
# descriptors are told) gets the PRT authors' 20 bins per dimension (50^4 cells would exceed pyribs' limit here)
ENTROPY_PARAMS = {"map_elites": {"cells": 20}}


def generation_entropy(
    subject: str, names: list[str], params: dict[str, dict[str, Any]], tests: int, reps: int, batch: int
) -> dict[str, dict[str, Any]]:
    """PRT's Table 4: the entropy (k = 10) of `tests` test cases each strategy generates, per seed 0..reps-1.

    No episode runs: every asked test is told back as passing with the same margin and no descriptors (what the
    PRT paper reports CartPole's reward gives the reward-guided methods: every passing test scores 500)."""
    space = get_subject(subject).space
    low, high = space.bounds()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        values = []
        for seed in range(reps):
            strategy = make_strategy(name, space, seed, {**params.get(name, {}), **ENTROPY_PARAMS.get(name, {})})
            cases: list[dict[str, Any]] = []
            while len(cases) < tests:
                asked = [dict(as_test_case(a).values) for a in strategy.ask(min(batch, tests - len(cases)))]
                if not asked:
                    break
                strategy.tell([Result(dict(v), False, 1.0) for v in asked])
                cases += asked
            x = np.array([[float(c[n]) for n in space.names] for c in cases])
            values.append(kl_entropy(x, k=ENTROPY_K, low=low, high=high))
        out[name] = {
            "values": values,
            "mean": statistics.mean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "tests": tests,
        }
    return out


def entropy_lines(entropy: dict[str, dict[str, Any]], subject: str) -> list[str]:
    """Table 4's rows (ours beside the paper's k = 10 values) for the results file."""
    source = PAPER_SOURCE.get(subject, subject)
    paper = PAPER_ENTROPY.get(source, {})
    reps = sorted({len(row["values"]) for row in entropy.values()})
    tests = sorted({row["tests"] for row in entropy.values()})
    lines = [
        f"PRT Table 4: entropy (k = {ENTROPY_K}) of {'/'.join(map(str, tests))} generated test cases, mean ± sd over "
        f"{'/'.join(map(str, reps))} seeds; no episodes (feedback-driven strategies are told every test passes "
        "with the same margin)",
        "",
        f"| strategy | entropy | paper ({source}) |",
        "|---|---|---|",
    ]
    for name, row in entropy.items():
        ref = paper.get(name)
        lines.append(f"| {name} | {row['mean']:.4f} ± {row['sd']:.4f} | {ref if ref is not None else '-'} |")
    return lines


def entropy_line(entropy: dict[str, dict[str, Any]]) -> str:
    return "prt_entropy: " + " ".join(f"{name}={row['mean']:.4f}" for name, row in entropy.items())


def command_line(args: argparse.Namespace, entropy: dict[str, dict[str, Any]] | None) -> str:
    """The command that makes this table again: from the saved runs when it was summarised from them, else the
    bench's own settings (a table made with --render keeps the settings it was measured with)."""
    cmd = ["python", "replications/replicate_prt.py", "--subject", args.subject]
    if getattr(args, "from_runs", None):
        cmd += ["--from-runs", *(repo_relative(Path(p)) for p in args.from_runs)]
    else:
        cmd += ["--reps", str(args.reps), "--max-tests", str(args.max_tests), "--batch", str(args.batch)]
        cmd += ["--strategies", args.strategies, "--me-init", str(args.me_init), "--fuzz-init", str(args.fuzz_init)]
    if entropy:  # Table 4's own size, as measured (a rendered table's command line may not say it)
        row = next(iter(entropy.values()))
        cmd += ["--entropy-tests", str(row["tests"]), "--entropy-reps", str(len(row["values"]))]
    else:
        cmd += ["--entropy-tests", "0"]
    return " ".join(cmd + (["--tag", args.tag] if args.tag else []))


def write(
    results: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
    model: str,
    wall: float | None,
    entropy: dict[str, dict[str, Any]] | None = None,
    compute_entropy: bool = True,
) -> None:
    """Prints the table and writes results/prt_table3_<subject>[_<tag>].{md,json}; with `--entropy-tests` (and
    not given a stored one) Table 4's entropy too."""
    lines, summary = table(results, args, model, wall)
    ratio = summary["prt"]["mean_tests"] / summary["random"]["mean_tests"]
    extra = notes(results, args)
    lines += [""] + [f"- {n}" for n in extra] + ([""] if extra else [])
    if entropy is None and compute_entropy and getattr(args, "entropy_tests", 0) > 0:
        entropy = generation_entropy(
            args.subject, list(results), strategy_params(args), args.entropy_tests, args.entropy_reps, args.batch
        )
    if entropy:
        lines += entropy_lines(entropy, args.subject) + ["", entropy_line(entropy)]
    command = command_line(args, entropy)
    lines += [f"Command: `{command}`", ""]
    ref = PAPER.get(PAPER_SOURCE.get(args.subject, args.subject), {})
    if ref:
        paper_ratio = (
            f"paper on {PAPER_SOURCE.get(args.subject, args.subject)}: {ref['prt'][0]} / {ref['random'][0]} = "
            f"{ref['prt'][0] / ref['random'][0]:.3f}"
        )
        lines += [f"prt_vs_random_first_failure={ratio:.3f} ({paper_ratio})"]
    else:
        lines += [f"prt_vs_random_first_failure={ratio:.3f}"]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"prt_table3_{args.subject}" + (f"_{args.tag}" if args.tag else "")
    (args.out / f"{stem}.md").write_text(text + "\n")
    stored = {
        k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, list) else v)
        for k, v in vars(args).items()
    }
    (args.out / f"{stem}.json").write_text(
        json.dumps(
            {
                "args": stored,
                "command": command,
                "model": model,
                "wall_seconds": wall,
                "notes": extra,
                "results": summary,
                **({"entropy": entropy} if entropy else {}),
            },
            indent=2,
        )
    )
    print(f"prt_vs_random_first_failure={ratio:.3f}")


if __name__ == "__main__":
    main()
