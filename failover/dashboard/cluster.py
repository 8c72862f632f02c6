"""The cluster's health: the rows the processes publish to the shared store
(``Failover(publish_health=...)``, `failover.publish`), added up per failover for the store
dashboard (``failover dashboard --store URL``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..stores.health_rows import FailoverSummary, ProcessHealth, health_rows

__all__ = ["Cluster", "ClusterFailover", "cluster_of", "read_cluster"]

WORST_FIRST = ("down", "degraded", "up", "idle")


def _rank(status: str) -> int:
    return WORST_FIRST.index(status) if status in WORST_FIRST else len(WORST_FIRST)


def worst(statuses: Iterable[str], default: str = "idle") -> str:
    """The worst of ``statuses`` (``default`` when there are none)."""
    return min(statuses, key=_rank, default=default)


@dataclass(frozen=True, slots=True)
class ClusterFailover:
    """One failover across the processes that report it.

    Attributes:
        name: the failover's name.
        processes: how many processes report it.
        statuses: how many processes report each status, worst first.
        total: the worst status a process reports, the calls of every process added up (live,
            fresh, served stale, not recovered), and the latest failure's exception class.
        breakers_open: processes whose breaker for it is open.
    """

    name: str
    processes: int
    statuses: dict[str, int]
    total: FailoverSummary
    breakers_open: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        total = self.total.to_dict()
        del total["breaker"]  # one per process: breakers_open says how many are open
        return {
            "name": self.name,
            "processes": self.processes,
            "statuses": dict(self.statuses),
            **total,
            "breakers_open": self.breakers_open,
        }


@dataclass(frozen=True, slots=True)
class Cluster:
    """Every process reporting to the store, and each failover across them.

    Attributes:
        processes: the rows not expired, by hostname and pid (first, the one that stands for
            the rows that cannot be read, if any: ``problem`` says why).
        failovers: each failover across the processes, worst first, then by name.
    """

    processes: list[ProcessHealth] = field(default_factory=list)
    failovers: list[ClusterFailover] = field(default_factory=list)

    @property
    def status(self) -> str:
        """The worst status a process reports (``idle`` when none reports)."""
        return worst(p.status for p in self.processes if p.problem is None)

    def kpis(self) -> dict[str, Any]:
        """Processes reporting, and the calls of them all, with the share served stale."""
        calls = sum(f.total.calls for f in self.failovers)
        stale = sum(f.total.stale for f in self.failovers)
        return {
            "processes": sum(p.problem is None for p in self.processes),
            "calls": calls,
            "stale": stale,
            "not_recovered": sum(f.total.not_recovered for f in self.failovers),
            "stale_percent": None if not calls else round(100.0 * stale / calls, 1),
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: the ``cluster`` of the store dashboard's
        ``/api/failovers``."""
        return {
            "status": self.status,
            "totals": self.kpis(),
            "failovers": [f.to_dict() for f in self.failovers],
            "processes": [p.to_dict() for p in self.processes],
        }


def cluster_of(rows: Iterable[ProcessHealth]) -> Cluster:
    """The processes of ``rows`` and each failover added up across them."""
    processes = list(rows)
    names = sorted({name for p in processes for name in p.failovers})
    failovers = []
    for name in names:
        reports = [(p, p.failovers[name]) for p in processes if name in p.failovers]
        statuses: dict[str, int] = {}
        for _, s in sorted(reports, key=lambda r: _rank(r[1].status)):
            statuses[s.status] = statuses.get(s.status, 0) + 1
        failed = [(p.published_at, s.last_failure) for p, s in reports if s.last_failure]
        total = FailoverSummary(
            worst(statuses),
            live=sum(s.live for _, s in reports),
            stale=sum(s.stale for _, s in reports),
            not_recovered=sum(s.not_recovered for _, s in reports),
            fresh=sum(s.fresh for _, s in reports),
            last_failure=max(failed)[1] if failed else None,
        )
        open_ = sum(s.breaker == "open" for _, s in reports)
        failovers.append(ClusterFailover(name, len(reports), statuses, total, open_))
    failovers.sort(key=lambda f: (_rank(f.total.status), f.name))
    return Cluster(processes, failovers)


def read_cluster(store: object, now: datetime) -> Cluster | None:
    """The cluster's health from ``store``'s rows not expired at ``now``; ``None`` when the
    store keeps no rows."""
    rows = health_rows(store)
    return None if rows is None else cluster_of(rows.health_rows(now))
