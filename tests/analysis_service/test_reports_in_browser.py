"""The HTML reports as a reader meets them: rendered from hand-made executions (a CartPole-like campaign, an integer
subject, MAP-Elites with its behaviour grid, DESIGNATE's archive, comparisons with n = 1 and n = 2 and one with
hundreds of descriptors) and opened in headless Chromium at a 1,280 px viewport (tests/browser.py): no error, nothing
wider than the viewport, every image loads, every metric shown is in the page's glossary. The screenshots are kept
under runs/test-artifacts/screenshots/<test>/ (or $GAUNTLET_TEST_ARTIFACTS; tests/browser.py screenshots_dir) for a
person to look at."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from analysis_service.comparison import build_comparison, render_comparison_html
from analysis_service.designate_archive_report import ArchiveView, Rendered
from analysis_service.metrics import ExecutionRecord
from analysis_service.report import build_report, render_html
from analysis_service.shrinks import shrink_entry
from common.generated.gauntlet.v1 import generator_pb2
from tests.browser import assert_readable, chromium, inspect, screenshots_dir

pytestmark = pytest.mark.timeout(600)


def cartpole(seed: int, n: int = 120) -> list[ExecutionRecord]:
    """Failures only where x < -0.8 (PRT's boundary): the input view must pick x."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(1, n + 1):
        values: dict[str, object] = {
            k: float(v) for k, v in zip(("x_dot", "theta", "x", "theta_dot"), rng.uniform(-1, 1, 4))
        }
        x = float(values["x"])  # type: ignore[arg-type]
        fail = x < -0.8
        verdict = "invalid" if i % 17 == 0 else "fail" if fail else "pass"
        margin = x + 0.8
        out.append(
            ExecutionRecord(
                i,
                values,
                verdict,
                margin,
                200,
                float(200 * (1 + margin)),
                0.05 * i,
                test_case_id=f"t{i:07d}",
                reason="cart left the track at step 42" if fail else "",
                episode_seed=1000 + i,
            )
        )
    return out


def shrinks(records: list[ExecutionRecord], n: int = 2) -> list[dict]:
    """Report entries of the first `n` failures, each shrunk halfway to the nominal point (0) but for x."""
    out = []
    for r in [r for r in records if r.verdict == "fail"][:n]:
        answer = generator_pb2.ShrinkExecutionResponse(executions=23, nominal={k: 0.0 for k in r.values})
        answer.original.test_case.id, answer.original.reason, answer.original.verdict = r.test_case_id, r.reason, 2
        answer.shrunk.test_case.id, answer.shrunk.reason, answer.shrunk.verdict = "s0000009", "cart left at 40", 2
        for k, v in r.values.items():
            answer.original.test_case.values[k].real = float(v)  # type: ignore[arg-type]
            answer.shrunk.test_case.values[k].real = float(v) if k == "x" else 0.0  # type: ignore[arg-type]
        answer.moved.append("x")
        answer.original_distance = sum(float(v) ** 2 for v in r.values.values()) ** 0.5 / 2  # type: ignore[arg-type]
        answer.shrunk_distance = abs(float(r.values["x"])) / 2  # type: ignore[arg-type]
        out.append(shrink_entry(answer, "c-prt"))
    return out


def taxi(n: int = 80) -> list[ExecutionRecord]:
    """An integer subject: failures where the taxi starts in row 4."""
    rng = np.random.default_rng(3)
    out = []
    for i in range(1, n + 1):
        values: dict[str, object] = {
            k: int(v) for k, v in zip(("taxi_col", "taxi_row", "passenger", "destination"), rng.integers(0, 5, 4))
        }
        fail = values["taxi_row"] == 4
        out.append(ExecutionRecord(i, values, "fail" if fail else "pass", -1.0 if fail else 1.0, 30, 5.0, 0.1 * i))
    return out


def map_elites(seed: int, n: int = 150, descriptors: int = 2) -> list[ExecutionRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(1, n + 1):
        values: dict[str, object] = {f"p{j}": float(v) for j, v in enumerate(rng.uniform(-1, 1, 3))}
        d = tuple(float(v) for v in rng.uniform(0, 1, descriptors))
        fail = d[0] > 0.7 and d[1] > 0.5
        out.append(ExecutionRecord(i, values, "fail" if fail else "pass", 0.5 - d[0], 100, 10.0, 0.02 * i, d))
    return out


def image_records(seed: int) -> list[ExecutionRecord]:
    """Executions as the iou_car oracle stores them: 7 scalars, then a 4-value feature vector."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(1, 31):
        accuracy = float(rng.uniform(0, 1))
        scalars = (accuracy, 0.5, 0.5, 0.1, 0.1, 1.0, 1.0)
        values: dict[str, object] = {"cam_yaw": float(rng.uniform(-30, 30)), "weather": int(rng.integers(0, 4))}
        verdict = "fail" if accuracy < 0.3 else "pass"
        features = tuple(float(v) for v in rng.normal(size=4))
        out.append(ExecutionRecord(i, values, verdict, accuracy, 1, 0.0, 0.1 * i, scalars + features))
    return out


def archive(records: list[ExecutionRecord]) -> ArchiveView:
    rng = np.random.default_rng(5)
    members = [r for r in records if r.verdict == "fail"][:4]
    shown = [
        Rendered(
            r.index,
            r.margin,
            rng.integers(0, 256, size=(24, 48, 3), dtype=np.uint8),
            rng.integers(0, 6, size=(24, 48), dtype=np.uint8),
            rng.integers(0, 6, size=(24, 48), dtype=np.uint8),
            rng.normal(size=4),
        )
        for r in members
    ]
    return ArchiveView(
        "archive",
        {"variant": "designate", "t_relevance": None, "t_diversity": 5.0, "t_diversity_source": "parameter"},
        [r.index for r in members],
        [r.margin for r in members],
        [np.asarray(r.descriptors[7:]) for r in members],
        "features",
        len(members),
        len(records),
        shown,
    )


CARTPOLE_UNITS = {"x": "m", "x_dot": "m/s", "theta": "rad", "theta_dot": "rad/s"}  # subjects/classic/cartpole.yaml


def info(cid: str, strategy: str, subject: str, seed: int = 0) -> dict:
    """A campaign's info as the analysis service builds it (CartPole's with its parameters' units)."""
    return {
        **({"units": CARTPOLE_UNITS} if subject == "cartpole" else {}),
        "campaign_id": cid,
        "name": f"{subject}-{strategy}-{seed}",
        "subject": subject,
        "model": f"{subject}-ppo",
        "strategy": strategy,
        "seed": seed,
        "state": "finished",
        "stop_reason": "budget",
        "budget": {"executions": 120},
    }


def write(folder: Path, name: str, page: str) -> Path:
    path = folder / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    return path


def pages(folder: Path) -> list[Path]:
    """Every report kind, written into `folder`."""
    out = []
    single = [(info("c-prt", "prt", "cartpole"), cartpole(1))]
    report = build_report(single)
    out.append(write(folder, "report-c-prt", render_html(report, {"c-prt": single[0][1]})))
    both = [single[0], (info("c-taxi", "random", "taxi"), taxi())]
    report = build_report(both)
    report["campaigns"][0]["shrinks"] = shrinks(single[0][1])
    out.append(write(folder, "report-two", render_html(report, {i["campaign_id"]: r for i, r in both})))
    me = [(info("c-me", "map_elites", "bipedal"), map_elites(2))]
    out.append(write(folder, "report-c-me", render_html(build_report(me), {"c-me": me[0][1]})))
    images = image_records(4)
    view = archive(images)
    des = [(info("c-des", "designate", "urban"), images)]
    out.append(
        write(
            folder, "report-c-des", render_html(build_report(des, {"c-des": view}), {"c-des": images}, {"c-des": view})
        )
    )
    runs = [
        (info(f"c-{s}-{k}", s, "cartpole", k), cartpole(10 * k + len(s))) for s in ("random", "prt") for k in (0, 1)
    ]
    out.append(write(folder, "compare-n2", render_comparison_html(build_comparison(runs))))
    out.append(write(folder, "compare-n1", render_comparison_html(build_comparison(runs[1:3]))))
    wide = [
        (info(f"c-u{k}", s, "urban", k), map_elites(k, 40, descriptors=391))
        for k, s in enumerate(("random", "designate"))
    ]
    out.append(write(folder, "compare-urban", render_comparison_html(build_comparison(wide))))
    return out


PHONE = 500  # a narrow (phone-like) viewport: headless Chromium lays out no narrower than 500 px
PHONE_PAGES = ("report-two", "compare-n2")


def test_reports_pass_the_browser_check(tmp_path: Path) -> None:
    chromium()  # skips (or fails under GAUNTLET_REQUIRE_CHROMIUM=1) before any rendering
    failures = []
    shots = screenshots_dir("reports")
    for page in pages(tmp_path):
        result = inspect(page, shots, tmp_path)
        assert result["terms"], f"{page.name} marks no metric for its glossary"
        try:
            assert_readable(result, page.name)
        except AssertionError as err:
            failures.append(str(err))
        assert Path(result["screenshot"]).stat().st_size > 1000
        if page.stem in PHONE_PAGES:  # and on a phone: tables scroll inside the page, plots shrink
            phone = inspect(page, shots, tmp_path, width=PHONE)
            try:
                assert_readable(phone, f"{page.name} at {PHONE} px", width=PHONE)
            except AssertionError as err:
                failures.append(str(err))
    assert not failures, "\n".join(failures)


# What a reader does with a report's all-executions table: sort by x (twice: up, then down), filter to the failures
# with `verdict:fail`, then clear the filter; each step read back as the rows the page shows.
SORT_AND_FILTER = """
var t=document.querySelector('table.sortable[id$="-executions"]');
var names=Array.prototype.map.call(t.tHead.rows[0].cells,function(h){
 return h.getAttribute('data-name')||h.textContent.trim();});
function col(n){var i=names.indexOf(n);return Array.prototype.filter.call(t.tBodies[0].rows,function(r){
 return r.style.display!=='none';}).map(function(r){var c=r.cells[i],v=c.getAttribute('data-v');
 return v===null?c.textContent.trim():v;});}
var th=t.tHead.rows[0].cells[names.indexOf('x')];
th.click();var up=col('x');th.click();var down=col('x');
var box=document.querySelector('input.filter[data-for="'+t.id+'"]');
box.value='verdict:fail';box.dispatchEvent(new Event('input'));
var fails=col('verdict'),count=document.getElementById(t.id+'-count').textContent;
box.value='';box.dispatchEvent(new Event('input'));
return {names:names,up:up,down:down,fails:fails,count:count,after:col('#').length,scripts:document.scripts.length};
"""


def test_a_reader_sorts_and_filters_every_execution_in_chromium(tmp_path: Path) -> None:
    """The report lists every execution (invalid inputs too) in a table that sorts by a column's head and filters
    with the box above it, by the page's own inline script (no other script, nothing from outside)."""
    chromium()
    records = cartpole(1)
    single = [(info("c-prt", "prt", "cartpole"), records)]
    page = write(tmp_path, "report-c-prt", render_html(build_report(single), {"c-prt": records}))
    text = page.read_text(encoding="utf-8")
    assert text.count("<script") == 1 and "<script src" not in text
    result = inspect(page, screenshots_dir("sort-and-filter"), tmp_path, act=SORT_AND_FILTER)
    assert_readable(result, page.name)
    seen = result["act"]
    assert seen is not None, result
    assert seen["names"][:4] == ["#", "test case", "verdict", "reason"] and "x" in seen["names"], seen["names"]
    xs = sorted(float(r.values["x"]) for r in records)  # type: ignore[arg-type]
    assert [float(v) for v in seen["up"]] == xs and [float(v) for v in seen["down"]] == xs[::-1]
    failing = sum(r.verdict == "fail" for r in records)
    assert 0 < failing < len(records) and seen["fails"] == ["fail"] * failing, seen["fails"]
    assert seen["count"] == f"{failing} of {len(records)} rows" and seen["after"] == len(records)
    assert any(r.verdict == "invalid" for r in records) and ">invalid</td>" in text


def test_a_long_campaign_lists_its_first_executions_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import analysis_service.report as report_module

    monkeypatch.setattr(report_module, "MAX_EXECUTIONS_LISTED", 50)
    records = cartpole(1)
    page = render_html(build_report([(info("c-prt", "prt", "cartpole"), records)]), {"c-prt": records})
    table = page.split('id="campaign-c-prt-executions"')[1].split("</table>")[0]
    assert table.count("<tr class=") == 50 and "showing the first 50 of 120 executions" in page


def test_failure_counts_get_whole_ticks() -> None:
    """The cumulative-failures axes (report and comparison) tick whole failures: 3 failures gave 0.5 steps."""
    from analysis_service.html_kit import new_figure
    from analysis_service.report import integer_y

    fig = new_figure()
    ax = fig.add_subplot()
    ax.step([1, 2, 3, 4], [0, 1, 1, 3], where="post")
    fig.canvas.draw()
    assert any(t % 1 for t in ax.get_yticks()), ax.get_yticks()  # matplotlib's own choice: halves
    integer_y(ax)
    fig.canvas.draw()
    assert not any(t % 1 for t in ax.get_yticks()), ax.get_yticks()


def test_the_check_sees_a_wide_table_a_broken_image_and_an_undefined_metric(tmp_path: Path) -> None:
    """The check itself can fail: a page with each defect is caught."""
    chromium()
    page = write(
        tmp_path,
        "bad",
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bad</title></head><body>'
        '<table><tr><td style="min-width:2000px">wide</td></tr></table>'
        '<img alt="missing" src="does-not-exist.png">'
        '<span data-term="k">k</span><script>console.error("boom")</script></body></html>',
    )
    result = inspect(page, tmp_path / "screenshots", tmp_path)
    assert any("td" in w for w in result["wide"]), result
    assert result["broken_images"] == ["missing"], result
    assert result["undefined_terms"] == ["k"], result
    assert any("boom" in e for e in result["errors"]) and any("does-not-exist" in e for e in result["errors"]), result


def test_what_the_pages_say_without_a_browser(tmp_path: Path) -> None:
    """The content the browser check cannot judge: the input view picks the parameter failures depend on (x for the
    CartPole-like campaign, taxi_row for the integer one), MAP-Elites gets its behaviour grid, n = 1 gets a warning
    instead of a test, hundreds of descriptor ranges fold away, the summary has a row per metric, inputs are rounded."""
    written = {p.stem: p.read_text(encoding="utf-8") for p in pages(tmp_path)}
    prt = written["report-c-prt"]
    assert '<meta name="viewport"' in prt and 'id="glossary"' in prt
    assert 'by <abbr data-term="separation"' in prt and "separation</abbr>: x 1.00" in prt
    assert '<tr><th><abbr data-term="failures"' in prt  # metrics are rows
    assert "0.12345678" not in prt and not re.search(r"\d\.\d{6,}", prt.split("<img")[0])
    assert "<th>reason</th>" in prt and "<td>cart left the track at step 42</td>" in prt  # the failure's reason
    # inputs with the subject's units: a column head per parameter, and each failing input's values
    assert '<th data-name="x_dot">x_dot <span class=meta>[m/s]</span></th>' in prt
    assert re.search(r"<code>\{x_dot: -?[0-9.e-]+ m/s, theta: -?[0-9.e-]+ rad, x: -0\.[89]\d* m, ", prt), prt[-3000:]
    assert "taxi_row 1.00" in written["report-two"]
    two = written["report-two"]  # its CartPole campaign's first two failures, each beside its shrunk input
    assert two.count("<th>original t") == 2 and "shrunk in 23 executions" in two and "(moved)" in two
    assert "Shrunk failures" not in prt  # none stored: no section
    assert 'alt="behaviour grid, bipedal-map_elites-0"' in written["report-c-me"]
    assert "behaviour grid" not in prt  # no descriptors, no grid
    assert "+7 more</code>" in written["report-c-des"]  # 11 descriptors: the first 4 shown in the failures table
    n1 = written["compare-n1"]
    assert "Too few campaigns for a test" in n1 and "(large)" not in n1 and "no data" not in n1
    assert "(large)" in written["compare-n2"] or "Too few" in written["compare-n2"]
    urban = written["compare-urban"]
    assert "<summary>391 ranges</summary>" in urban
    assert 'href="report-c-u0.html"' in urban


SITE_PAGES = ("index.html", "guide/campaigns/index.html", "strategies/index.html", "subjects/urban/index.html")
EXTERNAL_ASSET = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.IGNORECASE)


def test_docs_site_has_no_external_asset_and_passes_the_browser_check(tmp_path: Path) -> None:
    """The built MkDocs site loads nothing from outside (mkdocs.yml turns off the theme's highlight.js CDN) and a
    sample of its pages, served over loopback HTTP, passes the same check as the reports."""
    import functools
    import http.server
    import subprocess
    import sys
    import threading

    root = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    outside = [str(p.relative_to(site)) for p in site.rglob("*.html") if EXTERNAL_ASSET.search(p.read_text("utf-8"))]
    assert not outside, f"pages that load an asset from another host: {outside[:10]}"
    chromium()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        shots = screenshots_dir("docs-site")
        for name in SITE_PAGES:
            result = inspect(site / name, shots, tmp_path, served=(base, site))
            result["undefined_terms"] = []  # the site marks no report metrics
            assert_readable(result, name)
    finally:
        server.shutdown()
        server.server_close()
