"""Do committed results still come out the same with this tree's code? (a check after moving code around)

Two checks, each optional, both run with the code of this working tree, or with ``--after REF`` that of a git ref
(extracted like the ``--before`` one: a clean commit when others' edits are half done in the working tree):

- ``--prt RUNS``: reruns PRT Table 3 campaigns (replications/replicate_prt.py, a share with ``--first-rep``) for
  the strategies and seeds asked, with the settings saved in RUNS (a committed ``prt_table3_<subject>.runs.jsonl``),
  and compares each run with the saved one: whether a failure was found and the position of the first failing
  test (so its id, t000NNNN). The executions stored when the campaign stopped are reported but not compared: a
  campaign stopped at its first failure judges cases in arrival order, so that count depends on timing.
- ``--campaign FILE --before REF``: runs ``gauntlet run FILE`` with the code of git ref REF (its tracked files
  extracted into a scratch folder and put first on PYTHONPATH, as bench/first_execution.py does, with REF's own
  plug-in entry points) and with this tree, each in a scratch folder with its own SQLite store, and compares every
  stored execution: test-case id, position, batch, values, verdict, margin, steps, reward, descriptors, reason,
  repetitions.

Prints one line per check and ``reproduce: identical=<yes|no>``, writes ``--out`` (default results/reproduce.json:
the command, the refs, every compared run), and exits 1 when anything compared differs.

    python replications/reproduce.py --prt results/prt_table3_cartpole.runs.jsonl --strategies prt,random \\
        --campaign examples/cartpole_random.yaml --before 911bb48
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_execution import extract, finish, gauntlet

# what a saved PRT run must agree on (the rest: timings, campaign ids, executions at the stop)
PRT_COMPARED = ("found", "tests")
PRT_SETTINGS = ("subject", "max_tests", "batch", "me_init", "fuzz_init")
EXECUTION_COLUMNS = (
    "test_case_id",
    "idx",
    "batch",
    "values",
    "verdict",
    "margin",
    "steps",
    "total_reward",
    "descriptors",
    "reason",
    "repetitions",
    "failed_repetitions",
)
JSON_COLUMNS = {"values", "descriptors"}  # compared parsed: the stored text's spacing is no result


def saved_prt_runs(path: Path) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[str, Any]]:
    """The runs of a saved .runs.jsonl by (strategy, seed), and the settings they share (refused if they differ)."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    settings: dict[str, Any] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        for key in PRT_SETTINGS:
            if settings.setdefault(key, row[key]) != row[key]:
                raise SystemExit(f"error: {path}:{number}: {key} is {row[key]!r}, earlier runs {settings[key]!r}")
        runs[(str(row["strategy"]), int(row["seed"]))] = row
    if not runs:
        raise SystemExit(f"error: {path} holds no saved run")
    return runs, settings


def rerun_prt(tree: Path, saved_path: Path, strategies: list[str], seeds: range, scratch: Path) -> list[dict[str, Any]]:
    """Each asked (strategy, seed) rerun with the code of `tree` and the saved settings, beside the saved run."""
    saved, settings = saved_prt_runs(saved_path)
    missing = [f"{s} seed {k}" for s in strategies for k in seeds if (s, k) not in saved]
    if missing:
        raise SystemExit(f"error: {saved_path} holds no run for {', '.join(missing[:5])}")
    command = [
        sys.executable,
        str(tree / "replications" / "replicate_prt.py"),
        "--subject", settings["subject"],
        "--strategies", ",".join(strategies),
        "--first-rep", str(seeds.start),
        "--reps", str(len(seeds)),
        "--max-tests", str(settings["max_tests"]),
        "--batch", str(settings["batch"]),
        "--me-init", str(settings["me_init"]),
        "--fuzz-init", str(settings["fuzz_init"]),
        "--entropy-tests", "0",
        "--out", str(scratch),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: replicate_prt.py exited {done.returncode}:\n{done.stderr[-3000:]}")
    fresh, _ = saved_prt_runs(scratch / f"prt_table3_{settings['subject']}.runs.jsonl")
    compared = []
    for strategy in strategies:
        for seed in seeds:
            old, new = saved[(strategy, seed)], fresh[(strategy, seed)]
            compared.append(
                {
                    "strategy": strategy,
                    "seed": seed,
                    **{f"saved_{k}": old[k] for k in (*PRT_COMPARED, "executions")},
                    **{f"rerun_{k}": new[k] for k in (*PRT_COMPARED, "executions")},
                    "identical": all(old[k] == new[k] for k in PRT_COMPARED),
                }
            )
    return compared


def with_own_entry_points(tree: Path) -> None:
    """Makes an extracted tree's plug-in entry points the ones Python finds: a ``gauntlet`` dist-info with the
    tree's own pyproject entry points, first on PYTHONPATH, shadows the installed one (importlib.metadata keeps the
    first distribution of a name), so a ref from before a module moved loads its plug-ins from where they were."""
    project = tomllib.loads((tree / "pyproject.toml").read_text())["project"]
    groups = {**project.get("entry-points", {}), "console_scripts": project.get("scripts", {})}
    info = tree / f"gauntlet-{project.get('version', '0')}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gauntlet\nVersion: {project.get('version', '0')}\n")
    lines = []
    for group, names in groups.items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in names.items()), ""]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def campaign_rows(tree: Path, scratch: Path, campaign: Path) -> list[dict[str, Any]]:
    """Every execution `gauntlet run CAMPAIGN` stores with the code of `tree`, in stored order."""
    scratch.mkdir(parents=True)
    store = scratch / "store.db"
    run = gauntlet(
        tree, scratch, "run", str(campaign.resolve()), "--id", "reproduce", "--store-url", f"sqlite:///{store}"
    )
    finish(run, f"gauntlet run {campaign} ({tree})", timeout=1800)
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        columns = ", ".join(f'"{c}"' for c in EXECUTION_COLUMNS)
        rows = db.execute(f"SELECT {columns} FROM executions WHERE campaign_id='reproduce' ORDER BY idx").fetchall()
    return [
        {c: json.loads(v) if c in JSON_COLUMNS else v for c, v in zip(EXECUTION_COLUMNS, row, strict=True)}
        for row in rows
    ]


def tree_at(ref: str, into: Path) -> str:
    """The tracked files of `ref` under `into`, with its own plug-in entry points; returns the full commit hash."""
    commit = extract(ref, into)
    with_own_entry_points(into)
    return commit


def compare_campaign(campaign: Path, before: str, after: Path, scratch: Path) -> dict[str, Any]:
    """The campaign's stored executions with REF's code and with the code of `after`, and how many differ."""
    tree = scratch / "before"
    commit = tree_at(before, tree)
    old = campaign_rows(tree, scratch / "run-before", campaign)
    new = campaign_rows(after, scratch / "run-after", campaign)
    differ = [a["test_case_id"] for a, b in zip(old, new, strict=False) if a != b]
    return {
        "campaign": str(campaign),
        "before_commit": commit,
        "rows_before": len(old),
        "rows_after": len(new),
        "failures_before": sum(r["verdict"] == "fail" for r in old),
        "failures_after": sum(r["verdict"] == "fail" for r in new),
        "invalid_after": sum(r["verdict"] == "invalid" for r in new),
        "first_failure_after": next((r["test_case_id"] for r in new if r["verdict"] == "fail"), None),
        "rows_differing": len(differ) + abs(len(old) - len(new)),
        "first_differing": differ[:5],
        "identical": len(old) == len(new) and not differ,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prt", type=Path, metavar="RUNS", help="a saved prt_table3_<subject>.runs.jsonl to rerun")
    parser.add_argument("--strategies", default="prt,random", help="with --prt: comma-separated (default prt,random)")
    parser.add_argument("--seeds", type=int, default=20, help="with --prt: seeds 0..N-1 (default 20)")
    parser.add_argument("--campaign", type=Path, help="a campaign file to run with both codes")
    parser.add_argument("--before", help="with --campaign: git ref of the earlier code")
    parser.add_argument("--after", help="git ref of the code to check (default: this working tree)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "reproduce.json", help="results file")
    args = parser.parse_args()
    if args.prt is None and args.campaign is None:
        parser.error("give --prt RUNS, --campaign FILE --before REF, or both")
    if (args.campaign is None) != (args.before is None):
        parser.error("--campaign and --before go together")
    if not 1 <= args.seeds <= 100:
        parser.error(f"--seeds must be in 1..100, got {args.seeds}")
    for flag, path in (("--prt", args.prt), ("--campaign", args.campaign)):
        if path is not None and not path.is_file():
            parser.error(f"{flag}: {path} is not a file")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if not strategies:
        parser.error("--strategies: name at least one strategy")
    started = time.monotonic()
    report: dict[str, Any] = {
        "command": shlex.join(["python", *sys.argv]),
        "working_tree_head": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip(),
    }
    identical = True
    with tempfile.TemporaryDirectory(prefix="gauntlet-reproduce-") as tmp:
        after = ROOT
        if args.after is not None:
            after = Path(tmp) / "after"
            report["after_commit"] = tree_at(args.after, after)
        if args.prt is not None:
            runs = rerun_prt(after, args.prt.resolve(), strategies, range(args.seeds), Path(tmp) / "prt")
            same = sum(r["identical"] for r in runs)
            report["prt"] = {"saved": str(args.prt), "runs": runs, "identical_runs": same}
            identical &= same == len(runs)
            print(f"prt: {same} of {len(runs)} runs find the same first failure as {args.prt}", flush=True)
        if args.campaign is not None:
            result = compare_campaign(args.campaign, args.before, after, Path(tmp))
            report["campaign"] = result
            identical &= result["identical"]
            print(
                f"campaign {args.campaign}: {result['rows_after']} executions, {result['rows_differing']} differ "
                f"from {args.before} ({result['failures_after']} failures, first {result['first_failure_after']})",
                flush=True,
            )
    report["identical"] = identical
    report["wall_s"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"reproduce: identical={'yes' if identical else 'no'}", flush=True)
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
