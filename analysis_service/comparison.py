"""Statistics over repeated campaigns: strategies compared over several seeds, as JSON and a self-contained HTML page.

Campaigns are grouped by strategy. Per campaign: faults, distinct faults, tests and seconds to the
first failure, #BS / #FBS, input entropy (Kozachenko–Leonenko at k = 5, 10 and 20, as PRT reports it) and,
for campaigns that kept final observations, the QD paper's final-state and failure-state sparsity (FS / FFS:
median over distinct final states of the mean distance to the 3 nearest, raw observation units). #BS/#FBS and
entropy are computed on ONE grid and ONE scaling shared by every compared campaign (descriptor and input
ranges over all of them), so the numbers compare across strategies — a per-campaign grid would give each
strategy its own ruler.
Indago's failing-input cluster coverage and entropy (analysis_service/failure_clusters.py) cluster the
failing inputs of the campaigns of one run (same seed) together. Per strategy: median and quartiles
(the QD paper's summary), mean and sd. Each strategy against a
baseline: Mann–Whitney U and Vargha–Delaney Â12 with its effect-size band (PRT's and QD's tests).

A campaign without a failure has no first failure: its tests-to-first-failure counts as its number
of executions (PRT's convention for its 100,000-test cap, so the value is a lower bound) and the
"found" count says how many campaigns found one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from analysis_service.designate_archive_report import ArchiveView, accuracy_name, archive_outcome, rq1, rq1_html
from analysis_service.html_kit import (
    escape,
    figure_png_base64,
    glossary,
    img_tag,
    new_figure,
    page,
    plot_label,
    scroll,
    table_tool,
    term,
)
from analysis_service.metrics import ExecutionRecord, compute_metrics
from analysis_service.report import (
    BEHAVIOUR_CELLS,
    DIVERSITY_K,
    _jsonable,
    final_state_sparsity,
    integer_y,
    real_parameters,
    report_stem,
)

COMPARISON_VERSION = "1"
ALTERNATIVES = ("two-sided", "greater", "less")


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    digits: int


METRICS: tuple[Metric, ...] = (
    Metric("faults", "faults", True, 0),
    Metric("distinct_faults", "distinct failing inputs", True, 0),
    Metric("tests_to_first_failure", "tests to 1st failure", False, 0),
    Metric("seconds_to_first_failure", "seconds to 1st failure", False, 2),
    Metric("behaviour_cells", "#BS (shared grid)", True, 0),
    Metric("failing_behaviour_cells", "#FBS (shared grid)", True, 0),
    Metric("input_entropy_k5", "input entropy (k=5, shared scaling)", True, 3),
    Metric("input_entropy", f"input entropy (k={DIVERSITY_K}, shared scaling)", True, 3),
    Metric("input_entropy_k20", "input entropy (k=20, shared scaling)", True, 3),
    Metric("final_state_sparsity", "final-state sparsity FS (3-NN)", True, 3),
    Metric("failure_state_sparsity", "failure-state sparsity FFS (3-NN)", True, 3),
    Metric("cluster_coverage", "failing-input cluster coverage % (Indago)", True, 1),
    Metric("cluster_entropy", "failing-input cluster entropy % (Indago)", True, 1),
)
# DESIGNATE's RQ1 per campaign (analysis_service/designate_archive_report.py), shown when a compared campaign has an
# archive or relevant images: a lower accuracy of the kept images is better testing.
ARCHIVE_METRICS: tuple[Metric, ...] = (
    Metric("archive_images", "archive images", True, 0),
    Metric("archive_median_accuracy", "median accuracy over the archive", False, 3),
    Metric("archive_mean_accuracy", "mean accuracy over the archive", False, 3),
    Metric("feature_diversity", "feature diversity (archive)", True, 3),
    Metric("pixel_diversity", "pixel diversity (archive, digests)", True, 3),
)
ARCHIVE_ACCURACY = Metric("archive_accuracy", "accuracy of the archive images (pooled)", False, 3)
# Fewer campaigns than this on either side: the HTML gives no p / Â12 (with n = 1 a test says p 1.000, Â12 0.00)
MIN_TEST_N = 3
# each metric's glossary entry (analysis_service/html_kit.py GLOSSARY)
METRIC_TERMS = {
    "faults": "failures",
    "distinct_faults": "distinct_failures",
    "tests_to_first_failure": "tests_to_first_failure",
    "seconds_to_first_failure": "seconds_to_first_failure",
    "behaviour_cells": "bs",
    "failing_behaviour_cells": "bs",
    "input_entropy_k5": "input_entropy",
    "input_entropy": "input_entropy",
    "input_entropy_k20": "input_entropy",
    "final_state_sparsity": "fs",
    "failure_state_sparsity": "fs",
    "cluster_coverage": "cluster",
    "cluster_entropy": "cluster",
}


@dataclass(frozen=True)
class Outcome:
    """One campaign's numbers; None where the campaign has too little data for a metric."""

    campaign_id: str
    strategy: str
    seed: Any
    executions: int
    found_failure: bool
    faults: int
    distinct_faults: int
    tests_to_first_failure: float  # the number of executions when no failure was found (a lower bound)
    seconds_to_first_failure: float  # the campaign's wall seconds when no failure was found
    behaviour_cells: int | None
    failing_behaviour_cells: int | None
    input_entropy: float | None
    cluster_coverage: float | None = None  # Indago's, among the campaigns of the same run (cluster_runs)
    cluster_entropy: float | None = None
    input_entropy_k5: float | None = None
    input_entropy_k20: float | None = None
    final_state_sparsity: float | None = None  # only for campaigns that kept final observations
    failure_state_sparsity: float | None = None
    archive_images: int | None = None  # DESIGNATE's RQ1, for campaigns with an archive or relevant images
    archive_median_accuracy: float | None = None
    archive_mean_accuracy: float | None = None
    feature_diversity: float | None = None
    pixel_diversity: float | None = None


@dataclass(frozen=True)
class SharedGrid:
    """Input scaling and behaviour grid common to every compared campaign."""

    inputs: tuple[str, ...]
    input_low: tuple[float, ...]
    input_high: tuple[float, ...]
    descriptor_low: tuple[float, ...]
    descriptor_high: tuple[float, ...]
    cells: int


def group_of(info: Mapping[str, Any]) -> str:
    """The group a campaign is compared in: an explicit `group`, else its strategy."""
    return str(info.get("group") or info.get("strategy") or "unknown")


def shared_grid(runs: Sequence[Sequence[ExecutionRecord]], cells: int = BEHAVIOUR_CELLS) -> SharedGrid:
    """Real inputs present in every campaign and descriptor dimensions, with their ranges over all campaigns."""
    judged = [[r for r in records if r.verdict != "invalid"] for records in runs]
    names: list[str] | None = None
    for records in judged:
        if records:
            mine = real_parameters(records)
            names = mine if names is None else [n for n in names if n in mine]
    names = names or []
    rows = [[r.real(n) for n in names] for records in judged for r in records]
    x = np.array(rows, dtype=float).reshape(-1, len(names))
    dims = {len(r.descriptors) for records in judged for r in records if r.descriptors}
    d = (
        np.array([r.descriptors for records in judged for r in records if r.descriptors], dtype=float)
        if len(dims) == 1
        else np.zeros((0, 0))
    )  # mixed descriptor lengths cannot share one grid
    return SharedGrid(
        tuple(names),
        tuple(x.min(axis=0)) if len(x) else (),
        tuple(x.max(axis=0)) if len(x) else (),
        tuple(d.min(axis=0)) if d.size else (),
        tuple(d.max(axis=0)) if d.size else (),
        cells,
    )


ENTROPY_KS = (5, DIVERSITY_K, 20)  # PRT reports the Kozachenko-Leonenko estimate at these k


def outcome(info: Mapping[str, Any], records: Sequence[ExecutionRecord], grid: SharedGrid) -> Outcome:
    from analysis_service.statistics import behaviour_coverage, kl_entropy, minmax_scale

    cid = str(info.get("campaign_id", ""))
    m = compute_metrics(cid, records)
    judged = [r for r in records if r.verdict != "invalid"]
    entropy: dict[int, float | None] = dict.fromkeys(ENTROPY_KS)
    if grid.inputs:
        x = np.array([[r.real(n) for n in grid.inputs] for r in judged]).reshape(-1, len(grid.inputs))
        unit = minmax_scale(x, np.array(grid.input_low), np.array(grid.input_high))
        dims = len(grid.inputs)
        for k in ENTROPY_KS:
            if len(judged) > k:  # the estimate needs more than k points
                entropy[k] = kl_entropy(unit, k=k, low=np.zeros(dims), high=np.ones(dims))
    bs = fbs = None
    with_desc = [r for r in judged if len(r.descriptors) == len(grid.descriptor_low) and r.descriptors]
    if grid.descriptor_low and with_desc:
        bs, fbs = behaviour_coverage(
            np.array([r.descriptors for r in with_desc], dtype=float),
            [r.verdict == "fail" for r in with_desc],
            grid.descriptor_low,
            grid.descriptor_high,
            [grid.cells] * len(grid.descriptor_low),
        )
    fs, ffs = final_state_sparsity(judged)  # no shared ruler needed: distances in the subject's own units
    found = m.failures > 0
    return Outcome(
        cid,
        group_of(info),
        info.get("seed"),
        m.executions,
        found,
        m.failures,
        m.distinct_failures,
        float(m.tests_to_first_failure if found else m.executions),
        float(m.seconds_to_first_failure if found else m.wall_seconds),
        bs,
        fbs,
        entropy[DIVERSITY_K],
        input_entropy_k5=entropy[5],
        input_entropy_k20=entropy[20],
        final_state_sparsity=fs,
        failure_state_sparsity=ffs,
    )


def cluster_runs(outcomes: Sequence[Outcome]) -> list[Any]:
    """The experimental run of each campaign, for Indago's per-run clustering: its seed when every strategy ran
    the same seeds, else its position among its strategy's campaigns (the i-th of each strategy together)."""
    seeds: dict[str, list[Any]] = {}
    for o in outcomes:
        seeds.setdefault(o.strategy, []).append(o.seed)
    same = len({tuple(sorted(map(str, v))) for v in seeds.values()}) == 1 and all(
        len(set(map(str, v))) == len(v) for v in seeds.values()
    )
    if same:
        return [str(o.seed) for o in outcomes]
    seen: dict[str, int] = {}
    runs = []
    for o in outcomes:
        runs.append(seen.get(o.strategy, 0))
        seen[o.strategy] = runs[-1] + 1
    return runs


def with_cluster_diversity(
    campaigns: Sequence[tuple[Mapping[str, Any], Sequence[ExecutionRecord]]], outcomes: Sequence[Outcome]
) -> list[Outcome]:
    """Outcomes with Indago's input coverage and entropy (analysis_service/failure_clusters.py): per run, the
    failing inputs of every compared campaign clustered together (k capped at 30 here, for speed)."""
    from dataclasses import replace

    from analysis_service.failure_clusters import campaign_input_diversity

    failing = [[r.values for r in records if r.verdict == "fail"] for _, records in campaigns]
    scores = campaign_input_diversity(failing, cluster_runs(outcomes))
    return [replace(o, cluster_coverage=c, cluster_entropy=h) for o, (c, h) in zip(outcomes, scores)]


def summarize(values: Sequence[float | None]) -> dict[str, Any]:
    """n, median, quartiles (linear interpolation), mean, sd (n-1), min, max of the non-None values."""
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not len(x):
        return {"n": 0}
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return {
        "n": int(len(x)),
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "mean": float(x.mean()),
        "sd": float(x.std(ddof=1)) if len(x) > 1 else 0.0,
        "min": float(x.min()),
        "max": float(x.max()),
    }


def pairwise(
    a: Sequence[float | None], b: Sequence[float | None], metric: Metric, alternative: str
) -> dict[str, Any] | None:
    """Mann–Whitney U of a against b, Â12 = P(a > b) + ½P(a = b), its band, and which side it favours."""
    from analysis_service.statistics import compare

    xa = [float(v) for v in a if v is not None and math.isfinite(v)]
    xb = [float(v) for v in b if v is not None and math.isfinite(v)]
    if not xa or not xb:
        return None
    if len(set(xa) | set(xb)) == 1:  # all equal: no evidence either way (scipy would return nan)
        return {"p_value": 1.0, "a12": 0.5, "effect": "negligible", "favours": "neither"}
    c = compare(xa, xb, alternative=alternative)
    favours = "neither" if c.a12 == 0.5 else "row" if (c.a12 > 0.5) == metric.higher_is_better else "baseline"
    return {
        "p_value": c.p_value if math.isfinite(c.p_value) else None,
        "a12": c.a12,
        "effect": c.effect,
        "favours": favours,
    }


def cumulative_quartiles(runs: Sequence[Sequence[ExecutionRecord]], points: int = 200) -> dict[str, list[float]]:
    """Median and quartiles over campaigns of the cumulative faults at shared execution counts.

    A campaign that stopped early keeps its final count (it found nothing more), so a group's
    curve runs to its longest campaign.
    """
    longest = max((len(r) for r in runs), default=0)
    if not longest:
        return {"x": [], "q1": [], "median": [], "q3": []}
    xs = np.unique(np.linspace(1, longest, min(points, longest)).round().astype(int))
    curves = []
    for records in runs:
        fails = np.cumsum([r.verdict == "fail" for r in sorted(records, key=lambda r: r.index)])
        if not len(fails):
            fails = np.zeros(1, dtype=int)
        curves.append(fails[np.minimum(xs, len(fails)) - 1])
    q1, med, q3 = np.percentile(np.array(curves, dtype=float), [25, 50, 75], axis=0)
    return {"x": xs.tolist(), "q1": q1.tolist(), "median": med.tolist(), "q3": q3.tolist()}


def build_comparison(
    campaigns: Sequence[tuple[Mapping[str, Any], Sequence[ExecutionRecord]]],
    baseline: str | None = None,
    alternative: str = "two-sided",
    archives: Sequence[ArchiveView | None] | None = None,
) -> dict[str, Any]:
    """JSON-serialisable comparison of campaigns given as (info, records), grouped by strategy.

    baseline: the group every other group is tested against; default "random" when present,
    else the first group. alternative: of the Mann–Whitney U test, "greater" meaning the row's
    values tend to be larger than the baseline's. archives: each campaign's archive view or None
    (analysis_service/designate_archive_report.py); when any is given, the archive metrics join the tables and
    `rq1` holds DESIGNATE's RQ1 table.
    """
    if len(campaigns) < 2:
        raise ValueError(f"a comparison needs at least 2 campaigns, got {len(campaigns)}")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
    grid = shared_grid([records for _, records in campaigns])
    outcomes = with_cluster_diversity(campaigns, [outcome(info, records, grid) for info, records in campaigns])
    views = list(archives) if archives is not None else [None] * len(campaigns)
    with_archives = any(v is not None for v in views)
    metrics = METRICS
    if with_archives:
        from dataclasses import replace

        outcomes = [replace(o, **archive_outcome(v)) for o, v in zip(outcomes, views)]
        metrics = METRICS + ARCHIVE_METRICS
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.strategy, []).append(o)
    if baseline is None:
        baseline = "random" if "random" in groups else next(iter(groups))
    elif baseline not in groups:
        raise ValueError(f"baseline {baseline!r} is not among the compared strategies: {', '.join(groups)}")
    by_group_records: dict[str, list[Sequence[ExecutionRecord]]] = {}
    for (_, records), o in zip(campaigns, outcomes):
        by_group_records.setdefault(o.strategy, []).append(records)
    strategies_out = []
    for name, members in groups.items():
        entry: dict[str, Any] = {
            "strategy": name,
            "campaigns": len(members),
            "found_failure": sum(o.found_failure for o in members),
            "summary": {m.key: summarize([getattr(o, m.key) for o in members]) for m in metrics},
            "cumulative_faults": cumulative_quartiles(by_group_records[name]),
        }
        if name != baseline:
            entry["versus_baseline"] = {
                m.key: pairwise(
                    [getattr(o, m.key) for o in members], [getattr(o, m.key) for o in groups[baseline]], m, alternative
                )
                for m in metrics
            }
        strategies_out.append(entry)
    report = {
        "gauntlet_comparison_version": COMPARISON_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "baseline": baseline,
        "alternative": alternative,
        "subjects": sorted({str(info.get("subject")) for info, _ in campaigns}),
        "shared_grid": asdict(grid),
        "metrics": [asdict(m) for m in metrics],
        "strategies": strategies_out,
        "campaigns": [asdict(o) for o in outcomes],
    }
    if with_archives:
        report["rq1"] = rq1(
            [o.strategy for o in outcomes],
            views,
            baseline,
            alternative,
            lambda a, b: pairwise(a, b, ARCHIVE_ACCURACY, alternative),
        )
        report["rq1_accuracy"] = accuracy_name(next(info for (info, _), v in zip(campaigns, views) if v is not None))
    return _jsonable(report)


def comparison_stem(campaign_ids: Sequence[str]) -> str:
    """A short, stable file stem for a set of campaigns (order-independent)."""
    digest = hashlib.sha1("\n".join(sorted(campaign_ids)).encode()).hexdigest()[:10]
    return f"compare-{len(campaign_ids)}-{digest}"


# --------------------------------------------------------------------------- plots


def _plot_boxes(comparison: Mapping[str, Any]) -> str | None:
    names = [s["strategy"] for s in comparison["strategies"]]
    # a metric no campaign has (no descriptors, no final states) gets no empty panel
    shown = [
        m
        for m in comparison["metrics"]
        if m["key"] != "distinct_faults" and any(c[m["key"]] is not None for c in comparison["campaigns"])
    ]
    if not shown:
        return None
    fig = new_figure(11.0, 2.6 * math.ceil(len(shown) / 3))
    axes = fig.subplots(math.ceil(len(shown) / 3), 3, squeeze=False).ravel()
    for ax, metric in zip(axes, shown):
        data = [
            [c[metric["key"]] for c in comparison["campaigns"] if c["strategy"] == n and c[metric["key"]] is not None]
            for n in names
        ]
        ax.boxplot([d if d else [math.nan] for d in data], showmeans=False)
        ax.set_xticks(range(1, len(names) + 1), [plot_label(n) for n in names], rotation=20, fontsize="small")
        ax.set_title(plot_label(metric["label"]), fontsize="medium")
        ax.grid(alpha=0.3, axis="y")
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    return figure_png_base64(fig)


def _plot_cumulative_bands(comparison: Mapping[str, Any]) -> str:
    fig = new_figure()
    ax = fig.add_subplot()
    for s in comparison["strategies"]:
        c = s["cumulative_faults"]
        if c["x"]:
            (line,) = ax.plot(c["x"], c["median"], label=plot_label(f"{s['strategy']} (median, n={s['campaigns']})"))
            ax.fill_between(c["x"], c["q1"], c["q3"], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("executions")
    ax.set_ylabel("cumulative faults")
    integer_y(ax)
    ax.set_title("Cumulative faults: median with Q1-Q3 band over campaigns")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_png_base64(fig)


def _plot_first_failure(comparison: Mapping[str, Any]) -> str:
    """Share of a strategy's campaigns that had failed by each execution count (an empirical CDF)."""
    fig = new_figure()
    ax = fig.add_subplot()
    end = max((c["executions"] for c in comparison["campaigns"]), default=1)
    for s in comparison["strategies"]:
        mine = [c for c in comparison["campaigns"] if c["strategy"] == s["strategy"]]
        firsts = sorted(c["tests_to_first_failure"] for c in mine if c["found_failure"])
        shares = np.arange(len(firsts) + 1) / len(mine)
        # run on to the longest campaign, so that a plateau (campaigns that never failed) stays visible
        ax.step(
            [0, *firsts, max(end, firsts[-1] if firsts else 0)],
            [*shares, shares[-1]],
            where="post",
            label=plot_label(f"{s['strategy']} ({len(firsts)}/{len(mine)} found one)"),
        )
    ax.set_xlabel("tests to the first failure")
    ax.set_ylabel("share of campaigns")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("First failure: share of campaigns that had failed by n tests")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_png_base64(fig)


# --------------------------------------------------------------------------- HTML

_COMPARE_CSS = """
td.better{background:#e8f5e9} td.worse{background:#fdecea}
.ranges{max-height:12rem;overflow:auto;font-size:.82rem;border:1px solid #ddd;padding:.4rem;margin:.3rem 0}
"""


def _metric_head(m: Mapping[str, Any]) -> str:
    key = METRIC_TERMS.get(m["key"], "archive")
    return term(key, m["label"])


def _num(v: Any, digits: int) -> str:
    return "—" if v is None else f"{float(v):.{digits}f}"


def _summary_table(comparison: Mapping[str, Any]) -> str:
    """Metrics as rows, strategies as columns: median [Q1, Q3] over a strategy's campaigns, then mean ± sd."""
    metrics, strategies = comparison["metrics"], comparison["strategies"]
    head = "".join(
        f"<th>{escape(s['strategy'])}{' (baseline)' if s['strategy'] == comparison['baseline'] else ''}</th>"
        for s in strategies
    )
    rows = [
        f"<tr><th>campaigns ({term('n')})</th>" + "".join(f"<td class=num>{s['campaigns']}</td>" for s in strategies),
        "<tr><th>found a failure</th>" + "".join(f"<td class=num>{s['found_failure']}</td>" for s in strategies),
    ]
    for m in metrics:
        cells = []
        for s in strategies:
            q, d = s["summary"][m["key"]], m["digits"]
            if not q.get("n"):
                cells.append("<td class=num>—</td>")
                continue
            lower = (
                "≥"
                if m["key"] in ("tests_to_first_failure", "seconds_to_first_failure")
                and s["found_failure"] < s["campaigns"]
                else ""
            )
            cells.append(
                f"<td class=num>{lower}{_num(q['median'], d)} [{_num(q['q1'], d)}, {_num(q['q3'], d)}]"
                f"<br><span class=meta>{_num(q['mean'], max(d, 1))} ± {_num(q['sd'], max(d, 1))}</span></td>"
            )
        rows.append(f"<tr><th>{_metric_head(m)}</th>" + "".join(cells) + "</tr>")
    caption = f"<p class=meta>Each cell: {term('median_q')}, then mean ± sd over the strategy's campaigns.</p>"
    return caption + scroll(
        f"<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _tests_table(comparison: Mapping[str, Any]) -> str:
    """Metrics as rows, each strategy against the baseline as a column: p · Â12 (band)."""
    metrics = comparison["metrics"]
    base_n = next(s["campaigns"] for s in comparison["strategies"] if s["strategy"] == comparison["baseline"])
    tested, small = [], []
    for s in comparison["strategies"]:
        if "versus_baseline" not in s:
            continue
        if min(s["campaigns"], base_n) < MIN_TEST_N:
            small.append(
                f"{escape(s['strategy'])} (n = {s['campaigns']}) against "
                f"{escape(comparison['baseline'])} (n = {base_n})"
            )
        else:
            tested.append(s)
    warning = (
        f'<p class="warn">Too few campaigns for a test ({term("n")} below {MIN_TEST_N} on a side, where a '
        f"Mann–Whitney p cannot fall below 0.05 and Â12 swings from 0 to 1 on one seed): "
        + "; ".join(small)
        + ". Run more seeds of each strategy (the per-strategy table above still shows their values).</p>"
        if small
        else ""
    )
    if not tested:
        return warning or "<p>only one strategy: nothing to test against the baseline</p>"
    head = "".join(f"<th>{escape(s['strategy'])} vs {escape(comparison['baseline'])}</th>" for s in tested)
    rows = []
    for m in metrics:
        cells = []
        for s in tested:
            t = s["versus_baseline"].get(m["key"])
            if t is None:
                cells.append("<td class=num>—</td>")
                continue
            significant = t["p_value"] is not None and t["p_value"] < 0.05
            css = (
                ("better" if t["favours"] == "row" else "worse" if t["favours"] == "baseline" else "")
                if significant
                else ""
            )
            cells.append(f'<td class="num {css}">{_num(t["p_value"], 3)} · {t["a12"]:.2f} ({escape(t["effect"])})</td>')
        rows.append(f"<tr><th>{_metric_head(m)}</th>" + "".join(cells) + "</tr>")
    caption = f"<p class=meta>Each cell: {term('p_value')} · {term('a12')} (band).</p>"
    return (
        warning
        + caption
        + scroll(f"<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    )


def _campaigns_table(comparison: Mapping[str, Any]) -> str:
    metrics = comparison["metrics"]
    head = f"<th>campaign</th><th>strategy</th><th>seed</th><th>{term('executions')}</th>" + "".join(
        f"<th>{_metric_head(m)}</th>" for m in metrics
    )
    rows = []
    for c in comparison["campaigns"]:
        href = escape(report_stem([c["campaign_id"]]) + ".html")
        cells = [
            f'<td><a href="{href}">{escape(c["campaign_id"])}</a></td>',
            f"<td>{escape(c['strategy'])}</td>",
            f"<td>{escape(c['seed'])}</td>",
            f"<td class=num>{c['executions']}</td>",
        ]
        for m in metrics:
            mark = (
                "≥"
                if m["key"] in ("tests_to_first_failure", "seconds_to_first_failure") and not c["found_failure"]
                else ""
            )
            raw = "" if c[m["key"]] is None else f' data-v="{float(c[m["key"]])!r}"'  # sorts past the "≥"
            cells.append(f"<td class=num{raw}>{mark}{_num(c[m['key']], m['digits'])}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return table_tool("campaigns-table", head, "".join(rows), "campaigns", "strategy:random")


def _rq1_section(comparison: Mapping[str, Any]) -> str:
    if not comparison.get("rq1"):
        return ""
    name = comparison.get("rq1_accuracy") or "accuracy"
    return (
        "<h2>Archives (DESIGNATE's RQ1)</h2>"
        "<p class=meta>Per strategy: images kept per campaign (a DESIGNATE archive, or a campaign's relevant images "
        f"when its strategy keeps no archive), {escape(name)} over the images pooled over its campaigns (lower = "
        "better testing), the mean pairwise feature and pixel-digest distance inside each campaign's images (mean "
        "over campaigns), and Mann–Whitney U p with Â12 = P(strategy &gt; baseline) + ½ P(tie) of the pooled "
        f"{escape(name)} against the baseline's (Â12 below 0.5: the row's images are harder for the DNN).</p>"
        + rq1_html(comparison["rq1"], comparison["baseline"], name)
    )


def _ranges(names: Sequence[str], low: Sequence[float], high: Sequence[float]) -> str:
    """Ranges as a collapsed list: a comparison of image campaigns has hundreds of descriptors."""
    items = ", ".join(f"{escape(n)} [{lo:.4g}, {hi:.4g}]" for n, lo, hi in zip(names, low, high))
    if len(names) <= 6:
        return items
    return f"<details><summary>{len(names)} ranges</summary><div class=ranges>{items}</div></details>"


def render_comparison_html(comparison: Mapping[str, Any]) -> str:
    """Self-contained HTML page (inline CSS, base64 PNG plots) for a comparison from `build_comparison`.

    Each campaign id links to its report (`report-<id>.html`), which the analysis service writes beside the
    comparison."""
    grid = comparison["shared_grid"]
    alt = comparison["alternative"]
    side = (
        "two-sided"
        if alt == "two-sided"
        else "one-sided: H1 = the strategy's values are "
        f"{'larger' if alt == 'greater' else 'smaller'} than the baseline's"
    )
    lows = grid["descriptor_low"]
    grid_text = (
        f"{grid['cells']} cells per descriptor over {len(lows)} descriptor{'s' if len(lows) != 1 else ''}: "
        + _ranges([f"d{i + 1}" for i in range(len(lows))], lows, grid["descriptor_high"])
        if lows
        else "no behaviour descriptors recorded"
    )
    inputs = _ranges(grid["inputs"], grid["input_low"], grid["input_high"]) or "no real-valued inputs"
    boxes = _plot_boxes(comparison)
    body = (
        "<h1>Gauntlet comparison</h1>"
        f"<p class=meta>generated {escape(comparison.get('generated_at'))} · "
        f"subjects {escape(', '.join(comparison['subjects']))} · "
        f'<a href="#campaigns">{len(comparison["campaigns"])} campaigns</a> · '
        f"comparison version {escape(comparison.get('gauntlet_comparison_version'))} · "
        '<a href="#glossary">glossary</a></p>'
        "<h2>Per strategy</h2>"
        "<p class=meta>A campaign without a failure counts its executions (seconds: its wall time) as its cost to the "
        "first failure, so such medians are lower bounds (≥).</p>"
        f"<div class=meta>Shared behaviour grid ({term('bs')}): {grid_text}</div>"
        f"<div class=meta>Entropy scaling (min–max over all compared campaigns): {inputs}</div>"
        f"{_summary_table(comparison)}"
        f"<h2>Against the baseline ({escape(comparison['baseline'])})</h2>"
        f"<p class=meta>Mann–Whitney U {term('p_value', 'p-value')} ({escape(side)}) and Vargha–Delaney "
        f"{term('a12')} = P(strategy &gt; baseline) + ½ P(tie), with the Vargha–Delaney bands "
        "(|Â12 − 0.5| &lt; 0.06 negligible, &lt; 0.14 small, &lt; 0.21 medium, else large). "
        "Green: significantly better than the baseline at p &lt; 0.05 (fewer tests or seconds to the first failure, "
        "more of the rest); red: significantly worse.</p>"
        f"{_tests_table(comparison)}"
        f"{_rq1_section(comparison)}"
        "<h2>Plots</h2>"
        + (img_tag(boxes, "box plots per strategy") if boxes else "")
        + f"{img_tag(_plot_cumulative_bands(comparison), 'cumulative faults, median and quartile band per strategy')}"
        f"{img_tag(_plot_first_failure(comparison), 'share of campaigns failed by n tests')}"
        '<h2 id="campaigns">Campaigns</h2>'
        "<p class=meta>Each campaign id links to its own report, written beside this page.</p>"
        f"{_campaigns_table(comparison)}"
    )
    return page("Gauntlet comparison", body + glossary(body), _COMPARE_CSS)
