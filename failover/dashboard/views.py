"""What the dashboard shows, gathered from an engine or from a store alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..health import (
    DOWN_MIN,
    DOWN_RATIO,
    OUTCOMES,
    WINDOW,
    FailoverHealth,
    PoolHealth,
    Status,
    StoreHealth,
    settings_of,
)
from ..stores.browsing import Summary
from .cluster import Cluster, read_cluster
from .entries import Page, page, summary, summary_dict

if TYPE_CHECKING:
    from ..engine import Failover
    from ..stores.base import FailoverStore

__all__ = ["EngineView", "FailoverRow", "Overview", "StoreView"]


@dataclass(frozen=True, slots=True)
class FailoverRow:
    """One registered failover: its health and its settings."""

    health: FailoverHealth
    settings: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary; numbers are JSON numbers (the settings are label text)."""
        data: dict[str, Any] = {"name": self.health.name, **self.settings}
        ttl = float(self.settings["ttl_seconds"])
        data["ttl_seconds"] = int(ttl) if ttl.is_integer() else ttl
        return {**data, **self.health.to_dict()}


@dataclass(frozen=True, slots=True)
class Overview:
    """The top of the page: status, KPIs over the window, and the table's rows.

    An engine's view fills ``failovers``; a store's view (``failover dashboard``) fills
    ``names`` and, from the rows the processes publish (``Failover(publish_health=...)``),
    ``cluster``: each failover's calls across the processes.
    """

    status: Status | str
    at: datetime
    store: str
    failovers: list[FailoverRow] = field(default_factory=list)
    names: list[Summary] = field(default_factory=list)
    window: int = WINDOW
    pools: list[PoolHealth] = field(default_factory=list)
    stores: list[StoreHealth] = field(default_factory=list)
    cluster: Cluster | None = None

    @property
    def of_store(self) -> bool:
        """Whether this is a store's view (names and the cluster), not an engine's."""
        return bool(self.names) or self.cluster is not None

    def totals(self) -> dict[str, int]:
        """Calls per outcome over the window, every failover together."""
        totals = dict.fromkeys(OUTCOMES, 0)
        for row in self.failovers:
            for outcome, n in row.health.counts.items():
                totals[outcome] += n
        return totals

    def kpis(self) -> dict[str, Any]:
        """Calls in the window and the share of each outcome (``None`` without calls)."""
        totals = self.totals()
        calls = sum(totals.values())

        def share(n: int) -> float | None:
            return None if not calls else round(100.0 * n / calls, 1)

        return {
            "calls": calls,
            "live_percent": share(totals["live"]),
            "fresh_percent": share(totals["fresh"]),
            "stale_percent": share(totals["recovered"]),
            "not_recovered_percent": share(totals["not_recovered"]),
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: what ``/api/failovers`` serves."""
        data: dict[str, Any] = {
            "status": self.status,
            "at": self.at.isoformat(),
            "store": self.store,
            "window_seconds": self.window,
        }
        if self.of_store:
            data["names"] = [summary_dict(n) for n in self.names]
            if self.cluster is not None:
                data["cluster"] = self.cluster.to_dict()
        else:
            data["kpis"] = self.kpis()
            data["failovers"] = [row.to_dict() for row in self.failovers]
            data["pools"] = [{"name": p.name, **p.to_dict()} for p in self.pools]
            data["stores"] = [{"name": st.name, **st.to_dict()} for st in self.stores]
        return data


class EngineView:
    """An engine's failovers, their health and their entries.

    Args:
        engine: the engine, or ``None`` for the default engine (looked up on each request, so
            that ``failover.configure()`` may run after the app is made).
    """

    per_call = True

    def __init__(
        self,
        engine: Failover | None = None,
        thresholds: tuple[float, int] = (DOWN_RATIO, DOWN_MIN),
    ) -> None:
        self._engine = engine
        self.down_ratio, self.down_min = thresholds

    @property
    def engine(self) -> Failover:
        """The engine shown."""
        if self._engine is not None:
            return self._engine
        from ..engine import get_engine

        return get_engine()

    def overview(self) -> Overview:
        """The engine's health and settings, worst first."""
        engine = self.engine
        report = engine.health(down_ratio=self.down_ratio, down_min=self.down_min)
        definitions = {d.name: d for d in engine.definitions()}
        rows = []
        for name, health in report.failovers.items():
            d = definitions.get(name)
            if d is None:  # replaced between the two reads
                continue
            policy = d.policy if d.policy is not None else engine.policy
            rows.append(FailoverRow(health, settings_of(d, policy, engine.raw_store)))
        at = report.at or engine.clock()
        pools = list(report.pools.values())
        stores = list(report.stores.values())
        return Overview(report.status, at, repr(engine.raw_store), rows, pools=pools, stores=stores)

    def now(self) -> datetime:
        """The engine's time."""
        return self.engine.clock()

    def entries(self, name: str, after: str | None, limit: int, payloads: bool) -> Page:
        """A page of entries stored under ``name`` (a failover's effective name)."""
        return page(self.engine.store, name, after=after, limit=limit, payloads=payloads)

    def health(self) -> dict[str, Any]:
        """What ``/health`` serves."""
        return self.engine.health(down_ratio=self.down_ratio, down_min=self.down_min).to_dict()


class StoreView:
    """A store alone: the names it holds and their entries (``failover dashboard``).

    Args:
        store: the store.
        clock: the time source for ages and expiry.
    """

    per_call = False

    def __init__(self, store: FailoverStore, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def overview(self) -> Overview:
        """What the store holds, per name, and the health the processes publish to it."""
        now = self.clock()
        names = summary(self.store, now)
        cluster = read_cluster(self.store, now)
        # The store answers ("up"); the processes reporting say how their calls go.
        reporting = cluster is not None and any(p.problem is None for p in cluster.processes)
        status = cluster.status if cluster is not None and reporting else "up"
        return Overview(status, now, repr(self.store), names=names, cluster=cluster)

    def now(self) -> datetime:
        """The time of ages and expiry."""
        return self.clock()

    def entries(self, name: str, after: str | None, limit: int, payloads: bool) -> Page:
        """A page of entries stored under ``name``."""
        return page(self.store, name, after=after, limit=limit, payloads=payloads)

    def health(self) -> dict[str, Any]:
        """``up`` when the store answers (a failing read is ``down``, 503)."""
        try:
            self.store.find("", "")  # one indexed lookup: the store answers
        except Exception as exc:
            return {"status": "down", "error": type(exc).__name__}
        return {"status": "up"}
