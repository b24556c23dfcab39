"""The parts every HTML page of the analysis service is made of: its stylesheet, escaping, inline PNG images, and
matplotlib figures drawn off pyplot.

One module so that the pages (report.py, comparison.py, designate_archive_report.py, performance_report.py) depend
on it and not on each other. matplotlib is imported lazily inside new_figure, so importing this module (and
building a JSON report, the common path) does not pay matplotlib's import time. Figures use the object-oriented
`matplotlib.figure.Figure` API, which always renders through Agg and never touches pyplot's global figure registry:
no GUI backend, no global state, safe in a server thread.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for type hints; keeps matplotlib off the import path
    from matplotlib.figure import Figure

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{margin-bottom:.2rem} .meta{color:#666;font-size:.9rem}
table{border-collapse:collapse;margin:1rem 0;font-size:.88rem}
th,td{border:1px solid #ccc;padding:.3rem .55rem;text-align:left;vertical-align:top}
th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.82rem;word-break:break-all}
.nofail{background:#e8f5e9;border:1px solid #66bb6a;padding:.6rem 1rem;font-weight:600;margin:1rem 0}
.warn{color:#8a6d00}
img{max-width:100%;height:auto;display:block;margin:.5rem 0}
section{margin-top:2rem}
.scroll{overflow-x:auto;max-width:100%} .scroll table{margin:.5rem 0}
abbr[data-term]{text-decoration:underline dotted;cursor:help}
dl.glossary dt{font-weight:600;margin-top:.5rem} dl.glossary dd{margin:0 0 0 1.2rem}
details summary{cursor:pointer;color:#444} nav.links{margin:.5rem 0}
table.sortable th{cursor:pointer;white-space:nowrap} table.sortable th[aria-sort=ascending]::after{content:" ▲"}
table.sortable th[aria-sort=descending]::after{content:" ▼"} input.filter{width:min(26rem,100%);margin:.3rem 0}
@media (max-width:700px){body{margin:.6rem}}
"""
VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'

# The one script a page carries (inline, no CDN), only when it has a `table_tool` table: a click (or Enter) on a
# column's head sorts the rows by that column (numbers by the raw value in a cell's data-v, empty cells last; again
# reverses), and the box above the table keeps the rows that contain every word typed (`column:text` looks in that
# column only, e.g. `verdict:fail`; a head's data-name, if any, is the column's name), counting what it keeps.
TABLE_SCRIPT = """<script>(function(){
function raw(td){var v=td.getAttribute('data-v');return v===null?td.textContent.trim():v;}
function key(td){var v=raw(td),n=Number(v);if(v===''||v==='\u2014'){return [2,''];}
 return isFinite(n)?[0,n]:[1,v.toLowerCase()];}
function heads(t){return Array.prototype.map.call(t.tHead.rows[0].cells,function(h){
 return (h.getAttribute('data-name')||h.textContent.trim()).toLowerCase();});}
function sorter(t,th,i){return function(){var up=th.getAttribute('aria-sort')!=='ascending',body=t.tBodies[0];
 Array.prototype.forEach.call(t.tHead.rows[0].cells,function(h){h.removeAttribute('aria-sort');});
 th.setAttribute('aria-sort',up?'ascending':'descending');
 var rows=Array.prototype.slice.call(body.rows);
 rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);
  if((x[0]===2)!==(y[0]===2)){return x[0]===2?1:-1;}
  var c=x[0]!==y[0]?x[0]-y[0]:x[1]<y[1]?-1:x[1]>y[1]?1:0;return up?c:-c;});
 rows.forEach(function(r){body.appendChild(r);});};}
function filter(t,box,count){var names=heads(t);return function(){
 var words=box.value.toLowerCase().split(/\\s+/).filter(Boolean),kept=0,rows=t.tBodies[0].rows;
 Array.prototype.forEach.call(rows,function(r){var ok=words.every(function(w){var c=w.indexOf(':'),
  col=c>0?names.indexOf(w.slice(0,c)):-1;
  var text=col>=0&&r.cells[col]?r.cells[col].textContent:r.textContent;
  return text.toLowerCase().indexOf(col>=0?w.slice(c+1):w)>=0;});
  r.style.display=ok?'':'none';if(ok){kept++;}});
 count.textContent=kept+' of '+rows.length+' rows';};}
Array.prototype.forEach.call(document.querySelectorAll('table.sortable'),function(t){
 Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,i){var go=sorter(t,th,i);th.tabIndex=0;
  th.addEventListener('click',go);th.addEventListener('keydown',function(e){if(e.key==='Enter'){go();}});});
 var box=document.querySelector('input.filter[data-for="'+t.id+'"]');
 if(box){var count=document.getElementById(t.id+'-count'),run=filter(t,box,count);box.addEventListener('input',run);}});
})();</script>"""

# Every metric a page shows, explained once: key -> (name, what it is). A page marks a metric with `term` (a tooltip)
# and ends with `glossary` over the keys it used; tests/analysis_service/test_reports_in_browser.py checks that
# none is left out.
GLOSSARY: dict[str, tuple[str, str]] = {
    "executions": ("executions", "Test cases run and judged pass or fail. Invalid inputs are not executions."),
    "failures": ("failures", "Executions the oracle judged a failure (majority over the repetitions)."),
    "distinct_failures": (
        "distinct failures",
        "Failing inputs that differ after rounding real values to 6 decimals (a repeated input counts once).",
    ),
    "failure_rate": (
        "failure rate [95% CI]",
        "Failures / executions, with the Wilson score interval at 95% confidence.",
    ),
    "invalid": ("invalid", "Inputs the simulator refused (outside a validity rule); not counted as executions."),
    "tests_to_first_failure": (
        "tests to 1st failure",
        "Executions up to and including the first failure. A campaign without a failure counts all its executions "
        "(marked ≥: a lower bound).",
    ),
    "seconds_to_first_failure": (
        "seconds to 1st failure",
        "Wall-clock seconds from the campaign's start to the first failure (≥ its whole time when none was found).",
    ),
    "steps": ("steps", "Simulation steps over all executions of the campaign."),
    "wall_seconds": ("wall seconds", "Wall-clock seconds the campaign took."),
    "input_entropy": (
        "input entropy (k)",
        "Kozachenko–Leonenko entropy estimate of the judged inputs (numeric parameters min–max scaled to [0, 1]), "
        "from each input's distance to its k-th nearest neighbour; higher = inputs spread more evenly.",
    ),
    "failure_sparsity": (
        "failing-input sparsity (3-NN)",
        "Mean distance of each failing input to its 3 nearest failing inputs (3-NN), inputs scaled to [0, 1]; "
        "higher = failures further apart.",
    ),
    "bs": (
        "#BS / #FBS",
        "Behaviour-space coverage: the number of cells of a 50-per-descriptor grid over the behaviour descriptors "
        "that some execution (#BS) or some failing execution (#FBS) reached.",
    ),
    "fs": (
        "FS / FFS (3-NN)",
        "Final-state sparsity: median over distinct final observations of the mean distance to their 3 nearest "
        "(FS); FFS the same over failing executions only. Raw observation units; only when final states were kept.",
    ),
    "margin": (
        "margin",
        "The oracle's continuous distance to failure (e.g. reward, distance, IoU): below 0 the execution failed.",
    ),
    "descriptors": (
        "behaviour descriptors",
        "Numbers the oracle computes from a trace to say what the agent did (e.g. final position); quality-diversity "
        "strategies keep the best input per descriptor cell.",
    ),
    "p_value": (
        "p",
        "Mann–Whitney U test p-value of the strategy's campaigns against the baseline's; "
        "below 0.05 marked significant.",
    ),
    "a12": (
        "Â12",
        "Vargha–Delaney effect size: P(strategy > baseline) + ½ P(tie); 0.5 = no difference. Bands: |Â12 − 0.5| < 0.06 "
        "negligible, < 0.14 small, < 0.21 medium, else large.",
    ),
    "median_q": ("median [Q1, Q3]", "Median over a strategy's campaigns with the first and third quartiles."),
    "n": ("n", "Campaigns (seeds) per strategy. With fewer than 3 per side no test is reported."),
    "cluster": (
        "failing-input clusters (Indago)",
        "Failing inputs of one run clustered together: coverage = share of clusters a strategy's failures fall "
        "into, entropy = how evenly they spread over them (both in %).",
    ),
    "archive": (
        "archive (DESIGNATE)",
        "The images a campaign kept: their count, the DNN's accuracy on them (lower = harder), and their mean "
        "pairwise feature or pixel-digest distance (diversity).",
    ),
    "separation": (
        "separation",
        "How well one input parameter alone tells failing from passing executions: the best accuracy of a single "
        "threshold on it, scaled so 0 = no better than guessing the common verdict and 1 = a perfect split.",
    ),
}


def page(title: str, body: str, css: str = "") -> str:
    """A whole page: doctype, viewport meta (phones), inline stylesheet and body (and the table script when the
    body has a `table_tool` table)."""
    script = TABLE_SCRIPT if 'class="sortable"' in body else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{VIEWPORT}'
        f"<title>{escape(title)}</title><style>{CSS}{css}</style></head><body>{body}{script}</body></html>\n"
    )


def table_tool(table_id: str, head: str, rows: str, what: str, example: str) -> str:
    """A table a reader can sort (click a column's head) and filter (the box above it), scrolling sideways inside
    the page; `head` is the header row's cells, `rows` the body's <tr>s, `what` names the rows ("executions"),
    `example` a filter to suggest ("verdict:fail"). table_id must be unique in the page ([A-Za-z0-9._-])."""
    box = (
        f'<input type="search" class="filter" data-for="{escape(table_id)}" aria-label="filter the {escape(what)}" '
        f'placeholder="filter the {escape(what)}, e.g. {escape(example)}"> '
        f'<span class=meta id="{escape(table_id)}-count"></span>'
    )
    table = (
        f'<table class="sortable" id="{escape(table_id)}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    )
    return box + scroll(table)


def scroll(table: str) -> str:
    """A table that scrolls sideways inside the page instead of making the page wider."""
    return f'<div class="scroll">{table}</div>'


def term(key: str, text: str | None = None) -> str:
    """A metric's name with its glossary definition as a tooltip (`data-term` ties it to the glossary)."""
    name, definition = GLOSSARY[key]
    return f'<abbr data-term="{key}" title="{escape(definition)}">{escape(text if text is not None else name)}</abbr>'


def terms_in(page_html: str) -> list[str]:
    """The glossary keys a page's HTML marks, in the glossary's order."""
    return [k for k in GLOSSARY if f'data-term="{k}"' in page_html]


def glossary(page_html: str) -> str:
    """The glossary section for the metrics `page_html` marks with `term`."""
    items = "".join(
        f'<dt id="term-{k}" data-defines="{k}">{escape(GLOSSARY[k][0])}</dt><dd>{escape(GLOSSARY[k][1])}</dd>'
        for k in terms_in(page_html)
    )
    return f'<section id="glossary"><h2>Glossary</h2><dl class="glossary">{items}</dl></section>' if items else ""


def escape(value: object) -> str:
    """Text for HTML, quotes included; None is empty. Every user-provided string goes through this."""
    return html.escape("" if value is None else str(value), quote=True)


def img_tag(b64: str, alt: str) -> str:
    """An <img> that carries its PNG inline (base64), so a page is one file."""
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{b64}">'


def fmt_float(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"


def fmt_value(value: object, digits: int = 4) -> str:
    """An input value as a reader wants it: reals to `digits` significant digits, lists and dicts element-wise."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        return _significant(value, digits)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt_value(v, digits)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt_value(v, digits) for v in value) + "]"
    try:
        return _significant(float(value), digits)  # type: ignore[arg-type]  # numpy scalars
    except (TypeError, ValueError):
        return str(value)


def fmt_input(values: Mapping[str, object], units: Mapping[str, str], digits: int = 4) -> str:
    """A test input as a reader wants it: each value rounded (fmt_value) and followed by its parameter's unit."""
    return (
        "{"
        + ", ".join(f"{k}: {fmt_value(v, digits)}{' ' + units[k] if units.get(k) else ''}" for k, v in values.items())
        + "}"
    )


def with_unit(name: str, units: Mapping[str, str]) -> str:
    """A parameter's name with its unit, as an axis label: "x [m]" (the name alone without one)."""
    return f"{name} [{units[name]}]" if units.get(name) else name


def _significant(x: float, digits: int) -> str:
    """`digits` significant digits, but a large number keeps its integer part (1234.5 -> 1235, not 1.234e+03)."""
    return f"{x:.0f}" if 10**digits <= abs(x) < 1e15 else f"{x:.{digits}g}"


def new_figure(width: float = 7.0, height: float = 3.6) -> Figure:
    from matplotlib.figure import Figure  # lazy: see module docstring

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def figure_png_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plot_label(text: str) -> str:
    """A label matplotlib draws as given: '$' would switch it to mathtext and can raise on user-provided names."""
    return text.replace("$", r"\$")
