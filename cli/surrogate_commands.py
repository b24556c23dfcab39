"""`gauntlet surrogate train|show`: Indago's surrogate failure predictors (generator_service/surrogates)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.errors import UserError

console = Console()


def run_surrogate(args: argparse.Namespace) -> None:
    try:
        if args.surrogate_command == "train":
            train(args)
        else:
            show(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def train(args: argparse.Namespace) -> None:
    from offline.surrogate_training import GRIDS, default_out_dir, train_zoo_surrogate, zoo_model

    zoo_model(args.model, args.model_root)  # an unknown model fails before the slow imports
    out: Path = args.out or default_out_dir(args.model, args.kind)
    grid = GRIDS[args.grid]
    with Progress(
        TextColumn(f"[bold]training {args.kind} for {args.model} ({grid.name} grid, {args.features} features)"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("grid", total=grid.size, last="")

        def progress(done: int, total: int, record: Mapping[str, Any]) -> None:
            val = (record.get("metrics") or {}).get("validation") or {}
            last = f"filter {record['filter_percent']:g} % / {record['layers']} layer(s) / seed {record['seed']}: " + (
                f"skipped ({record['skipped']})"
                if "skipped" in record
                else f"val precision {_pct(val.get('precision'))} recall {_pct(val.get('recall'))}"
            )
            bar.update(task, completed=done, last=last)

        path = train_zoo_surrogate(
            args.model,
            kind=args.kind,
            grid=grid,
            out_dir=out,
            model_root=args.model_root,
            progress=progress,
            features=args.features,
        )
    console.print(f"surrogate: {path}")
    _print_summary(path)
    console.print(usage_hint(path))


def usage_hint(path: Path, root: Path | None = None) -> str:
    """How a campaign names the artifact at `path`: relative to the generator's artifact root (`root`, default the
    one `gauntlet run`/`up` give their generator), which is how the generator resolves it; or, for an artifact
    outside that root, that it must be moved under it (the generator refuses any other path)."""
    from cli.launcher import LOCAL_ARTIFACT_ROOT

    root = LOCAL_ARTIFACT_ROOT if root is None else root
    base, where = root.resolve(), Path(path).resolve()
    if base in where.parents:
        return (
            f"use it: strategy indago with strategy_params {{surrogate: {where.relative_to(base).as_posix()}}} "
            f"(relative to the generator's artifact root, {root}/ for gauntlet run and up)"
        )
    return (
        f"note: {path} is outside {root}/, the generator's artifact root for gauntlet run and up; a campaign names "
        f"a surrogate relative to its generator's --artifact-root, so move it there (e.g. {root}/surrogates/) first"
    )


def show(args: argparse.Namespace) -> None:
    from generator_service.surrogates.artifact import WEIGHTS_FILE, read_meta

    meta = read_meta(args.dir)
    if not (Path(args.dir) / WEIGHTS_FILE).exists():
        raise ValueError(f"surrogate artifact {args.dir} has no {WEIGHTS_FILE}")
    if args.json:
        console.print_json(json.dumps(meta))
        return
    _print_summary(Path(args.dir), meta)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _print_summary(path: Path, meta: Mapping[str, Any] | None = None) -> None:
    from generator_service.surrogates.artifact import read_meta

    meta = meta or read_meta(path)
    log = meta["log"]
    facts = Table(title=f"Surrogate {path}", show_header=False)
    facts.add_column("key", style="bold")
    facts.add_column("value")
    arch = meta.get("architecture", {})
    rows = [
        ("kind", meta["kind"]),
        ("subject / model", f"{meta['subject']} / {meta.get('model') or '-'}"),
        ("created", meta["created_at"]),
        ("log", f"{log['path']} ({log['episodes']} episodes, {log['failures']} failures)"),
        ("log sha256", log["sha256"]),
        (
            "selected",
            f"filter {meta['filter_percent']:g} %, {meta['layers']} hidden layer(s) of "
            f"{arch.get('hidden_units', 32)}, seed {meta['seed']}",
        ),
        ("selection", meta.get("selection", {}).get("rule", "-")),
        ("features", (meta.get("features") or {"kind": "config"})["kind"]),
        ("grid", _grid_text(meta)),
        ("format", str(meta["format_version"])),
    ]
    note = meta.get("selection", {}).get("note")
    if note:
        rows.append(("note", note))
    for k, v in rows:
        facts.add_row(k, str(v))
    console.print(facts)
    scores = Table(title="Failure prediction (failure = positive class)")
    regressor = meta["kind"] == "regressor"
    for col in ("set", "rows", "failures", "precision", "recall", "F1", "AUC") + (("MSE",) if regressor else ()):
        scores.add_column(col)
    for name in ("validation", "held_out"):
        m = meta["metrics"].get(name)
        if m:
            row = [
                name.replace("_", "-"),
                str(m["rows"]),
                str(m["failures"]),
                _pct(m["precision"]),
                _pct(m["recall"]),
                _pct(m["f1"]),
                "-" if m.get("auc") is None else f"{m['auc']:.3f}",
            ]
            if regressor:
                row.append("-" if m.get("mse") is None else f"{m['mse']:.4f}")
            scores.add_row(*row)
    console.print(scores)


def _grid_text(meta: Mapping[str, Any]) -> str:
    g = meta.get("grid")
    if not g:
        return "-"
    sel = meta.get("selection", {})
    return (
        f"{g['name']}: filters {', '.join(f'{f:g}' for f in g['filters'])} % x layers "
        f"{', '.join(map(str, g['layers']))} x {g['seeds']} seed(s); {sel.get('trained', '?')} trained, "
        f"{len(sel.get('skipped', []))} skipped"
    )
