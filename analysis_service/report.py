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
from analysis_service.html_kit import CSS, escape, figure_png_base64, fmt_float, img_tag, new_figure, plot_label
from analysis_service.metrics import ExecutionRecord, compute_metrics, cumulative_failures
from analysis_service.performance_report import performance_section
from analysis_service.report_files import write_files

REPORT_VERSION = "1"
MAX_FAILURES_LISTED = 50
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
    entry = {
        "info": info_out,
        "metrics": dataclasses.asdict(metrics),
        "diversity": diversity(records),
        "failures": [_failure_entry(r, campaign_id) for r in failing[:MAX_FAILURES_LISTED]],
        "failures_truncated": len(failing) > MAX_FAILURES_LISTED,
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


def _plot_input_scatter(title: str, records: Sequence[ExecutionRecord]) -> str | None:
    params = real_parameters(records)
    if len(params) < 2:
        return None
    px, py = params[:2]
    fig = new_figure(5.5, 4.5)
    ax = fig.add_subplot()
    for verdict, colour, label in (("pass", "0.6", "pass"), ("fail", "red", "fail")):
        pts = [(r.real(px), r.real(py)) for r in records if r.verdict == verdict and px in r.values and py in r.values]
        if pts:
            xs, ys = zip(*pts)
            ax.scatter(xs, ys, s=14, color=colour, label=label, alpha=0.8)
    ax.set_xlabel(plot_label(px))
    ax.set_ylabel(plot_label(py))
    ax.set_title(plot_label(f"Inputs: {title}"))
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_png_base64(fig)


# --------------------------------------------------------------------------- HTML


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _fmt_budget(budget: object) -> str:
    if isinstance(budget, Mapping):
        return ", ".join(f"{k}={v}" for k, v in budget.items())
    return "" if budget is None else str(budget)


def _summary_table(report: Mapping[str, Any]) -> str:
    headers = (
        "campaign",
        "subject",
        "model",
        "strategy",
        "seed",
        "state",
        "stop reason",
        "budget",
        "executions",
        "failures",
        "distinct failures",
        "failure rate [95% CI]",
        "invalid",
        "tests to 1st failure",
        "seconds to 1st failure",
        "steps",
        "wall seconds",
        f"input entropy (k={DIVERSITY_K})",
        "failing-input sparsity (3-NN)",
        "#BS / #FBS",
        "final-state sparsity FS / FFS (3-NN)",
    )
    rows = []
    for entry in report["campaigns"]:
        info, m = entry["info"], entry["metrics"]
        found = m["failures"] > 0
        cells = [
            f"<td>{escape(_campaign_title(info))}<br><span class=meta>{escape(info.get('campaign_id'))}</span></td>",
            *(
                f"<td>{escape(info.get(k))}</td>"
                for k in ("subject", "model", "strategy", "seed", "state", "stop_reason")
            ),
            f"<td>{escape(_fmt_budget(info.get('budget')))}</td>",
            f"<td class=num>{m['executions']}</td>",
            f"<td class=num>{m['failures']}</td>",
            f"<td class=num>{m['distinct_failures']}</td>",
            f"<td class=num>{_pct(m['failure_rate'])} "
            f"[{_pct(m['failure_rate_low'])}, {_pct(m['failure_rate_high'])}]</td>",
            f"<td class=num>{m['invalid']}</td>",
            f"<td class=num>{m['tests_to_first_failure'] if found else '—'}</td>",
            f"<td class=num>{fmt_float(m['seconds_to_first_failure'], 1) if found else '—'}</td>",
            f"<td class=num>{m['steps']}</td>",
            f"<td class=num>{fmt_float(m['wall_seconds'], 1)}</td>",
            *_diversity_cells(entry.get("diversity") or {}),
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _diversity_cells(d: Mapping[str, Any]) -> list[str]:
    def num(v: Any, digits: int) -> str:
        return "—" if v is None else fmt_float(v, digits)

    cells = "—" if d.get("behaviour_cells") is None else f"{d['behaviour_cells']} / {d['failing_behaviour_cells']}"
    states = (
        "—"
        if d.get("final_state_sparsity") is None
        else f"{num(d['final_state_sparsity'], 3)} / {num(d.get('failure_state_sparsity'), 3)}"
    )
    return [
        f"<td class=num>{num(d.get('input_entropy'), 3)}</td>",
        f"<td class=num>{num(d.get('failure_sparsity'), 3)}</td>",
        f"<td class=num>{cells}</td>",
        f"<td class=num>{states}</td>",
    ]


def _failures_table(entry: Mapping[str, Any]) -> str:
    failures = entry["failures"]
    if not failures:
        return '<div class="nofail">no failures found</div>'
    rows = "".join(
        "<tr>"
        f"<td><code>{escape(f.get('test_case_id') or str(f['index']))}</code></td>"
        f"<td>{escape(f.get('reason') or '')}</td>"
        f"<td class=num>{fmt_float(f['margin'], 4)}</td>"
        f"<td class=num>{fmt_float(f['total_reward'], 2)}</td>"
        f"<td class=num>{f['steps']}</td>"
        f"<td class=num>{fmt_float(f['elapsed_seconds'], 1)}</td>"
        f"<td><code>{escape(json.dumps(f['values'], sort_keys=True))}</code></td>"
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
        "<tr><th>test case</th><th>reason</th><th>margin</th><th>total reward</th><th>steps</th><th>elapsed s</th>"
        "<th>input</th><th>episode seed</th><th>replay</th></tr>"
    )
    return f"{note}<table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def _campaign_section(
    entry: Mapping[str, Any], records: Sequence[ExecutionRecord], archive: ArchiveView | None = None
) -> str:
    title = _campaign_title(entry["info"])
    parts = [f"<section><h2>{escape(title)}</h2>"]
    margin_png = _plot_margins(title, records)
    if margin_png:
        parts.append(img_tag(margin_png, f"margin per execution, {title}"))
    scatter_png = _plot_input_scatter(title, records)
    if scatter_png:
        parts.append(img_tag(scatter_png, f"inputs, {title}"))
    parts.append(performance_section(title, records))
    parts.append("<h3>Failing inputs</h3>")
    parts.append(_failures_table(entry))
    if archive is not None and "archive" in entry:
        parts.append(archive_section(entry["archive"], archive, title))
    parts.append("</section>")
    return "".join(parts)


def render_html(report: dict, records_by_campaign: CampaignRecords, archives: CampaignArchives | None = None) -> str:
    """Self-contained HTML page for a report from `build_report`.

    records_by_campaign maps campaign_id -> its execution records (the plots
    need every execution, the report only lists failures); archives, the archive
    views `build_report` was given (their image grids). Plots are inline
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
        )
        for e in report["campaigns"]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Gauntlet report</title>"
        f"<style>{CSS}</style></head><body>"
        "<h1>Gauntlet report</h1>"
        f"<p class=meta>generated {escape(report.get('generated_at'))} · "
        f"report version {escape(report.get('gauntlet_report_version'))}</p>"
        f"{banner}"
        "<h2>Summary</h2>"
        f"{_summary_table(report)}"
        f"{img_tag(_plot_cumulative(report, records_by_campaign), 'cumulative failures vs executions')}"
        f"{sections}"
        "</body></html>\n"
    )


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
