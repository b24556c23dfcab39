"""Open a page in headless Chromium (Debian's `chromium`, installed by .ci/run) and report what a reader would meet.

No driver and no websocket client: a copy of the page, written beside it (so its relative links and images still
resolve), gets a script as the first thing in its <head> that records every error (a script error, a resource that did
not load, console.error, an unhandled rejection) and, once the page has loaded, measures it and writes the findings
as JSON into a <pre> that `chromium --dump-dom` prints. A second run takes a screenshot of the page.

Findings: `act`, what a script run on the loaded page returned (inspect's `act`: a reader's clicks and typing);
`errors`; `wide`, the elements whose right edge passes the viewport and that no horizontally scrolling box
holds (plus the page's own scroll width); `broken_images`; `terms`, the metrics the page marks with `data-term`, and
`undefined_terms`, those its glossary (`data-defines`) does not explain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

VIEWPORT = (1280, 900)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
MARKER = "gauntlet-browser-check"

PROBE = (
    """<script>(function(){
var errs=[];
window.addEventListener('error',function(e){var t=e.target;
 if(t&&t!==window&&(t.src||t.href)){errs.push('failed to load '+(t.src||t.href));}
 else{errs.push('error: '+(e.message||String(e)));}},true);
window.addEventListener('unhandledrejection',function(e){errs.push('unhandled rejection: '+e.reason);});
var ce=console.error;console.error=function(){errs.push('console.error: '+Array.prototype.join.call(arguments,' '));
 return ce.apply(console,arguments);};
function held(el){for(var p=el.parentElement;p&&p!==document.body;p=p.parentElement){
 var o=getComputedStyle(p).overflowX;if(o==='auto'||o==='scroll'||o==='hidden'){return true;}}return false;}
function name(el){return el.tagName.toLowerCase()+(el.id?'#'+el.id:'')+(el.className&&el.className.baseVal===undefined
 ?'.'+String(el.className).split(' ').join('.'):'')+' "'+(el.textContent||'').trim().slice(0,40)+'"';}
function check(){var act=null;if(window.gauntletAct){try{act=window.gauntletAct();}catch(e){errs.push('act: '+e);}}
 var vw=document.documentElement.clientWidth,wide=[];
 document.querySelectorAll('body *').forEach(function(el){if(el.id==='"""
    + MARKER
    + """')return;var r=el.getBoundingClientRect();
  if(r.width>0&&r.right>vw+1&&!held(el)){wide.push(name(el)+' right='+Math.round(r.right));}});
 if(document.documentElement.scrollWidth>vw+1){wide.push('page scroll width '+document.documentElement.scrollWidth);}
 var broken=[];Array.prototype.forEach.call(document.images,function(i){
  if(!i.complete||i.naturalWidth===0){broken.push(i.alt||i.src.slice(0,80));}});
 var terms={},defined={};document.querySelectorAll('[data-term]').forEach(function(e){terms[e.dataset.term]=1;});
 document.querySelectorAll('[data-defines]').forEach(function(e){defined[e.dataset.defines]=1;});
 var out=document.createElement('pre');out.id='"""
    + MARKER
    + """';out.style.display='none';
 out.textContent=JSON.stringify({act:act,errors:errs,wide:wide.slice(0,20),broken_images:broken,viewport:vw,
  terms:Object.keys(terms).sort(),undefined_terms:Object.keys(terms).filter(function(t){return !defined[t];}).sort(),
  title:document.title});
 document.body.appendChild(out);}
window.addEventListener('load',function(){setTimeout(check,50);});
})();</script>"""
)


ROOT = Path(__file__).resolve().parents[1]


def screenshots_dir(test: str) -> Path:
    """Where a browser test keeps its screenshots for a person (or CI) to look at after the run:
    `$GAUNTLET_TEST_ARTIFACTS/screenshots/<test>/`, by default `runs/test-artifacts/screenshots/<test>/` in the
    checkout (runs/ is ignored by git). Emptied first, so it holds the last run's pictures only."""
    base = Path(os.environ.get("GAUNTLET_TEST_ARTIFACTS") or ROOT / "runs" / "test-artifacts")
    folder = base / "screenshots" / test
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def chromium() -> str | None:
    """The Chromium binary, or None; with GAUNTLET_REQUIRE_CHROMIUM=1 (set by .ci/run) a missing one fails the test."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("GAUNTLET_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is missing and GAUNTLET_REQUIRE_CHROMIUM=1 (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    return found


def _run(binary: str, profile: Path, args: list[str], timeout: float = 120.0, width: int = VIEWPORT[0]) -> str:
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{VIEWPORT[1]}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def inspect(
    page: Path,
    screenshots: Path,
    tmp: Path,
    served: tuple[str, Path] | None = None,
    width: int = VIEWPORT[0],
    act: str | None = None,
) -> dict[str, Any]:
    """Open `page` at a `width` px viewport (1,280; 500 for a narrow screen, headless Chromium's narrowest); return
    the findings (module docstring) and save `<stem>[-<width>].png` under `screenshots`. served: (base URL, folder it
    serves) to open the page over HTTP instead of as a file (a site whose scripts a file:// URL would stop). act: the
    body of a JavaScript function run once the page has loaded, before the measuring (what a reader does: click,
    type); what it returns (JSON) is the finding `act`."""

    def url(path: Path) -> str:
        if served is None:
            return path.as_uri()
        return served[0].rstrip("/") + "/" + path.relative_to(served[1]).as_posix()

    binary = chromium()
    assert binary is not None
    text = page.read_text(encoding="utf-8")
    head = re.search(r"<head[^>]*>", text, flags=re.IGNORECASE)
    assert head is not None, f"{page} has no <head>"
    probed = page.with_name(f".probed-{page.name}")
    acting = "" if act is None else f"<script>window.gauntletAct=function(){{{act}}};</script>"
    probed.write_text(text[: head.end()] + PROBE + acting + text[head.end() :], encoding="utf-8")
    profile = tmp / "chromium-profile"
    try:
        dom = _run(binary, profile, ["--virtual-time-budget=10000", "--dump-dom", url(probed)], width=width)
    finally:
        probed.unlink()
    found = re.search(rf'<pre id="{MARKER}"[^>]*>(.*?)</pre>', dom, flags=re.DOTALL)
    assert found is not None, f"the check did not run in {page.name} (no load event within the time budget?)"
    import html

    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    screenshots.mkdir(parents=True, exist_ok=True)
    stem = page.relative_to(served[1]).with_suffix("").as_posix().replace("/", "-") if served else page.stem
    shot = screenshots / (f"{stem}.png" if width == VIEWPORT[0] else f"{stem}-{width}.png")
    _run(binary, profile, ["--virtual-time-budget=5000", f"--screenshot={shot}", url(page)], width=width)
    result["screenshot"] = str(shot)
    return result


def assert_readable(result: dict[str, Any], page: str, width: int = VIEWPORT[0]) -> None:
    """The page passes the browser check: no error, nothing wider than the viewport, every image loaded, every
    metric it marks explained in its glossary."""
    assert result["viewport"] == width, result
    assert not result["errors"], f"{page}: {result['errors']}"
    assert not result["wide"], f"{page}: wider than {width} px: {result['wide']}"
    assert not result["broken_images"], f"{page}: images that did not load: {result['broken_images']}"
    assert not result["undefined_terms"], f"{page}: metrics the glossary does not explain: {result['undefined_terms']}"
