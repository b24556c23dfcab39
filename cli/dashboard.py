# ruff: noqa: E501  (the page's inline script keeps its own line lengths)
"""`gauntlet dashboard`: a local web page over a generator's campaigns, live.

The page is one self-contained HTML file (inline CSS and a small inline script, no CDN) served on loopback with two
JSON endpoints it polls every second: `/api/campaigns` (ListCampaigns: every campaign of the generator's store,
running and finished, with executions, failures and invalid inputs) and `/api/campaign?id=ID` (ListExecutions: the
cumulative-failure curve and the failures with their reason and `gauntlet replay` command) and `/api/compare?subject=S`
(the comparison plot: the newest campaigns on the chosen campaign's subject, one cumulative-failure line each coloured
by strategy, and per strategy its campaigns' failures, redrawn every 5 s). The CLI stays a client:
it reads the campaigns through the generator's RPCs (`--generator H:P`), or, without one, through a generator
started on loopback over the same store URL that does not take over any campaign (resume_on_start off), so campaigns
that run on other machines against the same store show up too."""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import grpc

from cli.commands import remote_credentials, resolve_store_url
from cli.endpoints import reach
from cli.errors import UserError
from cli.launcher import LaunchError, LocalSuite
from common.credentials import ClientCredentials
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc, oracle_pb2
from common.remote import describe
from common.server import client_channel

CALL_SECONDS = 30.0
CURVE_POINTS = 300  # the cumulative-failure curve is thinned to at most this many points
FAILURES_SHOWN = 100
STATES = {
    generator_pb2.CAMPAIGN_STATE_RUNNING: "running",
    generator_pb2.CAMPAIGN_STATE_COMPLETED: "completed",
    generator_pb2.CAMPAIGN_STATE_FAILED: "failed",
    generator_pb2.CAMPAIGN_STATE_INTERRUPTED: "interrupted",
    generator_pb2.CAMPAIGN_STATE_CANCELLED: "cancelled",
}


def campaign_rows(stub: generator_pb2_grpc.GeneratorServiceStub) -> list[dict[str, Any]]:
    """Every campaign of the store, newest first: what the dashboard's table shows."""
    listed = stub.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=CALL_SECONDS).campaigns
    rows = [
        {
            "campaign_id": c.campaign_id,
            "name": c.spec.name,
            "subject": c.spec.subject,
            "model": c.spec.model.name,
            "strategy": c.spec.strategy,
            "state": STATES.get(c.state, "unknown"),
            "executions": c.executions,
            "budget": c.spec.budget.max_executions,
            "failures": c.failures,
            "invalid": c.invalid_inputs,
            "wall_seconds": round(c.wall_seconds, 1),
            "created_at": c.created_at,
        }
        for c in listed
    ]
    return sorted(rows, key=lambda r: r["created_at"], reverse=True)


def campaign_detail(stub: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str) -> dict[str, Any]:
    """One campaign's cumulative failures over its executions and its failures (first FAILURES_SHOWN)."""
    curve: list[tuple[int, int]] = []
    failures: list[dict[str, Any]] = []
    found = 0
    request = generator_pb2.ListExecutionsRequest(campaign_id=campaign_id)
    executions = [r.execution for r in stub.ListExecutions(request, timeout=CALL_SECONDS)]
    for e in sorted(executions, key=lambda e: e.index):
        if e.verdict == oracle_pb2.VERDICT_KIND_INVALID:  # not an execution
            continue
        if e.verdict == oracle_pb2.VERDICT_KIND_FAIL:
            found += 1
            if len(failures) < FAILURES_SHOWN:
                failures.append(
                    {
                        "test_case_id": e.test_case.id,
                        "reason": e.reason,
                        "margin": round(e.margin, 4),
                        "replay": f"gauntlet replay {campaign_id} {e.test_case.id}",
                    }
                )
        curve.append((int(e.index), found))
    step = max(1, len(curve) // CURVE_POINTS)
    thinned = curve[::step] + ([curve[-1]] if curve and (len(curve) - 1) % step else [])
    return {"campaign_id": campaign_id, "curve": thinned, "failures": failures, "failures_total": found}


COMPARED = 24  # campaigns of one subject drawn together in the comparison plot (the newest)


def comparison(stub: generator_pb2_grpc.GeneratorServiceStub, subject: str) -> dict[str, Any]:
    """The newest campaigns on `subject` (up to COMPARED), each with its strategy and cumulative-failure curve: the
    comparison plot, one line per campaign coloured by strategy, and per strategy its campaigns' failures."""
    rows = [r for r in campaign_rows(stub) if r["subject"] == subject][:COMPARED]
    campaigns = [
        {
            "campaign_id": r["campaign_id"],
            "strategy": r["strategy"],
            "curve": campaign_detail(stub, r["campaign_id"])["curve"],
        }
        for r in rows
    ]
    strategies: dict[str, list[int]] = {}
    for r in rows:
        strategies.setdefault(r["strategy"], []).append(int(r["failures"]))
    return {"subject": subject, "campaigns": campaigns, "strategies": strategies}


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Gauntlet dashboard</title><style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;color:#222;max-width:1200px}
.meta{color:#666;font-size:.9rem} .scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.8rem 0;font-size:.88rem}
th,td{border:1px solid #ccc;padding:.3rem .55rem;text-align:left;vertical-align:top}
th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.pick{cursor:pointer} tr.pick:hover{background:#f7f7ff} tr.chosen{background:#eef}
code{font-size:.82rem;word-break:break-all} .fail{color:#b00020;font-weight:600} svg{max-width:100%}
@media (max-width:700px){body{margin:.6rem}}
</style></head><body>
<h1>Gauntlet dashboard</h1>
<p class=meta>Campaigns of the generator at <code id=where></code>, refreshed every second.
Click a campaign for its cumulative failures, its failing inputs and the strategies run on its subject.</p>
<div class=scroll><table><thead><tr><th>campaign</th><th>strategy</th><th>subject</th><th>model</th><th>state</th>
<th>executions</th><th>failures</th><th>invalid</th><th>seconds</th></tr></thead><tbody id=campaigns></tbody></table></div>
<section id=compare></section>
<section id=detail></section>
<p id=errors class=fail></p>
<script>
var chosen=null,compared=null,ticks=0;
function oops(text){document.getElementById('errors').textContent='dashboard: '+text;}
window.addEventListener('error',function(e){oops(e.message);});
window.addEventListener('unhandledrejection',function(e){oops(String(e.reason));});
function esc(s){return String(s).replace(/[&<>"']/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c];});}
function plot(curve){if(!curve.length){return '<p class=meta>no executions yet</p>';}
 var w=640,h=200,mx=curve[curve.length-1][0]||1,my=Math.max(1,curve[curve.length-1][1]);
 var pts=curve.map(function(p){return (40+p[0]/mx*(w-50)).toFixed(1)+','+(h-25-p[1]/my*(h-40)).toFixed(1);}).join(' ');
 return '<svg id=curve viewBox="0 0 '+w+' '+h+'" width="'+w+'" height="'+h+'" role=img aria-label="cumulative failures">'
 +'<line x1=40 y1='+(h-25)+' x2='+(w-10)+' y2='+(h-25)+' stroke="#888"/><line x1=40 y1=15 x2=40 y2='+(h-25)+' stroke="#888"/>'
 +'<text x=4 y=20 font-size=11>'+my+'</text><text x=30 y='+(h-8)+' font-size=11>0</text>'
 +'<text x='+(w-60)+' y='+(h-8)+' font-size=11>'+mx+' exec.</text>'
 +'<polyline fill=none stroke="#b00020" stroke-width=2 points="'+pts+'"/></svg>';}
var COLOURS=['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#7f7f7f'];
function median(xs){var s=xs.slice().sort(function(a,b){return a-b;}),m=s.length>>1;
 return s.length%2?s[m]:(s[m-1]+s[m])/2;}
function compare(subject){if(!subject){return;}
 fetch('/api/compare?subject='+encodeURIComponent(subject)).then(function(r){return r.json();}).then(function(d){
  if(d.error){document.getElementById('compare').innerHTML='<p class=fail>'+esc(d.error)+'</p>';return;}
  var names=Object.keys(d.strategies).sort(),w=640,h=220,mx=1,my=1;
  d.campaigns.forEach(function(c){c.curve.forEach(function(p){mx=Math.max(mx,p[0]);my=Math.max(my,p[1]);});});
  var lines=d.campaigns.map(function(c){var k=names.indexOf(c.strategy);
   return '<polyline class=strategy-line data-strategy="'+esc(c.strategy)+'" fill=none stroke-width=1.5 stroke="'
   +COLOURS[k%COLOURS.length]+'" points="'+c.curve.map(function(p){return (40+p[0]/mx*(w-50)).toFixed(1)+','
   +(h-25-p[1]/my*(h-40)).toFixed(1);}).join(' ')+'"><title>'+esc(c.campaign_id)+'</title></polyline>';}).join('');
  var legend=names.map(function(n,k){var f=d.strategies[n];return '<tr><td><span style="color:'
   +COLOURS[k%COLOURS.length]+'">&#9632;</span> '+esc(n)+'</td><td class=num>'+f.length+'</td><td class=num>'
   +median(f)+'</td><td class=num>'+Math.min.apply(null,f)+'&ndash;'+Math.max.apply(null,f)+'</td></tr>';}).join('');
  document.getElementById('compare').innerHTML='<h2>Strategies on '+esc(d.subject)+'</h2>'
   +'<p class=meta>Cumulative failures of the newest '+d.campaigns.length+' campaigns on this subject, one line each, '
   +'coloured by strategy.</p><svg id=comparison viewBox="0 0 '+w+' '+h+'" width="'+w+'" height="'+h
   +'" role=img aria-label="cumulative failures per strategy"><line x1=40 y1='+(h-25)+' x2='+(w-10)+' y2='+(h-25)
   +' stroke="#888"/><line x1=40 y1=15 x2=40 y2='+(h-25)+' stroke="#888"/><text x=4 y=20 font-size=11>'+my
   +'</text><text x=30 y='+(h-8)+' font-size=11>0</text><text x='+(w-60)+' y='+(h-8)+' font-size=11>'+mx
   +' exec.</text>'+lines+'</svg><div class=scroll><table><thead><tr><th>strategy</th><th>campaigns</th>'
   +'<th>median failures</th><th>range</th></tr></thead><tbody id=strategies>'+legend+'</tbody></table></div>';});}
function detail(){if(!chosen){return;}
 fetch('/api/campaign?id='+encodeURIComponent(chosen)).then(function(r){return r.json();}).then(function(d){
  if(d.error){document.getElementById('detail').innerHTML='<p class=fail>'+esc(d.error)+'</p>';return;}
  var rows=d.failures.map(function(f){return '<tr><td><code>'+esc(f.test_case_id)+'</code></td><td>'+esc(f.reason)
   +'</td><td class=num>'+f.margin+'</td><td><code>'+esc(f.replay)+'</code></td></tr>';}).join('');
  document.getElementById('detail').innerHTML='<h2>'+esc(d.campaign_id)+'</h2><h3>Cumulative failures</h3>'+plot(d.curve)
   +'<h3>Failing inputs (<span id=failures-total>'+d.failures_total+'</span>)</h3>'
   +(rows?'<div class=scroll><table><thead><tr><th>test case</th><th>reason</th><th>margin</th><th>replay</th></tr></thead>'
   +'<tbody id=failures>'+rows+'</tbody></table></div>':'<p class=meta>no failures yet</p>');});}
function refresh(){fetch('/api/campaigns').then(function(r){return r.json();}).then(function(d){
  document.getElementById('where').textContent=d.where;
  if(d.error){document.getElementById('campaigns').innerHTML='<tr><td colspan=9 class=fail>'+esc(d.error)+'</td></tr>';return;}
  if(!chosen&&d.campaigns.length){chosen=d.campaigns[0].campaign_id;}
  var picked=d.campaigns.filter(function(c){return c.campaign_id===chosen;})[0];
  if(picked&&(ticks++%5===0||picked.subject!==compared)){compared=picked.subject;compare(compared);}
  document.getElementById('campaigns').innerHTML=d.campaigns.map(function(c){
   return '<tr class="pick'+(c.campaign_id===chosen?' chosen':'')+'" data-id="'+esc(c.campaign_id)+'"><td>'
   +esc(c.name||c.campaign_id)+'<br><span class=meta>'+esc(c.campaign_id)+'</span></td><td>'+esc(c.strategy)+'</td><td>'
   +esc(c.subject)+'</td><td>'+esc(c.model)+'</td><td>'+esc(c.state)+'</td><td class="num executions">'+c.executions
   +(c.budget?' / '+c.budget:'')+'</td><td class="num failures">'+c.failures+'</td><td class=num>'+c.invalid
   +'</td><td class=num>'+c.wall_seconds+'</td></tr>';}).join('')||'<tr><td colspan=9 class=meta>no campaigns yet</td></tr>';
  Array.prototype.forEach.call(document.querySelectorAll('tr.pick'),function(tr){
   tr.onclick=function(){chosen=tr.dataset.id;detail();refresh();};});
  detail();});}
refresh();setInterval(refresh,1000);
</script></body></html>
"""


class _Handler(BaseHTTPRequestHandler):
    stub: generator_pb2_grpc.GeneratorServiceStub
    where: str

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one request a second: no access log on the terminal

    def _send(self, body: bytes, kind: str, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, data: dict[str, Any]) -> None:
        self._send(json.dumps(data).encode(), "application/json")

    def do_GET(self) -> None:
        url = urlparse(self.path)
        try:
            if url.path == "/":
                self._send(PAGE.encode(), "text/html; charset=utf-8")
            elif url.path == "/api/campaigns":
                self._json({"where": self.where, "campaigns": campaign_rows(self.stub)})
            elif url.path == "/api/campaign":
                cid = (parse_qs(url.query).get("id") or [""])[0]
                self._json(campaign_detail(self.stub, cid))
            elif url.path == "/api/compare":
                subject = (parse_qs(url.query).get("subject") or [""])[0]
                self._json(comparison(self.stub, subject))
            elif url.path == "/favicon.ico":
                self._send(b"", "image/x-icon", 204)
            else:
                self._send(b"not found", "text/plain", 404)
        except grpc.RpcError as exc:  # the page shows the generator's sentence, never a traceback
            self._json({"where": self.where, "error": f"generator {describe(exc)}", "campaigns": []})


@contextlib.contextmanager
def _generator(args: argparse.Namespace) -> Iterator[tuple[generator_pb2_grpc.GeneratorServiceStub, str]]:
    if args.generator:
        credentials = remote_credentials(args)
        with client_channel(args.generator, credentials) as channel:
            reach(channel, "generator", args.generator, plaintext=credentials.ca is None)
            yield generator_pb2_grpc.GeneratorServiceStub(channel), args.generator
        return
    url = resolve_store_url(args)
    with tempfile.TemporaryDirectory(prefix="gauntlet-dashboard-") as folder:
        local = LocalSuite(
            store_url=url,
            log_dir=Path(folder) / "logs",
            resume_on_start=False,  # a reader: it takes over no campaign another generator runs
            agent_preload=False,
            roles=frozenset({"generator"}),
        )
        try:
            local.start()
        except LaunchError as exc:
            raise UserError(str(exc)) from None
        try:
            with client_channel(local.endpoint("generator"), ClientCredentials()) as channel:
                yield generator_pb2_grpc.GeneratorServiceStub(channel), f"{local.endpoint('generator')} (local)"
        finally:
            local.stop()


def cmd_dashboard(args: argparse.Namespace) -> None:
    with _generator(args) as (stub, where):
        handler = type("Handler", (_Handler,), {"stub": stub, "where": where})
        try:
            server = ThreadingHTTPServer((args.host, args.port), handler)
        except OSError as exc:
            raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
        port = server.server_address[1]
        print(f"dashboard at http://{args.host}:{port}/ (campaigns of {where}); Ctrl-C stops it", flush=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            thread.join()
        finally:
            server.shutdown()
            server.server_close()
