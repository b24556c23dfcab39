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
"""


def escape(value: object) -> str:
    """Text for HTML, quotes included; None is empty. Every user-provided string goes through this."""
    return html.escape("" if value is None else str(value), quote=True)


def img_tag(b64: str, alt: str) -> str:
    """An <img> that carries its PNG inline (base64), so a page is one file."""
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{b64}">'


def fmt_float(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"


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
