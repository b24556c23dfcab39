"""Campaign reports: a JSON-serialisable dict and a self-contained HTML page.

matplotlib is imported lazily inside the plotting helpers, so building the JSON
report (the common path) does not pay matplotlib's import time. Plots are drawn
on analysis_service/html_kit.py's figures (off pyplot: no GUI backend, no global
state, safe in a server thread), and the page is made of its parts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from analysis_service.designate_archive_report import ArchiveView, archive_entry, archive_section
from analysis_service.html_kit import (
    escape,
    figure_png_base64,
    fmt_float,
    fmt_input,
    fmt_value,
    glossary,
    img_tag,
    new_figure,
    page,
    plot_label,
    scroll,
    table_tool,
    term,
    with_unit,
)
from analysis_service.metrics import ExecutionRecord, compute_metrics, cumulative_failures
from analysis_service.performance_report import performance_section
from analysis_service.report_files import write_files
from analysis_service.shrinks import shrinks_section

REPORT_VERSION = "1"
MAX_FAILURES_LISTED = 50
# The all-executions table keeps a page to a few MB (about 500 bytes a CartPole row): a longer campaign lists its
# first 10,000 (the store keeps them all), and says so.
MAX_EXECUTIONS_LISTED = 10_000
INFO_KEYS = ("campaign_id", "name", "subject", "model", "strategy", "seed", "state", "stop_reason", "budget")

CampaignRecords = Mapping[str, Sequence[ExecutionRecord]]
# campaign_id -> its archive (analysis_service/designate_archive_report.py)
CampaignArchives = Mapping[str, ArchiveView]


# --------------------------------------------------------------------------- JSON report


def _jsonable(value: Any) -> Any:
    """Plain-JSON copy of a value: numpy scalars -> Python, tuples -> lists.

    Non-finite floats become None so the report is strict JSON (browsers'
    JSON.parse rejects NaN/Infinity).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    return str(value)


def replay_command(campaign_id: str, test_case_id: str) -> str:
    """The command that runs a stored execution again (`gauntlet replay`), as the CLI prints it."""
    return f"gauntlet replay {campaign_id} {test_case_id}"


def _failure_entry(record: ExecutionRecord, campaign_id: str) -> dict[str, Any]:
    """One failing execution: its id (t0000079, as the CLI prints it), why it failed, its first episode's seed and
    the command that replays it, then what the oracle measured."""
    return {
        "test_case_id": record.test_case_id,
        "reason": record.reason,
        "episode_seed": record.episode_seed,
        "replay": replay_command(campaign_id, record.test_case_id) if record.test_case_id else None,
        "index": record.index,
        "values": record.values,
        "margin": record.margin,
        "steps": record.steps,
        "total_reward": record.total_reward,
        "elapsed_seconds": record.elapsed_seconds,
        "descriptors": list(record.descriptors),
    }


DIVERSITY_K = 10  # PRT's default k for the Kozachenko-Leonenko estimate
BEHAVIOUR_CELLS = 50  # grid resolution per descriptor for #BS / #FBS (the QD paper's 50 x 50)


def diversity(records: Sequence[ExecutionRecord]) -> dict[str, Any]:
    """Input entropy, failing-input sparsity, behaviour coverage and final-state sparsity of one campaign.

    Inputs are the real/integer parameters, min-max scaled over this campaign's inputs (so
    values compare across strategies only on the same subject); the behaviour grid spans the
    campaign's own descriptor range; final-state sparsity (the QD paper's FS / FFS) is over the raw
    final observations, present only when the campaign kept them. None where there is too little data.
    """
    import numpy as np

    from analysis_service.statistics import behaviour_coverage, kl_entropy, minmax_scale, sparsity

    names = [n for n in real_parameters(records)] + sorted(
        {k for r in records for k, v in r.values.items() if isinstance(v, int) and not isinstance(v, bool)}
    )
    judged = [r for r in records if r.verdict != "invalid"]
    out: dict[str, Any] = {
        "input_entropy": None,
        "failure_sparsity": None,
        "behaviour_cells": None,
        "failing_behaviour_cells": None,
        "final_state_sparsity": None,
        "failure_state_sparsity": None,
    }
    if names and len(judged) > DIVERSITY_K:
        x = minmax_scale(np.array([[r.real(n) for n in names] for r in judged]))
        out["input_entropy"] = kl_entropy(x, k=DIVERSITY_K, low=np.zeros(len(names)), high=np.ones(len(names)))
        failed = np.array([r.verdict == "fail" for r in judged])
        if failed.sum() > 3:
            out["failure_sparsity"] = sparsity(x[failed])
    with_desc = [r for r in judged if r.descriptors]
    # a grid needs one length: trace strategies record variable-length descriptors (e.g. covered states)
    if with_desc and len({len(r.descriptors) for r in with_desc}) == 1:
        d = np.array([r.descriptors for r in with_desc], dtype=float)
        bs, fbs = behaviour_coverage(
            d, [r.verdict == "fail" for r in with_desc], d.min(axis=0), d.max(axis=0), [BEHAVIOUR_CELLS] * d.shape[1]
        )
        out["behaviour_cells"], out["failing_behaviour_cells"] = bs, fbs
    out["final_state_sparsity"], out["failure_state_sparsity"] = final_state_sparsity(judged)
    return out


def final_state_sparsity(records: Sequence[ExecutionRecord]) -> tuple[float | None, float | None]:
    """The QD paper's FS and FFS over the judged records' kept final observations (raw units, 3 nearest): None
    when no final observations were kept, their lengths differ, or three or fewer distinct states exist."""
    import numpy as np

    from analysis_service.statistics import sparsity

    kept = [r for r in records if r.final_observation and r.verdict != "invalid"]
    if not kept or len({len(r.final_observation) for r in kept}) != 1:
        return None, None
    states = np.array([r.final_observation for r in kept], dtype=float)
    failing = states[np.array([r.verdict == "fail" for r in kept])]
    fs, ffs = sparsity(states), sparsity(failing) if len(failing) else float("nan")
    return (None if np.isnan(fs) else fs), (None if np.isnan(ffs) else ffs)


def _campaign_entry(
    info: Mapping[str, Any], records: Sequence[ExecutionRecord], archive: ArchiveView | None = None
) -> dict[str, Any]:
    campaign_id = str(info.get("campaign_id", ""))
    metrics = compute_metrics(campaign_id, records)
    failing = sorted((r for r in records if r.verdict == "fail"), key=lambda r: r.index)
    # Keep the known keys in a stable order, then anything extra the caller passed.
    info_out = {k: info.get(k) for k in INFO_KEYS}
    info_out.update({k: v for k, v in info.items() if k not in info_out})
    metrics_out = dataclasses.asdict(metrics)
    # No failure yet: null and found_failure false (as the comparison's found_failure), never a 0 that reads as a count
    metrics_out["found_failure"] = metrics.failures > 0
    if not metrics.failures:
        metrics_out["tests_to_first_failure"] = metrics_out["seconds_to_first_failure"] = None
    entry = {
        "info": info_out,
        "metrics": metrics_out,
        "diversity": diversity(records),
        "failures": [_failure_entry(r, campaign_id) for r in failing[:MAX_FAILURES_LISTED]],
        "failures_truncated": len(failing) > MAX_FAILURES_LISTED,
        "shrinks": [],  # filled by the analysis service from the generator's ListShrinks (shrinks.py)
    }
    if archive is not None:  # DESIGNATE's archive, or an image campaign's relevant images
        entry["archive"] = archive_entry(archive, info)
    return entry


def build_report(campaigns: list[tuple[dict, list[ExecutionRecord]]], archives: CampaignArchives | None = None) -> dict:
    """JSON-serialisable report of campaigns, each given as (info, records).

    info keys: campaign_id, name, subject, model, strategy, seed, state,
    stop_reason, budget (dict). At most 50 failing executions are listed per
    campaign, sorted by index; `failures_truncated` says when more exist.
    archives: campaign_id -> its archive view, for the campaigns that have one (an `archive` entry each).
    """
    archives = archives or {}
    report = {
        "gauntlet_report_version": REPORT_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "campaigns": [
            _campaign_entry(info, records, archives.get(str(info.get("campaign_id")))) for info, records in campaigns
        ],
    }
    return _jsonable(report)


# --------------------------------------------------------------------------- plots


def _integer_x(ax: Any) -> None:
    # Execution indices are counts: fractional ticks like 2.5 would mislead.
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def integer_y(ax: Any) -> None:
    """Counts on the y axis (failures): no half-failure ticks."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _campaign_title(info: Mapping[str, Any]) -> str:
    return str(info.get("name") or info.get("campaign_id") or "campaign")


def _plot_cumulative(report: Mapping[str, Any], records: CampaignRecords) -> str:
    fig = new_figure()
    ax = fig.add_subplot()
    drawn = False
    for entry in report["campaigns"]:
        info = entry["info"]
        x, y = cumulative_failures(records.get(str(info.get("campaign_id")), ()))
        if len(x):
            ax.step(x, y, where="post", label=plot_label(_campaign_title(info)))
            drawn = True
    if drawn:
        ax.legend(loc="upper left", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no executions", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("executions")
    _integer_x(ax)
    ax.set_ylabel("cumulative failures")
    integer_y(ax)
    ax.set_title("Cumulative failures")
    ax.grid(alpha=0.3)
    return figure_png_base64(fig)


def _plot_margins(title: str, records: Sequence[ExecutionRecord]) -> str | None:
    points = [(r.index, r.margin, r.verdict) for r in records if math.isfinite(r.margin)]
    if not points:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    for verdict, colour, marker in (
        ("pass", "0.55", "o"),
        ("invalid", "tab:orange", "x"),
        ("fail", "red", "o"),  # drawn last: on top
    ):
        sel = [(i, m) for i, m, v in points if v == verdict]
        if sel:
            xs, ys = zip(*sel)
            ax.scatter(xs, ys, s=12, linewidths=1, color=colour, marker=marker, label=verdict)
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_xlabel("execution index")
    _integer_x(ax)
    ax.set_ylabel("margin")
    ax.set_title(plot_label(f"Margin per execution: {title}"))
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_png_base64(fig)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def real_parameters(records: Sequence[ExecutionRecord]) -> list[str]:
    """Names of real-valued parameters, in the order of the first record's input.

    A parameter counts when every record that has it holds a number and at
    least one of them is a float (an all-int parameter is discrete, not real).
    """
    if not records:
        return []
    names: list[str] = []
    for name in records[0].values:
        seen = [r.values[name] for r in records if name in r.values]
        if all(_is_real(v) for v in seen) and any(isinstance(v, (float, np.floating)) for v in seen):
            names.append(name)
    return names


def numeric_parameters(records: Sequence[ExecutionRecord]) -> list[str]:
    """Real parameters, then integer ones (in the first record's order): what an input plot can place on an axis."""
    if not records:
        return []
    reals = real_parameters(records)
    ints = [
        name
        for name in records[0].values
        if name not in reals and all(_is_real(r.values[name]) for r in records if name in r.values)
    ]
    return reals + ints


def separation(values: np.ndarray, failed: np.ndarray) -> float:
    """How well one threshold on `values` tells failing from passing: the best balanced accuracy over thresholds
    (either side failing), scaled so that 0 is chance and 1 a perfect split (glossary: separation)."""
    n_fail, n_pass = int(failed.sum()), int((~failed).sum())
    if n_fail == 0 or n_pass == 0:
        return 0.0
    order = np.argsort(values, kind="stable")
    v, f = values[order], failed[order]
    fails_below = np.cumsum(f)  # failures at or below each position
    passes_below = np.cumsum(~f)
    cut = np.r_[v[1:] != v[:-1], True]  # a threshold only between distinct values
    tpr, fpr = fails_below[cut] / n_fail, passes_below[cut] / n_pass
    return float(np.max(np.abs(tpr - fpr)))  # Youden's J = 2 * balanced accuracy - 1, either direction


def input_view(records: Sequence[ExecutionRecord]) -> tuple[str, str, dict[str, float]] | None:
    """The two numeric parameters that best separate failing from passing executions (by `separation`, ties in the
    input's order), with every parameter's score; None with fewer than two numeric parameters. Without a failure
    (or a pass) the first two are shown."""
    params = numeric_parameters(records)
    judged = [r for r in records if r.verdict != "invalid" and all(p in r.values for p in params)]
    if len(params) < 2 or not judged:
        return None
    failed = np.array([r.verdict == "fail" for r in judged])
    scores = {p: separation(np.array([r.real(p) for r in judged]), failed) for p in params}
    best = sorted(params, key=lambda p: -scores[p])[:2]
    return best[0], best[1], scores


def _plot_input_scatter(
    title: str, records: Sequence[ExecutionRecord], units: Mapping[str, str]
) -> tuple[str, str] | None:
    """(png, caption) of the input view (axes labelled with the parameters' units), or None."""
    view = input_view(records)
    if view is None:
        return None
    px, py, scores = view
    rng = np.random.default_rng(0)
    ints = set(numeric_parameters(records)) - set(real_parameters(records))
    fig = new_figure(6.0, 4.5)
    ax = fig.add_subplot()
    for verdict, colour, label in (("pass", "0.6", "pass"), ("fail", "red", "fail")):
        pts = np.array(
            [(r.real(px), r.real(py)) for r in records if r.verdict == verdict and px in r.values and py in r.values]
        )
        if len(pts):
            for axis, name in ((0, px), (1, py)):
                if name in ints:  # integers would stack on one point each: spread them a little
                    pts[:, axis] = pts[:, axis] + rng.uniform(-0.2, 0.2, len(pts))
            ax.scatter(pts[:, 0], pts[:, 1], s=14, color=colour, label=label, alpha=0.7)
    ax.set_xlabel(plot_label(with_unit(px, units)))
    ax.set_ylabel(plot_label(with_unit(py, units)))
    ax.set_title(plot_label(f"Inputs: {title}"))
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    ranked = ", ".join(f"{escape(p)} {scores[p]:.2f}" for p in sorted(scores, key=lambda p: -scores[p]))
    jitter = " Integer parameters are spread by up to ±0.2 so equal inputs do not hide each other." if ints else ""
    caption = (
        f"<p class=meta>The two parameters that best tell failing from passing inputs, by {term('separation')}: "
        f"{ranked}.{jitter}</p>"
    )
    return figure_png_base64(fig), caption


def behaviour_grid(records: Sequence[ExecutionRecord], cells: int = BEHAVIOUR_CELLS) -> dict[str, Any] | None:
    """The first two behaviour descriptors on the #BS grid: per cell, executions and failures; None when the
    campaign has no fixed-length descriptors of at least two numbers."""
    judged = [r for r in records if r.verdict != "invalid" and r.descriptors]
    if not judged or len({len(r.descriptors) for r in judged}) != 1 or len(judged[0].descriptors) < 2:
        return None
    d = np.array([r.descriptors[:2] for r in judged], dtype=float)
    if not np.isfinite(d).all():
        return None
    low, high = d.min(axis=0), d.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    idx = np.minimum(((d - low) / span * cells).astype(int), cells - 1)
    visits = np.zeros((cells, cells), dtype=int)
    fails = np.zeros((cells, cells), dtype=int)
    for (i, j), r in zip(idx, judged):
        visits[j, i] += 1
        fails[j, i] += r.verdict == "fail"
    return {"low": low.tolist(), "high": high.tolist(), "visits": visits, "fails": fails}


def _plot_behaviour_grid(title: str, grid: Mapping[str, Any]) -> str:
    visits, fails = grid["visits"], grid["fails"]
    share = np.where(visits > 0, fails / np.maximum(visits, 1), np.nan)
    fig = new_figure(6.0, 4.8)
    ax = fig.add_subplot()
    (x0, y0), (x1, y1) = grid["low"], grid["high"]
    image = ax.imshow(
        share,
        origin="lower",
        extent=(x0, x1 if x1 > x0 else x0 + 1, y0, y1 if y1 > y0 else y0 + 1),
        aspect="auto",
        cmap="RdYlGn_r",
        vmin=0.0,
        vmax=1.0,
        interpolation="nearest",
    )
    fig.colorbar(image, ax=ax, label="share of failing executions")
    ax.set_xlabel("descriptor 1")
    ax.set_ylabel("descriptor 2")
    ax.set_facecolor("0.92")
    ax.set_title(
        plot_label(
            f"Behaviour grid: {title} ({int((visits > 0).sum())} cells reached, {int((fails > 0).sum())} failing)"
        )
    )
    return figure_png_base64(fig)


# --------------------------------------------------------------------------- HTML


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _fmt_budget(budget: object) -> str:
    if isinstance(budget, Mapping):
        return ", ".join(f"{k}={v}" for k, v in budget.items())
    return "" if budget is None else str(budget)


def _summary_table(report: Mapping[str, Any]) -> str:
    """Metrics as rows, campaigns as columns (a column per campaign stays narrow; many campaigns scroll sideways)."""
    entries = report["campaigns"]

    def row(label: str, cells: Sequence[str], numeric: bool = True) -> str:
        css = " class=num" if numeric else ""
        return f"<tr><th>{label}</th>" + "".join(f"<td{css}>{c}</td>" for c in cells) + "</tr>"

    def found(e: Mapping[str, Any]) -> bool:
        return bool(e["metrics"]["failures"] > 0)

    ms = [e["metrics"] for e in entries]
    ds = [e.get("diversity") or {} for e in entries]
    head = "".join(
        f'<th><a href="#{_anchor(e["info"])}">{escape(_campaign_title(e["info"]))}</a>'
        f"<br><span class=meta>{escape(e['info'].get('campaign_id'))}</span></th>"
        for e in entries
    )
    rows = [
        *(
            row(escape(label), [escape(e["info"].get(k)) for e in entries], numeric=False)
            for k, label in (
                ("subject", "subject"),
                ("model", "model"),
                ("strategy", "strategy"),
                ("seed", "seed"),
                ("state", "state"),
                ("stop_reason", "stop reason"),
            )
        ),
        row("budget", [escape(_fmt_budget(e["info"].get("budget"))) for e in entries], numeric=False),
        row(term("executions"), [str(m["executions"]) for m in ms]),
        row(term("failures"), [str(m["failures"]) for m in ms]),
        row(term("distinct_failures"), [str(m["distinct_failures"]) for m in ms]),
        row(
            term("failure_rate"),
            [
                f"{_pct(m['failure_rate'])}<br><span class=meta>[{_pct(m['failure_rate_low'])}, "
                f"{_pct(m['failure_rate_high'])}]</span>"
                for m in ms
            ],
        ),
        row(term("invalid"), [str(m["invalid"]) for m in ms]),
        row(
            term("tests_to_first_failure"),
            [str(m["tests_to_first_failure"]) if found(e) else "—" for e, m in zip(entries, ms)],
        ),
        row(
            term("seconds_to_first_failure"),
            [fmt_float(m["seconds_to_first_failure"], 1) if found(e) else "—" for e, m in zip(entries, ms)],
        ),
        row(term("steps"), [str(m["steps"]) for m in ms]),
        row(term("wall_seconds"), [fmt_float(m["wall_seconds"], 1) for m in ms]),
        row(term("input_entropy", f"input entropy (k={DIVERSITY_K})"), [_num(d.get("input_entropy"), 3) for d in ds]),
        row(term("failure_sparsity"), [_num(d.get("failure_sparsity"), 3) for d in ds]),
        row(
            term("bs"),
            [
                "—" if d.get("behaviour_cells") is None else f"{d['behaviour_cells']} / {d['failing_behaviour_cells']}"
                for d in ds
            ],
        ),
        row(
            term("fs", "final-state sparsity FS / FFS (3-NN)"),
            [
                "—"
                if d.get("final_state_sparsity") is None
                else f"{_num(d['final_state_sparsity'], 3)} / {_num(d.get('failure_state_sparsity'), 3)}"
                for d in ds
            ],
        ),
    ]
    return scroll(f"<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _num(v: Any, digits: int) -> str:
    return "—" if v is None else fmt_float(v, digits)


def _anchor(info: Mapping[str, Any]) -> str:
    """The id of a campaign's section in the page (ids are [A-Za-z0-9._-]; anything else becomes '-')."""
    raw = str(info.get("campaign_id") or _campaign_title(info))
    return "campaign-" + "".join(c if c.isalnum() or c in "._-" else "-" for c in raw)


def _units(entry: Mapping[str, Any]) -> Mapping[str, str]:
    """Parameter name -> unit, as the subject declares them (the analysis service asks the generator)."""
    return entry["info"].get("units") or {}


def _failures_table(entry: Mapping[str, Any]) -> str:
    failures = entry["failures"]
    units = _units(entry)
    if not failures:
        return '<div class="nofail">no failures found</div>'
    rows = "".join(
        "<tr>"
        f"<td><code>{escape(f.get('test_case_id') or str(f['index']))}</code></td>"
        f"<td>{escape(f.get('reason') or '')}</td>"
        f"<td class=num>{fmt_float(f['margin'], 3)}</td>"
        f"<td class=num>{fmt_float(f['total_reward'], 2)}</td>"
        f"<td class=num>{f['steps']}</td>"
        f"<td class=num>{fmt_float(f['elapsed_seconds'], 1)}</td>"
        f"<td><code>{escape(fmt_input(f['values'], units))}</code></td>"
        f"<td><code>{escape(_descriptors_text(f.get('descriptors') or []))}</code></td>"
        f"<td class=num>{'' if f.get('episode_seed') is None else f['episode_seed']}</td>"
        f"<td><code>{escape(f.get('replay') or '')}</code></td>"
        "</tr>"
        for f in failures
    )
    note = ""
    if entry.get("failures_truncated"):
        total = entry["metrics"]["failures"]
        note = f'<p class="warn">showing the first {len(failures)} of {total} failures</p>'
    head = (
        f"<th>test case</th><th>reason</th><th>{term('margin')}</th><th>total reward</th><th>steps</th>"
        "<th>elapsed s</th>"
        f"<th>input</th><th>{term('descriptors', 'descriptors')}</th><th>episode seed</th><th>replay</th>"
    )
    return note + table_tool(f"{_anchor(entry['info'])}-failures", head, rows, "failures", "reason:step")


def _cell(value: object, digits: int = 4) -> str:
    """A sortable cell: numbers rounded for the eye, the raw value in data-v for the sort."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        raw = float(value)
        if math.isfinite(raw):
            return f'<td class=num data-v="{raw!r}">{escape(fmt_value(value, digits))}</td>'
    return f"<td>{escape('' if value is None else fmt_value(value, digits))}</td>"


def _executions_table(entry: Mapping[str, Any], records: Sequence[ExecutionRecord]) -> str:
    """Every execution of the campaign, invalid inputs included, one column per input parameter: sortable and
    filterable in the page (html_kit.table_tool)."""
    if not records:
        return ""
    names = list(dict.fromkeys(k for r in records for k in r.values))
    units = _units(entry)
    shown = sorted(records, key=lambda r: r.index)[:MAX_EXECUTIONS_LISTED]
    described = any(r.descriptors for r in shown)
    head = (
        "<th>#</th><th>test case</th><th>verdict</th><th>reason</th>"
        f"<th>{term('margin')}</th><th>total reward</th><th>steps</th><th>elapsed s</th>"
        + "".join(
            f'<th data-name="{escape(n)}">{escape(n)}'
            + (f" <span class=meta>[{escape(units[n])}]</span>" if units.get(n) else "")
            + "</th>"
            for n in names
        )
        + (f"<th>{term('descriptors')}</th>" if described else "")
    )
    rows = "".join(
        f'<tr class="{escape(r.verdict)}">'
        + _cell(r.index)
        + f"<td><code>{escape(r.test_case_id)}</code></td><td>{escape(r.verdict)}</td><td>{escape(r.reason)}</td>"
        + _cell(r.margin)
        + _cell(r.total_reward)
        + _cell(r.steps)
        + _cell(r.elapsed_seconds)
        + "".join(_cell(r.values.get(n)) for n in names)
        + (f"<td><code>{escape(_descriptors_text(r.descriptors))}</code></td>" if described else "")
        + "</tr>"
        for r in shown
    )
    note = (
        f'<p class="warn">showing the first {len(shown)} of {len(records)} executions</p>'
        if len(shown) < len(records)
        else ""
    )
    table = table_tool(f"{_anchor(entry['info'])}-executions", head, rows, "executions", "verdict:fail")
    return (
        "<h3>All executions</h3>"
        f"<details{' open' if len(shown) <= 500 else ''}><summary>{len(records)} executions "
        "(click a column to sort, type to filter)</summary>"
        f"{note}{table}</details>"
    )


SHOWN_DESCRIPTORS = 4  # an image oracle records hundreds (features): the table shows the first few


def _descriptors_text(values: Sequence[float]) -> str:
    if not values:
        return ""
    shown = fmt_value(list(values[:SHOWN_DESCRIPTORS]), 3)
    return shown if len(values) <= SHOWN_DESCRIPTORS else f"{shown} +{len(values) - SHOWN_DESCRIPTORS} more"


def _filmstrips(entry: Mapping[str, Any], pngs: Mapping[str, str]) -> str:
    """The campaign's first distinct failures, replayed, each as a row of frames (analysis_service/filmstrips.py)."""
    strips = entry.get("filmstrips") or []
    if not strips:
        return ""
    parts = ["<h3>First failures, replayed</h3>"]
    for s in strips:
        tid = str(s["test_case_id"])
        parts.append(f"<p class=meta><code>{escape(tid)}</code>: {escape(s.get('reason') or '')}</p>")
        if tid in pngs:
            parts.append(img_tag(pngs[tid], f"frames of {tid}, from the reset to the end of the episode"))
        if s.get("note"):
            parts.append(f'<p class="warn">{escape(s["note"])}</p>')
    return "".join(parts)


def _campaign_section(
    entry: Mapping[str, Any],
    records: Sequence[ExecutionRecord],
    archive: ArchiveView | None = None,
    strips: Mapping[str, str] | None = None,
) -> str:
    title = _campaign_title(entry["info"])
    parts = [f'<section id="{_anchor(entry["info"])}"><h2>{escape(title)}</h2>']
    margin_png = _plot_margins(title, records)
    if margin_png:
        parts.append(f"<p class=meta>The oracle's {term('margin')} of every execution.</p>")
        parts.append(img_tag(margin_png, f"margin per execution, {title}"))
    scatter = _plot_input_scatter(title, records, _units(entry))
    if scatter:
        parts.append(scatter[1])
        parts.append(img_tag(scatter[0], f"inputs, {title}"))
    grid = behaviour_grid(records)
    if grid is not None:
        parts.append(
            f"<p class=meta>The first two {term('descriptors')} on the {term('bs', '#BS')} grid "
            f"({BEHAVIOUR_CELLS} cells each): colour = share of failing executions in a cell, grey = not reached.</p>"
        )
        parts.append(img_tag(_plot_behaviour_grid(title, grid), f"behaviour grid, {title}"))
    parts.append(performance_section(title, records))
    parts.append("<h3>Failing inputs</h3>")
    parts.append(_failures_table(entry))
    parts.append(_executions_table(entry, records))
    parts.append(_filmstrips(entry, strips or {}))
    parts.append(shrinks_section(entry.get("shrinks") or []))
    if archive is not None and "archive" in entry:
        parts.append(archive_section(entry["archive"], archive, title))
    parts.append("</section>")
    return "".join(parts)


def render_html(
    report: dict,
    records_by_campaign: CampaignRecords,
    archives: CampaignArchives | None = None,
    links: Sequence[tuple[str, str]] = (),
    filmstrips: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """Self-contained HTML page for a report from `build_report`.

    filmstrips: campaign_id -> test case id -> base64 PNG of the frames its entry's "filmstrips" list names.

    records_by_campaign maps campaign_id -> its execution records (the plots
    need every execution, the report only lists failures); archives, the archive
    views `build_report` was given (their image grids); links, (text, relative href) pairs shown under the title
    (e.g. the comparison this report was written beside). Plots are inline
    base64 PNGs and the CSS is inline, so the page is one file. Every
    user-provided string is passed through html.escape.
    """
    total_failures = sum(e["metrics"]["failures"] for e in report["campaigns"])
    banner = '<div class="nofail">no failures found</div>' if total_failures == 0 else ""
    archives = archives or {}
    sections = "".join(
        _campaign_section(
            e,
            records_by_campaign.get(str(e["info"].get("campaign_id")), ()),
            archives.get(str(e["info"].get("campaign_id"))),
            (filmstrips or {}).get(str(e["info"].get("campaign_id"))),
        )
        for e in report["campaigns"]
    )
    nav = (
        "<nav class=links>"
        + " · ".join(f'<a href="{escape(href)}">{escape(text)}</a>' for text, href in links)
        + "</nav>"
        if links
        else ""
    )
    body = (
        "<h1>Gauntlet report</h1>"
        f"<p class=meta>generated {escape(report.get('generated_at'))} · "
        f"report version {escape(report.get('gauntlet_report_version'))} · "
        '<a href="#glossary">glossary</a></p>'
        f"{nav}{banner}"
        "<h2>Summary</h2>"
        f"{_summary_table(report)}"
        f"{img_tag(_plot_cumulative(report, records_by_campaign), 'cumulative failures vs executions')}"
        f"{sections}"
    )
    return page("Gauntlet report", body + glossary(body))


def report_stem(campaign_ids: Sequence[str]) -> str:
    """report-<id> for one campaign; report-<n>-<hash> for several (ids joined would pass a file name's length and
    could collide: "a-b"+"c" and "a"+"b-c"), hashed in the order given, as the report lists them."""
    if len(campaign_ids) == 1:
        return f"report-{campaign_ids[0]}"
    digest = hashlib.sha1("\n".join(campaign_ids).encode()).hexdigest()[:10]
    return f"report-{len(campaign_ids)}-{digest}"


def write_report(
    report: dict,
    html: str,
    root: Path,
    stem: str,
    parts: tuple[str, ...] = (),
    field: str = "output_dir",
    root_name: str = "the report root",
) -> tuple[Path, Path]:
    """Write `<stem>.json` (indent 2) and `<stem>.html` into root/parts without following a link (see
    analysis_service/report_files.py; `field` and `root_name` word a refusal); return both paths."""
    # A stem with a separator would write outside the folder.
    if not stem or stem in (".", "..") or Path(stem).name != stem:
        raise ValueError(f"stem must be a plain file name, got {stem!r}")
    files = {
        f"{stem}.json": (json.dumps(report, indent=2, allow_nan=False) + "\n").encode("utf-8"),
        f"{stem}.html": html.encode("utf-8"),
    }
    folder = write_files(root, parts, files, field, root_name)
    return folder / f"{stem}.json", folder / f"{stem}.html"
