"""The QD fault-diversity paper's RQ3 on BipedalWalker: the same bench under its four behaviour spaces, one table.

RQ3 ("How does the behaviour space definition impact the performance of QD-based policy testing?", Sec. 5.7,
Figure 4) reruns the BipedalWalker experiment with four descriptor pairs. replications/replicate_qd.py runs each
space as its own subject (`bipedalwalker_obstacles` = Distance/Hull angle, and
`bipedalwalker_obstacles_{torque_jump,hip_angles,hip_speeds}`: the same subject, agent, fault and mutation, the
oracle's other descriptor pair and its grid). This script reads their saved runs, keeps the seeds every space and
method finished, refuses spaces run with other settings (budget, batch, initialisation), and writes one table:
per space and method the final distinct faults (15 codes and over the slots the walker saw), #BS and #FBS, median
[Q1, Q3], % vs random testing, one-sided Mann-Whitney p (method > random) and Vargha-Delaney Â12, beside the
paper's Figure 4 numbers. Random testing's inputs do not depend on the space, so its faults must be equal in every
space seed by seed; the table says whether they are. Writes results/qd_rq3_bipedalwalker.{md,json}:

    python replications/qd_rq3.py \\
        --runs results/qd_bipedalwalker_obstacles_reach10seeds.runs.jsonl \\
        results/qd_bipedalwalker_obstacles_torque_jump.runs.jsonl \\
        results/qd_bipedalwalker_obstacles_hip_angles.runs.jsonl \\
        results/qd_bipedalwalker_obstacles_hip_speeds.runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replications.harness import load_saved_runs, repo_relative
from replications.replicate_qd import PAPER, RUN_SETTINGS, SUBJECTS, summarise

ROOT = Path(__file__).resolve().parent.parent
SPACES = {  # subject of replicate_qd.py -> the space's descriptor pair, in the authors' order
    "bipedalwalker_obstacles": "Distance, Hull angle",
    "bipedalwalker_obstacles_torque_jump": "Torque, Jump",
    "bipedalwalker_obstacles_hip_angles": "Hip angles (leg 0, leg 1)",
    "bipedalwalker_obstacles_hip_speeds": "Hip speeds (leg 0, leg 1)",
}
# Figure 4's first column is RQ1's BipedalWalker experiment; there the paper's behaviours gain is ME's +8 % (Sec. 5.7)
FIRST_SPACE_PAPER = {"faults": {"map_elites": "+30", "novelty_search": "+56"}, "bs": {"map_elites": "+8"}}
METRICS = (("faults", "faults"), ("faults_reachable", "reachable-slot faults"), ("bs", "#BS"), ("fbs", "#FBS"))


def load_spaces(
    paths: list[Path], subjects: list[str]
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, Any]]:
    """Each space's runs per method, cut to the seeds every space and method finished; the shared settings."""
    spaces: dict[str, dict[str, list[dict[str, Any]]]] = {}
    settings: dict[str, Any] = {}
    for path, subject in zip(paths, subjects):
        results, own = load_saved_runs([path], "method", RUN_SETTINGS)
        for key, value in own.items():
            if settings.setdefault(key, value) != value:
                raise SystemExit(
                    f"error: {path}: {key} is {value!r} but the other spaces' runs have {settings[key]!r}; "
                    "the spaces must run with the same settings"
                )
        spaces[subject] = results
    methods = set.intersection(*(set(r) for r in spaces.values()))
    if "random" not in methods:
        raise SystemExit("error: every space needs random testing's runs")
    seeds = set.intersection(*({r["seed"] for r in rs} for res in spaces.values() for m, rs in res.items()))
    if len(seeds) < 2:
        raise SystemExit(f"error: {len(seeds)} seed(s) finished in every space and method; need 2")
    order: list[str] = [m for m in ("random", "map_elites", "novelty_search", "mdpfuzz", "fuzzer") if m in methods]
    kept = {s: {m: [r for r in res[m] if r["seed"] in seeds] for m in order} for s, res in spaces.items()}
    return kept, settings


def random_faults_agree(spaces: dict[str, dict[str, list[dict[str, Any]]]]) -> bool:
    """Random testing draws the same inputs in every space: its fault counts must be equal seed by seed."""
    counts = [[r["faults"][-1] for r in res["random"]] for res in spaces.values()]
    return all(c == counts[0] for c in counts)


def render(spaces: dict[str, dict[str, list[dict[str, Any]]]], summaries: dict[str, dict], settings: dict) -> str:
    seeds = len(next(iter(spaces.values()))["random"])
    lines = [
        f"QD fault-diversity RQ3 on BipedalWalker (bipedalwalker-obstacles-ppo): four behaviour spaces, {seeds} seeds "
        f"x {settings['budget']} tests per method (initial {settings['initial']}, batch {settings['batch']})",
        "",
        "Final counts: median [Q1, Q3] over seeds; % = (median - RT median) / RT median; (p, Â12): one-sided "
        'Mann-Whitney (method > random), Vargha-Delaney; paper: Figure 4 / Sec. 5.7 of "Testing for Fault '
        "Diversity in Reinforcement Learning\" (% vs RT at 5,000 tests; columns assumed in the authors' "
        "descriptor-pair order).",
        "",
        "| space | method | " + " | ".join(f"{label} | % | (p, Â12)" for _, label in METRICS) + " | paper faults % "
        "| paper #BS % |",
        "|---|---|" + "---|---|---|" * len(METRICS) + "---|---|",
    ]
    for subject, summary in summaries.items():
        paper = PAPER.get(subject, {}) if SUBJECTS[subject].oracle else FIRST_SPACE_PAPER
        for method, row in summary.items():
            cells = []
            for metric, _ in METRICS:
                m = row[metric]
                cells.append(f"{m['median']:.0f} [{m['q1']:.0f}, {m['q3']:.0f}]")
                pct = m["improvement_pct"]
                cells.append("" if method == "random" else ("nan" if pct != pct else f"{pct:+.0f}"))
                cells.append(f"({m['p_value']:.3f}, {m['a12']:.2f})" if "p_value" in m else "")
            notes = [paper.get(k, {}).get(method, "-") if method != "random" else "" for k in ("faults", "bs")]
            lines.append(f"| {SPACES[subject]} | {method} | " + " | ".join(cells) + " | " + " | ".join(notes) + " |")
    lines += [
        "",
        "Random testing's fault counts equal in every space, seed by seed (same inputs, only descriptors differ): "
        + ("yes" if random_faults_agree(spaces) else "NO"),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--runs", type=Path, nargs=4, required=True, help="saved .runs.jsonl of the four spaces, in SPACES order"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    subjects = list(SPACES)
    for subject in subjects:
        assert subject in SUBJECTS  # replicate_qd.py runs every space
    spaces, settings = load_spaces(args.runs, subjects)
    summaries = {s: summarise(s, res)[1] for s, res in spaces.items()}
    text = render(spaces, summaries, settings)
    command = "python replications/qd_rq3.py --runs " + " ".join(repo_relative(p) for p in args.runs)
    text += f"\n\nCommand: `{command}`."
    print(text)
    args.out.mkdir(exist_ok=True)
    (args.out / "qd_rq3_bipedalwalker.md").write_text(text + "\n")
    summaries_json = {
        s: {m: {k: v for k, v in row.items() if k in dict(METRICS)} for m, row in summary.items()}
        for s, summary in summaries.items()
    }
    (args.out / "qd_rq3_bipedalwalker.json").write_text(
        json.dumps(
            {
                "command": command,
                "settings": settings,
                "seeds": [r["seed"] for r in next(iter(spaces.values()))["random"]],
                "grids": {s: {"low": SUBJECTS[s].grid.low, "high": SUBJECTS[s].grid.high} for s in subjects},
                "random_faults_agree": random_faults_agree(spaces),
                "summary": summaries_json,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
