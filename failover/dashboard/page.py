"""The dashboard's one HTML page, rendered on the server.

Everything shown is escaped (`html.escape`); the page fetches nothing from elsewhere (styles and
the script are inline, allowed by a hash in the Content-Security-Policy). It works without
JavaScript: links reload it, and a ``<noscript>`` refresh keeps it current; the script only
refreshes it in place (and remembers the theme).
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime

from .cluster_page import render_cluster
from .entries import Page
from .markup import NONE as _NONE
from .markup import age as _age
from .markup import badge as _badge
from .markup import cards
from .markup import e as _e
from .markup import link as _link
from .markup import percent as _percent
from .markup import size as _size
from .markup import time_of as _time
from .views import FailoverRow, Overview

__all__ = ["CSP", "REFRESH_SECONDS", "render"]

REFRESH_SECONDS = 5

_STYLE = """
:root{--bg:#f7f7f8;--fg:#1d1f23;--muted:#5f6670;--card:#fff;--line:#dcdfe4;--link:#0b57d0;
--up:#137333;--up-bg:#e6f4ea;--degraded:#8a5300;--degraded-bg:#fef3d6;--down:#b3261e;
--down-bg:#fce8e6;--idle:#5f6670;--idle-bg:#eceff1;color-scheme:light}
@media (prefers-color-scheme:dark){:root:not([data-theme=light]){--bg:#131417;--fg:#e6e7ea;
--muted:#9aa0a8;--card:#1c1e22;--line:#30333a;--link:#8ab4f8;--up:#81c995;--up-bg:#15301e;
--degraded:#fdd663;--degraded-bg:#3a2f0c;--down:#f28b82;--down-bg:#3c1715;--idle:#9aa0a8;
--idle-bg:#25282d;color-scheme:dark}}
:root[data-theme=dark]{--bg:#131417;--fg:#e6e7ea;--muted:#9aa0a8;--card:#1c1e22;--line:#30333a;
--link:#8ab4f8;--up:#81c995;--up-bg:#15301e;--degraded:#fdd663;--degraded-bg:#3a2f0c;
--down:#f28b82;--down-bg:#3c1715;--idle:#9aa0a8;--idle-bg:#25282d;color-scheme:dark}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
background:var(--bg);color:var(--fg)}
header{display:flex;gap:1rem;align-items:center;padding:.8rem 1.5rem;
border-bottom:1px solid var(--line);background:var(--card)}
header h1{font-size:1.1rem;margin:0;font-weight:600}
header .meta{color:var(--muted);margin-left:auto;font-size:.85rem}
main{padding:1.2rem 1.5rem;max-width:1400px}
a{color:var(--link)}
button{font:inherit;background:var(--card);color:var(--fg);border:1px solid var(--line);
border-radius:6px;padding:.2rem .6rem;cursor:pointer}
.kpis{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:.8rem;
margin-bottom:1.2rem}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.7rem .9rem}
.kpi .label{color:var(--muted);font-size:.8rem;text-transform:uppercase;letter-spacing:.03em}
.kpi .value{font-size:1.5rem;font-weight:600;font-variant-numeric:tabular-nums}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);
border-radius:8px;overflow:hidden}
th,td{text-align:left;padding:.45rem .7rem;border-bottom:1px solid var(--line);
vertical-align:top}
th{font-size:.78rem;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.selected td{background:var(--idle-bg)}
h2{font-size:1rem;margin:1.6rem 0 .6rem}
.badge{display:inline-block;border-radius:999px;padding:.05rem .6rem;font-size:.8rem;
font-weight:600}
.badge.up{color:var(--up);background:var(--up-bg)}
.badge.degraded{color:var(--degraded);background:var(--degraded-bg)}
.badge.down{color:var(--down);background:var(--down-bg)}
.badge.idle,.badge.unknown{color:var(--idle);background:var(--idle-bg)}
.muted{color:var(--muted)}
.expired{color:var(--muted);text-decoration:line-through}
code,.key{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em;
word-break:break-all}
.error{border:1px solid var(--down);color:var(--down);background:var(--down-bg);
border-radius:8px;padding:.6rem .9rem}
nav.pages{margin-top:.6rem;display:flex;gap:1rem}
"""

_SCRIPT = """
(function(){
var root=document.documentElement,paused=false,saved=null;
try{saved=localStorage.getItem("failover-theme")}catch(e){}
if(saved){root.dataset.theme=saved}
var theme=document.getElementById("theme"),pause=document.getElementById("pause");
theme.hidden=false;pause.hidden=false;
theme.onclick=function(){
var dark=root.dataset.theme?root.dataset.theme==="dark":
matchMedia("(prefers-color-scheme: dark)").matches;
root.dataset.theme=dark?"light":"dark";
try{localStorage.setItem("failover-theme",root.dataset.theme)}catch(e){}};
pause.onclick=function(){paused=!paused;pause.textContent=paused?"Resume":"Pause"};
function swap(d,sel){
var n=d.querySelector(sel),o=document.querySelector(sel);if(n&&o){o.replaceWith(n)}}
function refresh(){
if(paused||document.hidden){return}
fetch(location.href,{headers:{"Accept":"text/html"},credentials:"same-origin"})
.then(function(r){return r.ok?r.text():null})
.then(function(t){if(!t||paused){return}
var d=new DOMParser().parseFromString(t,"text/html");
swap(d,"main");swap(d,"#status");swap(d,"#meta");document.title=d.title}).catch(function(){})}
setInterval(refresh,1000*(parseFloat(document.body.dataset.refresh)||5));
})();
"""


def _hash(source: str) -> str:
    digest = hashlib.sha256(source.encode()).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


CSP = (
    "default-src 'none'; "
    f"style-src {_hash(_STYLE)}; "
    f"script-src {_hash(_SCRIPT)}; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'"
)
"""The page's Content-Security-Policy: only its own inline style and script run."""


def render(
    overview: Overview | None,
    *,
    base: str = "",
    selected: str | None = None,
    entries: Page | None = None,
    limit: int = 50,
    after: str | None = None,
    error: str | None = None,
    entries_error: str | None = None,
    refresh: float = REFRESH_SECONDS,
) -> str:
    """The page.

    Args:
        overview: what to show; ``None`` when it could not be read (``error`` says why).
        base: the path the app is mounted at (links are absolute under it).
        selected: the name whose entries are shown.
        entries: the page of entries of ``selected``.
        limit: entries per page (kept in the links).
        after: the key the entries start after (not the first page).
        error: why the overview is missing.
        entries_error: why the entries are missing.
        refresh: seconds between two refreshes of the page by its script.
    """
    status = overview.status if overview is not None else "unknown"
    now = overview.at if overview is not None else None
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>failover · {_e(status)}</title>",
        # Without JavaScript the page reloads itself, less often (a reload loses the scroll).
        f'<noscript><meta http-equiv="refresh" content="{max(30, round(refresh * 6))}"></noscript>',
        f'<style>{_STYLE}</style></head><body data-refresh="{refresh:g}">',
        "<header><h1>failover</h1>",
        f'<span id="status">{_badge(status)}</span>',
        '<span class="meta" id="meta">',
        f"{_e(overview.store) if overview else ''} · {_e(_time(now))}",
        "</span>",
        '<button id="pause" type="button" hidden>Pause</button>',
        '<button id="theme" type="button" hidden title="Light or dark">Theme</button>',
        "</header><main>",
    ]
    if error is not None:
        parts.append(f'<p class="error" role="alert">{_e(error)}</p>')
    if overview is not None:
        if overview.of_store:
            if overview.cluster is not None:
                parts.append(render_cluster(overview.cluster, overview.at))
            parts.append(_names(overview, base, selected, limit))
        else:
            parts.append(_kpis(overview))
            parts.append(_failovers(overview, base, selected, limit))
            parts.append(_pools(overview))
            parts.append(_stores(overview))
    if selected is not None:
        parts.append(_entries(selected, entries, now, base, limit, after, entries_error))
    parts.append(f"</main><script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts)


def _kpis(o: Overview) -> str:
    k = o.kpis()
    counts: dict[str, int] = {}
    for row in o.failovers:
        counts[row.health.status] = counts.get(row.health.status, 0) + 1
    breakdown = ", ".join(f"{n} {s}" for s, n in counts.items()) or "none registered"
    return cards(
        "kpis",
        [
            ("Calls", f"{k['calls']:,}", f"last {o.window}s"),
            ("Live", _percent(k["live_percent"]), "answered by the upstream"),
            ("Fresh", _percent(k["fresh_percent"]), "from the store within fresh_for"),
            ("Served stale", _percent(k["stale_percent"]), "recovered from the store"),
            ("Not recovered", _percent(k["not_recovered_percent"]), "nothing usable stored"),
            ("Failovers", str(len(o.failovers)), breakdown),
        ],
    )


def _failovers(o: Overview, base: str, selected: str | None, limit: int) -> str:
    if not o.failovers:
        return '<p class="muted" id="failovers">No failover is registered with this engine.</p>'
    head = (
        "<tr><th>Status</th><th>Failover</th><th>TTL</th><th>Policy</th><th>Execution</th>"
        '<th class="num">Live</th><th class="num">Fresh</th><th class="num">Stale</th>'
        '<th class="num">Not recovered</th>'
        "<th>Stale age</th><th>Breaker</th><th>Last failure</th></tr>"
    )
    rows = [f'<h2>Failovers <span class="muted">(last {o.window}s)</span></h2>']
    rows.append(f'<table id="failovers"><thead>{head}</thead><tbody>')
    for row in o.failovers:
        rows.append(_failover_row(row, base, selected, limit))
    rows.append("</tbody></table>")
    return "".join(rows)


def _failover_row(row: FailoverRow, base: str, selected: str | None, limit: int) -> str:
    h, s = row.health, row.settings
    stored_as = s.get("effective_name", h.name)
    failure = h.last_failure
    last = (
        _NONE
        if failure is None
        else f"{_e(failure.type)} <span class='muted'>{_e(_time(failure.at))}</span>"
    )
    name = _e(h.name)
    domain = "" if stored_as == h.name else f' <span class="muted">in {_e(stored_as)}</span>'
    link = _link(base, name=stored_as, limit=str(limit))
    css = ' class="selected"' if selected == stored_as else ""
    c = h.counts
    return (
        f'<tr{css} data-name="{name}"><td>{_badge(h.status)}</td>'
        f'<td><a href="{link}" title="Show the stored entries">{name}</a>{domain}</td>'
        f"<td>{_e(_age(float(s.get('ttl_seconds') or 0)))}</td><td>{_e(s.get('policy', ''))}</td>"
        f"<td>{_e(s.get('execution', ''))}</td>"
        f'<td class="num">{c.get("live", 0):,}</td><td class="num">{c.get("fresh", 0):,}</td>'
        f'<td class="num">{c.get("recovered", 0):,}</td>'
        f'<td class="num">{c.get("not_recovered", 0):,}</td>'
        f"<td>{_e(_age(h.stale_age))}</td><td>{_e(h.breaker or _NONE)}</td><td>{last}</td></tr>"
    )


def _stores(o: Overview) -> str:
    """The stores under a deadline: up or down (store breaker open), and their troubles."""
    if not o.stores:
        return ""
    head = "<tr><th>Store</th><th>Status</th><th>Errors</th></tr>"
    html = [f'<h2>Stores</h2><table id="stores"><thead>{head}</thead><tbody>']
    for st in o.stores:
        errors = ", ".join(f"{_e(why)}: {n:,}" for why, n in sorted(st.errors.items()))
        html.append(
            f'<tr data-store="{_e(st.name)}"><td>{_e(st.name)}</td>'
            f"<td>{_badge(st.status)}</td>"
            f"<td>{errors or _NONE}</td></tr>"
        )
    html.append("</tbody></table>")
    return "".join(html)


def _pools(o: Overview) -> str:
    """The bulkhead pools: permits in use and waiting now, refusals per failover."""
    if not o.pools:
        return ""
    head = (
        '<tr><th>Pool</th><th>Source</th><th class="num">Permits</th><th class="num">In use</th>'
        '<th class="num">Waiting</th><th>Refused</th></tr>'
    )
    html = [f'<h2>Bulkhead pools</h2><table id="pools"><thead>{head}</thead><tbody>']
    for p in o.pools:
        refused = ", ".join(f"{_e(name)}: {n:,}" for name, n in sorted(p.rejected.items()))
        in_use = _NONE if p.in_use is None else f"{p.in_use:,}"
        waiting = _NONE if p.waiting is None else f"{p.waiting:,}"
        html.append(
            f'<tr data-pool="{_e(p.name)}"><td>{_e(p.name)}</td><td>{_e(p.source)}</td>'
            f'<td class="num">{p.permits:,}</td><td class="num">{in_use}</td>'
            f'<td class="num">{waiting}</td><td>{refused or _NONE}</td></tr>'
        )
    html.append("</tbody></table>")
    return "".join(html)


def _names(o: Overview, base: str, selected: str | None, limit: int) -> str:
    head = (
        '<tr><th>Name</th><th class="num">Entries</th><th class="num">Live</th>'
        '<th class="num">Expired</th><th>Oldest as_of</th><th>Newest as_of</th>'
        '<th class="num">Size</th></tr>'
    )
    total = sum(n.count for n in o.names)
    html = [
        "<h2>Stored entries</h2>" if o.cluster is not None else "",
        cards(
            "kpis",
            [
                ("Names", str(len(o.names)), "in the store"),
                ("Entries", f"{total:,}", f"{sum(n.expired for n in o.names):,} expired"),
            ],
        ),
        ""
        if o.cluster is not None  # the cluster section says where the counts come from
        else '<p class="muted">Per-call counts are per process: see the Prometheus metrics.</p>',
        f'<table id="failovers"><thead>{head}</thead><tbody>',
    ]
    for n in o.names:
        css = ' class="selected"' if selected == n.name else ""
        link = _link(base, name=n.name, limit=str(limit))
        html.append(
            f'<tr{css} data-name="{_e(n.name)}"><td><a href="{link}">{_e(n.name)}</a></td>'
            f'<td class="num">{n.count:,}</td><td class="num">{n.count - n.expired:,}</td>'
            f'<td class="num">{n.expired:,}</td><td>{_e(_time(n.oldest))}</td>'
            f'<td>{_e(_time(n.newest))}</td><td class="num">{_e(_size(n.size))}</td></tr>'
        )
    if not o.names:
        html.append('<tr><td colspan="7" class="muted">The store holds no entries.</td></tr>')
    html.append("</tbody></table>")
    return "".join(html)


def _entries(
    name: str,
    page: Page | None,
    now: datetime | None,
    base: str,
    limit: int,
    after: str | None,
    error: str | None,
) -> str:
    html = [f'<section id="entries"><h2>Entries of <code>{_e(name)}</code>']
    if page is not None:
        html.append(f' <span class="muted">({page.total:,} stored)</span>')
    html.append(f' <a href="{_e(base)}/" class="muted">close</a></h2>')
    if error is not None:
        html.append(f'<p class="error" role="alert">{_e(error)}</p></section>')
        return "".join(html)
    if page is None or not page.entries:
        html.append('<p class="muted">No entries.</p></section>')
        return "".join(html)
    payloads = any(e.payload is not None for e in page.entries)
    labels = any(e.label is not None for e in page.entries)
    head = (
        "<tr><th>Key</th>"
        + ("<th>Label</th>" if labels else "")
        + "<th>as_of</th><th>expire_on</th><th>Age</th>"
        '<th class="num">Size</th>' + ("<th>Payload</th>" if payloads else "") + "</tr>"
    )
    html.append(f'<table id="entries-table"><thead>{head}</thead><tbody>')
    for e in page.entries:
        expired = now is not None and e.expired(now)
        age = None if e.as_of is None or now is None else (now - e.as_of).total_seconds()
        state = ' class="expired" title="expired"' if expired else ""
        html.append(
            f'<tr><td class="key"><span{state}>{_e(e.key)}</span></td>'
            + (f'<td class="label">{_e(e.label or "")}</td>' if labels else "")
            + f"<td>{_e(_time(e.as_of))}</td><td>{_e(_time(e.expire_on))}"
            f"{' <span class=muted>(expired)</span>' if expired else ''}</td>"
            f'<td>{_e(_age(age))}</td><td class="num">{_e(_size(e.size))}</td>'
            + (f"<td><code>{_e(e.payload or '')}</code></td>" if payloads else "")
            + "</tr>"
        )
    html.append("</tbody></table><nav class='pages'>")
    if after is not None:
        html.append(f'<a href="{_link(base, name=name, limit=str(limit))}">First page</a>')
    if page.next_after is not None:
        more = _link(base, name=name, limit=str(limit), after=page.next_after)
        html.append(f'<a href="{more}" rel="next">Next page →</a>')
    html.append("</nav></section>")
    return "".join(html)
