"""Replicates the QD fault-diversity paper's RQ1/RQ2 (Mazouni et al., AST 2024) on Gauntlet's subjects and agents.

For one subject, every method (random testing, MAP-Elites, Novelty Search, MDPFuzz, and the plain Fuzzer) runs
`--seeds` campaigns (seeds 0..N-1, the same for every method) of `--budget` tests through the real suite
(LocalSuite: generator -> simulator -> agent -> oracle). Over each run's test sequence (asking order) it computes,
every 50 tests, analysis_service/fault_diversity.py's metrics on a grid SHARED by all methods of the subject:
distinct faults, #BS, #FBS, and FS/FFS (final-state sparsity over the final observations the generator stores
when a campaign sets keep_final_observations; runs saved before that field existed had re-run the cases). It reports the
median and quartiles over seeds, FS/FFS as the mean over runs divided by random testing's (the authors'
aggregation), one-sided Mann-Whitney U (method > random) and Vargha-Delaney Â12 on the final counts, and the
paper's numbers beside ours; writes results/qd_<subject>.{md,json,png}.

    python replications/replicate_qd.py --subject taxi_large --seeds 5 --budget 5000

One bench runs its campaigns one after another; to use two cores, split the seeds over two processes and
summarise their saved runs together (each run line records its budget, batch and initialisation, and runs with
different settings are refused):

    python replications/replicate_qd.py --subject lunarlander_qd --seeds 3 --out runs/qd-a
    python replications/replicate_qd.py --subject lunarlander_qd --seeds 2 --first-seed 3 --out runs/qd-b
    python replications/replicate_qd.py --subject lunarlander_qd \
        --from-runs runs/qd-a/qd_lunarlander_qd.runs.jsonl runs/qd-b/qd_lunarlander_qd.runs.jsonl

Choices where the paper is silent are documented in SUBJECTS below and in the README ("QD fault diversity").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from analysis_service.api import (
    Grid,
    checkpoints_for,
    compare,
    improvement,
    quartiles,
    relative_to_baseline,
    run_curves,
)
from bench.harness import campaign_executions, run_campaign
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2_grpc, oracle_pb2
from common.server import client_channel
from common.space import value_from_proto
from generator_service.api import CampaignConfig
from replications.bipedal_reach import Walker, reachable_key
from replications.harness import load_saved_runs, repo_relative
from simulator_service.api import get_subject

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("random", "map_elites", "novelty_search", "mdpfuzz", "fuzzer")
METRICS = ("faults", "bs", "fbs")
RUN_SETTINGS = ("budget", "batch", "initial", "final_states")  # saved with every run; a merged table needs one value
LABELS = {
    "faults": "distinct faults",
    "bs": "#BS (behaviour cells)",
    "fbs": "#FBS (faulty behaviour cells)",
    "fs": "FS / RT",
    "ffs": "FFS / RT",
}


def _taxi_state(obs: np.ndarray) -> np.ndarray:
    from subjects.taxi.env import TaxiLargeEnv  # the taxi pack (subjects/taxi/)

    return np.asarray(TaxiLargeEnv().decode(int(np.asarray(obs).reshape(-1)[0])), dtype=float)


@dataclass(frozen=True)
class SubjectSetup:
    model: str
    grid: Grid
    grid_note: str
    ns_threshold_raw: float  # the paper's novelty threshold in raw behaviour units
    mutation: dict[str, Any] = field(default_factory=dict)  # strategy parameters for every mutating method
    final_state: Callable[[np.ndarray], np.ndarray] = lambda obs: np.asarray(obs, dtype=float).reshape(-1)
    subject: str = ""  # the simulator's subject when the table's name differs (another agent on the same subject)
    # BipedalWalker: also count faults over the obstacle slots each failing episode saw (bipedal_reach.py)
    reachable_slots: bool = False
    oracle: str = ""  # the oracle when not the subject's own (RQ3: the same fault, another behaviour space)


SUBJECTS: dict[str, SubjectSetup] = {
    # Authors' LL edges (normalised observation units, x and vy at first contact). Their mutation is
    # N(x, sigma=5 N) on a +-1000 N range; the uniform shift with the same spread is +-8.66 N = 0.43 % of the range.
    # The agent is the paper's (RL-Zoo's PPO recipe at 1M steps): the well-trained lunarlander-ppo failed on none
    # of 5,000 random inputs of this domain.
    "lunarlander_qd": SubjectSetup(
        "lunarlander-qd-ppo",
        Grid((-0.0439, -0.2002), (0.2975, -0.0203), (50, 50)),
        "the authors' precomputed edges: x in [-0.0439, 0.2975], vy in [-0.2002, -0.0203]",
        0.005,
        {"mutation_scale": 0.00433},
    ),
    # The same subject, grid and mutation with the agent in the paper's failure regime: lunarlander-qd-ppo's recipe
    # stopped at 450k steps (results/lunarlander_qd_regime.md: random inputs fail a few per cent, not 0.1 %).
    "lunarlander_qd_450k": SubjectSetup(
        "lunarlander-qd-ppo-450k",
        Grid((-0.0439, -0.2002), (0.2975, -0.0203), (50, 50)),
        "the authors' precomputed edges: x in [-0.0439, 0.2975], vy in [-0.2002, -0.0203]",
        0.005,
        {"mutation_scale": 0.00433},
        subject="lunarlander_qd",
    ),
    # The paper says 50x50; the authors' code used one cell per integer count. Bounds [-0.5, 49.5] do both for
    # counts below 50 (counts >= 49 share the last cell). Mutation: the authors' "resample one coordinate,
    # nearby values likelier" (mutation.py integer="nearby" with p = 0: exactly one coordinate).
    "taxi_large": SubjectSetup(
        "taxi-qlearning",
        Grid((-0.5, -0.5), (49.5, 49.5), (50, 50)),
        "moves before / after pick-up in [-0.5, 49.5]: one cell per integer count (the code) on 50x50 (the paper)",
        0.9,
        {"integer_mutation": "nearby", "mutation_p": 0.0},
    ),
    # Our walker is slower than the authors' TQC: their Distance edges [9.05, 15.76] would put nearly every test in
    # the first column, so Distance spans our walker's random tests (200 inputs, seed 11: mean hull x 6.53..9.38 on
    # the env that rebuilds its Box2D world every reset; 6.48..9.42 before);
    # hull angle keeps the authors' edges. Mutation: each of the 15 codes with p = 0.1, at least one (the
    # authors'), moved to another code (nearby).
    "bipedalwalker_obstacles": SubjectSetup(
        "bipedalwalker-obstacles-ppo",
        Grid((6.0, 0.0406), (10.0, 0.3636), (50, 50)),
        "Distance (mean hull x) in [6.0, 10.0] (ours: 200 random tests of this walker span 6.53..9.38; the authors' "
        "[9.05, 15.76] fit their faster TQC walker), Hull angle in [0.0406, 0.3636] (the authors')",
        0.005,
        {"integer_mutation": "nearby", "mutation_p": 0.1},
        reachable_slots=True,
    ),
    # RQ3: the paper's three other behaviour spaces (the authors' descriptor pairs, subjects/bipedal/oracle.py),
    # same subject, agent, fault and mutation; only the oracle's descriptors and the grid change. Edges: our
    # walker's 200 random tests widened by 20 % of their range (results/bipedal_spaces.md; the authors' edges fit
    # their TQC walker and their "both legs in contact" jump).
    **{
        f"bipedalwalker_obstacles_{space}": SubjectSetup(
            "bipedalwalker-obstacles-ppo",
            Grid(low, high, (50, 50)),
            f"{note} (results/bipedal_spaces.md: our walker's 200 random tests widened by 20 % of their range)",
            0.005,
            {"integer_mutation": "nearby", "mutation_p": 0.1},
            subject="bipedalwalker_obstacles",
            reachable_slots=True,
            oracle=f"bipedal_fall_{space}",
        )
        for space, low, high, note in (
            ("torque_jump", (0.84, 0.0), (2.34, 1.0), "Torque in [0.84, 2.34], Jump in [0, 1]"),
            (
                "hip_angles",
                (-0.827, 1.0703),
                (-0.15, 1.1249),
                "leg 0 hip angle in [-0.827, -0.15], leg 1 hip angle in [1.0703, 1.1249]",
            ),
            (
                "hip_speeds",
                (-0.153, 0.019),
                (-0.024, 0.122),
                "leg 0 hip speed in [-0.153, -0.024], leg 1 hip speed in [0.019, 0.122]",
            ),
        )
    },
}

# The paper's end-of-budget numbers, in % relative to random testing ("Testing for Fault Diversity in
# Reinforcement Learning", Sections 5.5-5.7, RQ1-RQ3); None = not stated.
PAPER: dict[str, dict[str, dict[str, str]]] = {
    "bipedalwalker_obstacles": {
        "faults": {"map_elites": "+30", "novelty_search": "+56", "mdpfuzz": "+17"},
        "bs": {"map_elites": "+7..+14 (range over use-cases)", "mdpfuzz": "≈0", "novelty_search": "≈0"},
        "fbs": {"mdpfuzz": "≈-10 (RQ3 avg.)"},
        "fs": {"novelty_search": "+7.5"},
    },
    "lunarlander_qd": {
        "faults": {"map_elites": "+206", "novelty_search": "+152", "mdpfuzz": "≈0"},
        "bs": {"map_elites": "+14", "novelty_search": "+20", "mdpfuzz": "≈0"},
        "fbs": {"map_elites": "+189", "novelty_search": "+138"},
        "fs": {"map_elites": "≈0", "novelty_search": "≈0", "mdpfuzz": "≈0"},
        "ffs": {"map_elites": "down to -30", "novelty_search": "down to -30", "mdpfuzz": "+10"},
    },
    # RQ3 (Sec. 5.7, Figure 4), assuming its columns follow the authors' descriptor-pair order: ME beats RT in
    # every space, by +11.5 % at the least (the paper does not say in which); NS about -20 % in the second, +90 %
    # in the third; ME about +8 % behaviours in the first and third spaces only.
    "bipedalwalker_obstacles_torque_jump": {
        "faults": {"map_elites": "+11.5..+30 (over spaces 2-4)", "novelty_search": "≈-20"},
        "bs": {"map_elites": "≈0"},
        "fbs": {"mdpfuzz": "≈-10 (RQ3 avg.)"},
    },
    "bipedalwalker_obstacles_hip_angles": {
        "faults": {"map_elites": "+11.5..+30 (over spaces 2-4)", "novelty_search": "+90"},
        "bs": {"map_elites": "+8"},
        "fbs": {"mdpfuzz": "≈-10 (RQ3 avg.)"},
    },
    "bipedalwalker_obstacles_hip_speeds": {
        "faults": {"map_elites": "+11.5..+30 (over spaces 2-4)"},
        "bs": {"map_elites": "≈0"},
        "fbs": {"mdpfuzz": "≈-10 (RQ3 avg.)"},
    },
    "taxi_large": {
        "faults": {"map_elites": "+12", "novelty_search": "-23", "mdpfuzz": "-27"},
        "bs": {"map_elites": "+7", "novelty_search": "≈0", "mdpfuzz": "≈0"},
        "fs": {"mdpfuzz": "+40 (avg. over testing)", "map_elites": "≈0", "novelty_search": "≈0"},
        "ffs": {"mdpfuzz": "up to +50"},
    },
}


def strategy_params(subject: str, method: str, setup: SubjectSetup, initial: int = 1000) -> dict[str, Any]:
    """The parameters of one method on one subject: the shared grid, the subject's mutation, the paper's budgets
    (`initial` random tests for ME and the fuzzers: 1000 of 5000 in the paper; NS starts from its population)."""
    bounds = [[lo, hi] for lo, hi in zip(setup.grid.low, setup.grid.high)]
    params: dict[str, Any] = {} if method == "random" else dict(setup.mutation)
    if method == "map_elites":
        params.update(descriptor_bounds=bounds, cells=list(setup.grid.cells), initial_tests=initial)
    elif method == "novelty_search":
        # NS normalises behaviours by the bounds: the paper's raw threshold over the mean grid width.
        width = float(np.mean(np.subtract(setup.grid.high, setup.grid.low)))
        params.update(
            descriptor_bounds=bounds,
            initial_tests=100,
            population=100,
            archive_threshold=setup.ns_threshold_raw / width,
        )
    elif method == "mdpfuzz":
        params.update(descriptor_bounds=bounds, initial_tests=initial)
    elif method == "fuzzer":
        params.update(initial_tests=initial)
    return params


def one_run(
    gen: Any,
    subject: str,
    setup: SubjectSetup,
    method: str,
    seed: int,
    budget: int,
    batch: int,
    final_states: bool,
    initial: int,
) -> dict[str, Any]:
    space = get_subject(setup.subject or subject).space
    config = CampaignConfig(
        name=f"qd-{subject}-{method}-{seed}",
        subject=setup.subject or subject,
        model=setup.model,
        strategy=method,
        seed=seed,
        budget={"max_executions": budget},
        batch_size=batch,
        parallelism=batch,
        strategy_params=strategy_params(subject, method, setup, initial),
        keep_final_observations=final_states,
        oracle=setup.oracle,
    )
    started = time.perf_counter()
    status = run_campaign(gen, config)
    campaign_seconds = time.perf_counter() - started
    rows = campaign_executions(gen, status.campaign_id)
    executed = [e for e in rows if e.verdict != oracle_pb2.VERDICT_KIND_INVALID]
    values = [{k: value_from_proto(v) for k, v in e.test_case.values.items()} for e in executed]
    keys = [tuple(v[n] for n in space.names) for v in values]
    failed = [e.verdict == oracle_pb2.VERDICT_KIND_FAIL for e in executed]
    descriptors = [list(e.descriptors) for e in executed]
    # the generator stored each episode's final observation (keep_final_observations): no re-run needed
    states = [setup.final_state(np.asarray(e.final_observation)) for e in executed] if final_states else None
    curves = run_curves(keys, failed, descriptors, states, setup.grid, checkpoints_for(len(executed)))
    reach = reachable_faults(setup, keys, failed, descriptors) if setup.reachable_slots else {}
    return {
        "seed": seed,
        "budget": budget,
        "batch": batch,
        "initial": initial,
        "final_states": final_states,
        "tests": len(executed),
        "invalid": len(rows) - len(executed),
        "campaign_seconds": round(campaign_seconds, 1),
        "checkpoints": curves.checkpoints,
        "faults": curves.faults,
        "bs": curves.bs,
        "fbs": curves.fbs,
        "fs": curves.fs,
        "ffs": curves.ffs,
        **reach,
    }


_WALKER: Walker | None = None  # one env and agent per bench process, its replays cached by input


def reachable_faults(
    setup: SubjectSetup, keys: list[tuple[Any, ...]], failed: list[bool], descriptors: list[list[float]]
) -> dict[str, Any]:
    """Distinct faults over the obstacle slots each failing episode saw: every failing input is replayed in this
    process with the zoo agent (the executions store no per-step positions), its hull x recorded, and its key cut
    to the codes of the slots it saw. A replay that does not fail again is counted (the agent service batches
    inference; its actions may differ in the last bits) and keeps its full key."""
    global _WALKER
    if _WALKER is None:
        _WALKER = Walker(setup.model)
    started = time.process_time()
    projected: list[tuple[Any, ...]] = []
    seen: list[int] = []
    disagree = 0
    for key, fail in zip(keys, failed):
        if not fail:
            projected.append(key)  # passing tests count in no fault metric
            continue
        reach = _WALKER.reach([int(v) for v in key])
        seen.append(reach.seen)
        disagree += not reach.failed
        projected.append(reachable_key(key, reach) if reach.failed else key)
    curves = run_curves(projected, failed, descriptors, None, setup.grid, checkpoints_for(len(keys)))
    return {
        "faults_reachable": curves.faults,
        "failing_slots_seen": {str(k): v for k, v in sorted(Counter(seen).items())},
        "replays_not_failing": disagree,
        "reach_cpu_seconds": round(time.process_time() - started, 1),
    }


def _run_seconds(run: dict[str, Any]) -> float:
    """A run's wall time; runs saved before final observations were stored add the re-run that read them."""
    # (and the in-process replays that found the slots a BipedalWalker failure saw)
    return run["campaign_seconds"] + run.get("final_state_seconds", 0.0) + run.get("reach_cpu_seconds", 0.0)


def _truncate(runs: list[dict[str, Any]], metric: str) -> np.ndarray:
    """Runs' curves cut to the shortest run (invalid inputs make Taxi runs a few tests shorter)."""
    n = min(len(r[metric]) for r in runs)
    return np.asarray([r[metric][:n] for r in runs], dtype=float)


def summarise(subject: str, results: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    base = results["random"]
    summary: dict[str, Any] = {}
    reachable = all("faults_reachable" in r for rs in results.values() for r in rs)
    for method, runs in results.items():
        row: dict[str, Any] = {}
        for metric in (*METRICS, "faults_reachable") if reachable else METRICS:
            q1, med, q3 = quartiles(_truncate(runs, metric))
            finals = [r[metric][-1] for r in runs]
            row[metric] = {
                "q1": float(q1[-1]),
                "median": float(med[-1]),
                "q3": float(q3[-1]),
                "finals": finals,
                "improvement_pct": improvement(float(med[-1]), float(np.median([r[metric][-1] for r in base]))),
            }
            if method != "random":
                c = compare(finals, [r[metric][-1] for r in base])
                row[metric].update(p_value=c.p_value, a12=c.a12, effect=c.effect)
        for metric in ("fs", "ffs"):
            if all(r[metric] for r in runs) and all(r[metric] for r in base):
                n = min(_truncate(runs, metric).shape[1], _truncate(base, metric).shape[1])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    rel = relative_to_baseline(_truncate(runs, metric)[:, :n], _truncate(base, metric)[:, :n])
                row[metric] = {
                    "relative_final": float(rel[-1]),
                    "relative_mean_over_testing": float(np.nanmean(rel)) if np.isfinite(rel).any() else float("nan"),
                    "curve": [float(v) for v in rel],
                    # sparsity needs 4 distinct states; a run with fewer failing ones has no FFS
                    "runs_defined_at_end": int(np.isfinite(_truncate(runs, metric)[:, n - 1]).sum()),
                }
        row["wall_seconds"] = sum(_run_seconds(r) for r in runs)
        summary[method] = row
    return render(subject, results, summary), summary


def _pct(v: float) -> str:
    return "nan" if not np.isfinite(v) else f"{v:+.0f}"


def closing_line(summary: dict[str, Any]) -> str:
    """The bench's last line: MAP-Elites' final distinct faults against random testing's, with the one-sided
    Mann-Whitney p (ME > RT) and Â12; empty when the table has no MAP-Elites row."""
    if "map_elites" not in summary:
        return ""
    me, rt = summary["map_elites"]["faults"], summary["random"]["faults"]
    return (
        f"map_elites_vs_random_faults: map_elites={me['median']:g} random={rt['median']:g} "
        f"({_pct(me['improvement_pct'])} %) p={me['p_value']:.3f} a12={me['a12']:.2f}"
    )


def render(subject: str, results: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> str:
    setup = SUBJECTS[subject]
    runs = results["random"]
    paper = PAPER.get(subject, PAPER.get(setup.subject, {}))
    question = f"RQ3 (oracle `{setup.oracle}`)" if setup.oracle else "RQ1/RQ2"
    lines = [
        f"QD fault-diversity {question} replication on `{subject}` ({setup.model}): {len(runs)} seeds x "
        f"{runs[0]['checkpoints'][-1]}+ tests per method",
        "",
        f"Grid (shared by all methods, 50x50): {setup.grid_note}.",
        "",
        "Final counts: median [Q1, Q3] over seeds; vs RT: one-sided Mann-Whitney p (method > random), "
        "Vargha-Delaney Â12; % = (median - RT median) / RT median; "
        'paper: its % vs RT ("Testing for Fault Diversity in Reinforcement Learning", Sec. 5.5-5.7).',
        "",
        "| method | faults | vs RT (p, Â12) | % | paper % | #BS | vs RT (p, Â12) | % | paper % "
        "| #FBS | vs RT (p, Â12) | % | paper % | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, row in summary.items():
        cells = []
        for metric in METRICS:
            m = row[metric]
            cells.append(f"{m['median']:.0f} [{m['q1']:.0f}, {m['q3']:.0f}]")
            cells.append(f"({m['p_value']:.3f}, {m['a12']:.2f})" if "p_value" in m else "")
            cells.append(_pct(m["improvement_pct"]) if method != "random" else "")
            cells.append(paper.get(metric, {}).get(method, "-") if method != "random" else "")
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {row['wall_seconds']:.0f} |")
    if any("fs" in row for row in summary.values()):
        lines += [
            "",
            "Final-state sparsity relative to RT (mean over runs / RT's mean; 1.00 = RT): at the end, and "
            "averaged over the checkpoints (the authors' figures show it over testing). Sparsity (the median over "
            "distinct states of the mean distance to their 3 nearest) needs at least 4 distinct states, so a run "
            "with fewer failing final states has no FFS and the mean is over the runs that have one (FFS runs: "
            "how many at the end).",
            "",
            "| method | FS end | FS avg | paper FS % | FFS end | FFS avg | FFS runs | paper FFS % |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for method, row in summary.items():
            fs, ffs = row.get("fs", {}), row.get("ffs", {})
            lines.append(
                f"| {method} | {fs.get('relative_final', float('nan')):.2f} | "
                f"{fs.get('relative_mean_over_testing', float('nan')):.2f} | "
                f"{paper.get('fs', {}).get(method, '-') if method != 'random' else ''} | "
                f"{ffs.get('relative_final', float('nan')):.2f} | "
                f"{ffs.get('relative_mean_over_testing', float('nan')):.2f} | "
                f"{ffs.get('runs_defined_at_end', 0)}/{len(results[method])} | "
                f"{paper.get('ffs', {}).get(method, '-') if method != 'random' else ''} |"
            )
    if all("faults_reachable" in row for row in summary.values()):
        lines += [
            "",
            "Faults over the obstacle slots the walker saw (replications/bipedal_reach.py): each failing input "
            "replayed with the agent, its key cut to the codes of the slots whose obstacle came within lidar "
            "range; faults (15 codes) repeats the first table. Slots seen: failing episodes per count, summed "
            "over seeds.",
            "",
            "| method | faults (15 codes) | reachable-slot faults | vs RT (p, Â12) | % | slots seen by failures "
            "| replays not failing |",
            "|---|---|---|---|---|---|---|",
        ]
        for method, row in summary.items():
            m, f = row["faults_reachable"], row["faults"]
            seen: Counter[str] = Counter()
            for r in results[method]:
                seen.update(r["failing_slots_seen"])
            lines.append(
                f"| {method} | {f['median']:.0f} [{f['q1']:.0f}, {f['q3']:.0f}] | "
                f"{m['median']:.0f} [{m['q1']:.0f}, {m['q3']:.0f}] | "
                + (f"({m['p_value']:.3f}, {m['a12']:.2f}) | {_pct(m['improvement_pct'])}" if "p_value" in m else " | ")
                + f" | {dict(sorted(seen.items()))} | {sum(r['replays_not_failing'] for r in results[method])} |"
            )
    invalid = {m: sum(r["invalid"] for r in rs) for m, rs in results.items()}
    if any(invalid.values()):
        lines += [
            "",
            "Inputs the subject rejected (not run, not counted as tests): "
            + ", ".join(f"{m} {n}" for m, n in invalid.items()),
        ]
    return "\n".join(lines)


def plot(subject: str, results: dict[str, list[dict[str, Any]]], summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 5, figsize=(22, 4))
    for method, runs in results.items():
        x = runs[0]["checkpoints"][: min(len(r["checkpoints"]) for r in runs)]
        for ax, metric in zip(axes[:3], METRICS):
            q1, med, q3 = quartiles(_truncate(runs, metric))
            ax.plot(x, med, label=method)
            ax.fill_between(x, q1, q3, alpha=0.2)
        for ax, metric in zip(axes[3:], ("fs", "ffs")):
            curve = summary[method].get(metric, {}).get("curve")
            if curve:
                ax.plot(x[: len(curve)], curve, label=method)
    for ax, metric in zip(axes, (*METRICS, "fs", "ffs")):
        ax.set_title(LABELS[metric])
        ax.set_xlabel("tests")
    axes[0].legend()
    fig.suptitle(f"{subject}: median and quartiles over seeds (FS/FFS: mean / RT's mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", required=True, choices=sorted(SUBJECTS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="campaigns use seeds K..K+seeds-1; split one bench over processes (each with its own "
        "--out) and summarise their .runs.jsonl files together with --from-runs",
    )
    parser.add_argument("--budget", type=int, default=5000, help="tests per campaign (paper: 5000)")
    parser.add_argument(
        "--batch", type=int, default=50, help="tests asked at once (paper: 1 for ME; 50 = the metric step)"
    )
    parser.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated, random included (default {','.join(METHODS)}); with --from-runs: summarise only "
        "these, so seeds only they finished count",
    )
    parser.add_argument(
        "--initial",
        type=int,
        default=None,
        help="random tests before ME/MDPFuzz/Fuzzer search (default: budget / 5, the paper's 1000 of 5000)",
    )
    parser.add_argument(
        "--no-final-states",
        action="store_true",
        help="leave FS/FFS out (the final observations are not stored; "
        "with them the store grows by one observation a test)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument(
        "--tag",
        default="",
        help="suffix of the result files (qd_<subject>_<tag>.md), to keep a table with other methods or seeds "
        "beside the default one",
    )
    parser.add_argument(
        "--from-runs",
        type=Path,
        nargs="+",
        default=None,
        help="summarise the runs saved in these .runs.jsonl files (one line per finished run) "
        "instead of running; only seeds that every method finished count",
    )
    args = parser.parse_args()
    chosen = args.methods is not None
    methods = args.methods.split(",") if chosen else list(METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    # random is the baseline of every table; a one-seed share of a split bench makes no table and may leave it out
    if unknown or ("random" not in methods and (args.seeds > 1 or args.from_runs)):
        raise SystemExit(
            f"error: --methods must include random (except in a one-seed share) and only "
            f"{', '.join(METHODS)}; got {args.methods}"
        )
    if args.seeds < 1 or args.budget < 50 or args.first_seed < 0:
        raise SystemExit("error: --seeds must be >= 1, --first-seed >= 0 and --budget >= 50")
    if args.tag and not args.tag.replace("-", "").replace("_", "").isalnum():
        parser.error(f"--tag must be letters, digits, '-' or '_', got {args.tag!r}")
    stem = f"qd_{args.subject}" + (f"_{args.tag}" if args.tag else "")
    setup = SUBJECTS[args.subject]
    initial = args.initial if args.initial is not None else max(1, args.budget // 5)
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    args.out.mkdir(exist_ok=True)
    if args.from_runs:
        # runs saved before the bench recorded its settings lack them; the command line's then stand
        results, settings = load_saved_runs(args.from_runs, "method", RUN_SETTINGS, settings_required=False)
        for key, value in settings.items():  # the runs' settings, not this command line's
            if key == "final_states":
                args.no_final_states = not value
            else:
                setattr(args, key, value)
        initial = args.initial if args.initial is not None else max(1, args.budget // 5)
        if not results:
            raise SystemExit(f"error: {' '.join(map(str, args.from_runs))} hold no saved runs")
        if chosen:
            missing = sorted(set(methods) - set(results))
            if missing:
                raise SystemExit(f"error: --methods {args.methods}: no saved runs of {', '.join(missing)}")
            results = {m: results[m] for m in methods}
        complete = set.intersection(*({r["seed"] for r in rs} for rs in results.values()))  # seeds every method ran
        results = {m: [r for r in rs if r["seed"] in complete] for m, rs in results.items()}
        methods = list(results)
        wall = sum(_run_seconds(r) for rs in results.values() for r in rs)  # of the runs this table counts
        if "random" not in results or min(len(r) for r in results.values()) < 2:
            raise SystemExit(
                f"error: {' '.join(map(str, args.from_runs))} need random and at least 2 seeds that "
                "every method finished"
            )
    saved = args.out / f"{stem}.runs.jsonl"  # every finished run, so an interrupted bench keeps them
    with contextlib.ExitStack() as stack:
        if not args.from_runs:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            local = stack.enter_context(LocalSuite(store_url=f"sqlite:///{tmp}/qd.db", log_dir=Path(tmp) / "logs"))
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            saved.write_text("")
        # seed-major: an interrupted bench keeps whole seeds of every method
        for seed in range(args.first_seed, args.first_seed + args.seeds) if not args.from_runs else ():
            for method in methods:
                run = one_run(
                    gen, args.subject, setup, method, seed, args.budget, args.batch, not args.no_final_states, initial
                )
                results.setdefault(method, []).append(run)
                with saved.open("a") as stream:
                    stream.write(json.dumps({"method": method, **run}) + "\n")
                print(
                    f"{method} seed {seed}: {run['tests']} tests, {run['faults'][-1]} faults, #BS {run['bs'][-1]}, "
                    f"#FBS {run['fbs'][-1]} ({run['campaign_seconds']:.0f} s)",
                    flush=True,
                )
    if not args.from_runs:
        wall = time.perf_counter() - started
    if min(len(r) for r in results.values()) < 2:  # a one-seed share of a split bench: its runs are saved, no table
        print(f"saved {sum(map(len, results.values()))} runs to {saved}; summarise with --from-runs")
        return
    text, summary = summarise(args.subject, results)
    flags = " --no-final-states" if args.no_final_states else ""
    if args.first_seed and not args.from_runs:  # a share names its seeds, so its command reruns that share
        flags += f" --first-seed {args.first_seed}"
    if args.tag and not args.from_runs:  # (a summary's own command, below, names its tag)
        flags += f" --tag {args.tag}"
    seeds = min(len(r) for r in results.values())
    text += (
        f"\n\nCommand: `python replications/replicate_qd.py --subject {args.subject} --seeds {seeds} --budget "
        f"{args.budget} --batch {args.batch} --initial {initial} --methods {','.join(methods)}{flags}`; "
        f"wall {wall:.0f} s" + (" (summed over the saved runs)." if args.from_runs else ".")
    )
    if args.from_runs:
        text += (
            f" Summarised with `python replications/replicate_qd.py --subject {args.subject} --from-runs "
            + " ".join(repo_relative(p) for p in args.from_runs)
            + (f" --methods {','.join(methods)}" if chosen else "")
            + (f" --tag {args.tag}" if args.tag else "")
            + "`."
        )
        # the runs this table counts, in one file beside it (unless it is one of the inputs)
        if saved.resolve() not in {p.resolve() for p in args.from_runs}:
            saved.write_text("".join(json.dumps({"method": m, **r}) + "\n" for m, rs in results.items() for r in rs))
    if closing_line(summary):  # the line a reader or script looks for, last
        text += "\n\n" + closing_line(summary)
    print(text)
    (args.out / f"{stem}.md").write_text(text + "\n")
    (args.out / f"{stem}.json").write_text(
        json.dumps(
            {
                "args": {
                    k: str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, list) else v
                    for k, v in vars(args).items()
                },
                "wall_seconds": wall,
                "grid": {
                    "low": setup.grid.low,
                    "high": setup.grid.high,
                    "cells": setup.grid.cells,
                    "note": setup.grid_note,
                },
                "strategy_params": {m: strategy_params(args.subject, m, setup, initial) for m in methods},
                "summary": summary,
                "runs": results,
            },
            indent=1,
        )
    )
    plot(args.subject, results, summary, args.out / f"{stem}.png")


if __name__ == "__main__":
    main()
