"""The cluster section of the store dashboard's page: the processes that publish their health
to the store, and each failover added up across them (`failover.dashboard.cluster`)."""

from __future__ import annotations

from datetime import datetime

from .cluster import Cluster, ClusterFailover
from .markup import NONE, age, badge, cards, e, percent, time_of

__all__ = ["render_cluster"]


def render_cluster(cluster: Cluster, now: datetime) -> str:
    """The section: KPIs, the failovers across the processes, the processes."""
    if not cluster.processes:
        return (
            '<section id="cluster"><h2>Cluster</h2><p class="muted">No process publishes its '
            "health to this store: make their engines with "
            "<code>Failover(publish_health=True)</code>. Per-call counts are per process "
            "otherwise: see the Prometheus metrics.</p></section>"
        )
    k = cluster.kpis()
    window = max((p.window for p in cluster.processes if p.problem is None), default=0)
    html = [
        '<section id="cluster"><h2>Cluster</h2>',
        cards(
            "cluster-kpis",
            [
                ("Processes", f"{k['processes']:,}", "publishing their health"),
                ("Calls", f"{k['calls']:,}", f"each process's last {window}s"),
                ("Served stale", f"{k['stale']:,}", f"{percent(k['stale_percent'])} of the calls"),
                ("Not recovered", f"{k['not_recovered']:,}", "nothing usable stored"),
            ],
        ),
    ]
    html.append(_failovers(cluster))
    html.append(_processes(cluster, now))
    html.append("</section>")
    return "".join(html)


def _failovers(cluster: Cluster) -> str:
    head = (
        "<tr><th>Status</th><th>Failover</th>"
        '<th class="num">Processes</th><th>Their statuses</th><th class="num">Calls</th>'
        '<th class="num">Live</th><th class="num">Fresh</th><th class="num">Served stale</th>'
        '<th class="num">Not recovered</th><th class="num">Breakers open</th>'
        "<th>Last failure</th></tr>"
    )
    rows = [
        '<h2>Failovers across the cluster <span class="muted">(as each process last '
        "published)</span></h2>",
        f'<table id="cluster-failovers"><thead>{head}</thead><tbody>',
    ]
    rows.extend(_failover_row(f) for f in cluster.failovers)
    if not cluster.failovers:
        rows.append('<tr><td colspan="11" class="muted">No failover is registered.</td></tr>')
    rows.append("</tbody></table>")
    return "".join(rows)


def _failover_row(f: ClusterFailover) -> str:
    statuses = ", ".join(f"{n} {badge(s)}" for s, n in f.statuses.items())
    t = f.total
    counts = (
        ("calls", t.calls),
        ("live", t.live),
        ("fresh", t.fresh),
        ("stale", t.stale),
        ("not_recovered", t.not_recovered),
        ("breakers_open", f.breakers_open),
    )
    cells = "".join(f'<td class="num" data-col="{col}">{n:,}</td>' for col, n in counts)
    return (
        f'<tr data-name="{e(f.name)}"><td>{badge(t.status)}</td><td>{e(f.name)}</td>'
        f'<td class="num" data-col="processes">{f.processes:,}</td><td>{statuses}</td>'
        f"{cells}<td>{e(t.last_failure or NONE)}</td></tr>"
    )


def _processes(cluster: Cluster, now: datetime) -> str:
    head = (
        "<tr><th>Status</th><th>Process</th><th>Id</th>"
        '<th class="num">Calls</th><th class="num">Served stale</th><th>Started</th>'
        "<th>Published</th></tr>"
    )
    html = [
        "<h2>Processes</h2>",
        f'<table id="cluster-processes"><thead>{head}</thead><tbody>',
    ]
    for p in cluster.processes:
        if p.problem is not None:  # rows that cannot be read: shown, never added up
            html.append(
                f'<tr data-process="{e(p.process)}"><td>{badge(p.status)}</td>'
                f'<td colspan="6">{e(p.problem)}</td></tr>'
            )
            continue
        calls = sum(s.calls for s in p.failovers.values())
        stale = sum(s.stale for s in p.failovers.values())
        ago = (now - p.published_at).total_seconds()
        html.append(
            f'<tr data-process="{e(p.process)}"><td>{badge(p.status)}</td>'
            f"<td>{e(p.hostname)} <span class='muted'>pid {p.pid}</span></td>"
            f'<td><code title="{e(p.process)}">{e(p.process[:8])}</code></td>'
            f'<td class="num">{calls:,}</td><td class="num">{stale:,}</td>'
            f"<td>{e(time_of(p.started_at))}</td>"
            f"<td>{e(age(ago))} ago</td></tr>"
        )
    html.append("</tbody></table>")
    return "".join(html)
