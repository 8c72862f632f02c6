"""Health rows: each process's health summary, kept in the shared store for a while.

An engine made with ``Failover(publish_health=...)`` writes one `ProcessHealth` row every
interval (`failover.publish`); the store dashboard (``failover dashboard --store URL``) reads
the rows of every process and adds them up. A row expires by itself: a process that dies
stops being shown once its row's ``expire_on`` passes.

A store that keeps rows declares it (``keeps_health``, see `failover.stores.base.Capabilities`)
and implements `HealthRows`: `failover.stores.sql.SqlStore` in a table of its own beside the
entries' table, `failover.stores.redis.RedisStore` in a key per process. The layers over a store
pass the rows through (`HealthRowsLayer`); a tenant router does not: the rows are a process's,
not a tenant's.

Rows are JSON text, read back with `json.loads` and checked field by field: nothing stored can
run code when read, and a row that does not check out is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from .base import keeps_health

__all__ = [
    "FailoverSummary",
    "HealthRows",
    "HealthRowsLayer",
    "KeepsHealthRows",
    "ProcessHealth",
    "below",
    "decoded",
    "health_rows",
]

log = logging.getLogger("failover.stores")

_MAX_FAILOVERS = 1000  # as the metrics' cardinality guard: a row stays a few hundred KiB at most


@dataclass(frozen=True, slots=True)
class FailoverSummary:
    """One failover's health in one process, over that process's health window.

    Attributes:
        status: ``down``, ``degraded``, ``up`` or ``idle`` (see `failover.health.FailoverHealth`).
        live: calls the upstream answered.
        stale: calls served stale (recovered from the store).
        not_recovered: calls that got nothing usable (the upstream failed, nothing stored).
        fresh: calls answered from the store within ``fresh_for`` (the upstream not called).
        breaker: the breaker's state, ``None`` without one.
        last_failure: the class name of the latest upstream exception, ``None`` if none.
    """

    status: str
    live: int = 0
    stale: int = 0
    not_recovered: int = 0
    fresh: int = 0
    breaker: str | None = None
    last_failure: str | None = None

    @property
    def calls(self) -> int:
        """Every call in the window."""
        return self.live + self.fresh + self.stale + self.not_recovered

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "status": self.status,
            "calls": self.calls,
            "live": self.live,
            "stale": self.stale,
            "not_recovered": self.not_recovered,
            "fresh": self.fresh,
            "breaker": self.breaker,
            "last_failure": self.last_failure,
        }


@dataclass(frozen=True, slots=True)
class ProcessHealth:
    """One process's health summary, as published to the shared store.

    Attributes:
        process: the process's id (a random UUID, new in each process and engine).
        hostname: the machine's name.
        pid: the operating system's process id.
        started_at: when the engine began publishing.
        published_at: when this row was written (the engine's clock).
        expire_on: when the row stops being shown (published_at plus a few intervals).
        status: the engine's status (the worst of its failovers').
        window: the seconds the counts cover (the health window).
        failovers: each failover's summary, by the failover's name.
    """

    process: str
    hostname: str
    pid: int
    started_at: datetime
    published_at: datetime
    expire_on: datetime
    status: str
    window: int = 60
    failovers: Mapping[str, FailoverSummary] = field(default_factory=dict)

    def expired(self, now: datetime) -> bool:
        """Whether the row is past its ``expire_on`` at ``now``."""
        return now >= self.expire_on

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (what the dashboard's API serves)."""
        return {
            "process": self.process,
            "hostname": self.hostname,
            "pid": self.pid,
            "started_at": self.started_at.isoformat(),
            "published_at": self.published_at.isoformat(),
            "expire_on": self.expire_on.isoformat(),
            "status": self.status,
            "window_seconds": self.window,
            "failovers": {name: f.to_dict() for name, f in self.failovers.items()},
        }

    def to_json(self) -> str:
        """The row's stored text."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> ProcessHealth:
        """The row of a stored text.

        Raises:
            ValueError: not JSON, or a field missing or of the wrong type.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a health row is a JSON object")
        failovers = _field(data, "failovers", dict)
        if len(failovers) > _MAX_FAILOVERS:
            raise ValueError(f"more than {_MAX_FAILOVERS} failovers")
        return cls(
            process=_field(data, "process", str),
            hostname=_field(data, "hostname", str),
            pid=_field(data, "pid", int),
            started_at=_time(data, "started_at"),
            published_at=_time(data, "published_at"),
            expire_on=_time(data, "expire_on"),
            status=_field(data, "status", str),
            window=_field(data, "window_seconds", int),
            failovers={str(name): _summary(f) for name, f in failovers.items()},
        )


def _field(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{name} is not a {kind.__name__}")
    return value


def _optional(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} is not a str")
    return value


def _time(data: dict[str, Any], name: str) -> datetime:
    at = datetime.fromisoformat(_field(data, name, str))
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _summary(data: object) -> FailoverSummary:
    if not isinstance(data, dict):
        raise ValueError("a failover's summary is a JSON object")
    live, stale, not_recovered = (_field(data, k, int) for k in ("live", "stale", "not_recovered"))
    # Absent from the rows of versions before fresh_for: none of their calls were fresh.
    fresh = _field(data, "fresh", int) if "fresh" in data else 0
    if min(live, stale, not_recovered, fresh) < 0:
        raise ValueError("a negative count")
    return FailoverSummary(
        _field(data, "status", str),
        live,
        stale,
        not_recovered,
        fresh,
        breaker=_optional(data, "breaker"),
        last_failure=_optional(data, "last_failure"),
    )


def decoded(where: str, texts: Iterable[str | bytes], now: datetime) -> list[ProcessHealth]:
    """The rows of ``texts`` not expired at ``now``, by hostname and pid; a text that is not a
    health row is skipped with a warning naming ``where``."""
    rows = []
    for text in texts:
        try:
            row = ProcessHealth.from_json(text)
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("%s: skipped a health row that cannot be read (%s)", where, exc)
            continue
        if not row.expired(now):
            rows.append(row)
    return sorted(rows, key=lambda r: (r.hostname, r.pid, r.process))


class HealthRows(Protocol):
    """What a store that keeps health rows implements (it declares ``keeps_health``)."""

    def publish_health(self, row: ProcessHealth) -> None:
        """Insert or replace the row of ``row.process``; rows expired since may go meanwhile."""
        ...

    def health_rows(self, now: datetime) -> list[ProcessHealth]:
        """The rows not expired at ``now``, by hostname and pid."""
        ...

    def remove_health(self, process: str) -> None:
        """Remove the row of ``process`` if present."""
        ...


def health_rows(store: object) -> HealthRows | None:
    """``store`` as the `HealthRows` it declares, or ``None`` when it keeps none."""
    return cast(HealthRows, store) if keeps_health(store) else None


class KeepsHealthRows:
    """For a store that keeps health rows: declares it, and passes `HealthRows` to the object
    that keeps them (``self.health``, set by the store)."""

    keeps_health = True
    health: HealthRows

    def publish_health(self, row: ProcessHealth) -> None:
        """Insert or replace the row of ``row.process``."""
        self.health.publish_health(row)

    def health_rows(self, now: datetime) -> list[ProcessHealth]:
        """The processes' rows not expired at ``now``."""
        return self.health.health_rows(now)

    def remove_health(self, process: str) -> None:
        """Remove the row of ``process`` if present."""
        self.health.remove_health(process)


class _Layer(Protocol):
    def browsed(self) -> object: ...


def below(layer: _Layer) -> HealthRows:
    """The health rows of the store ``layer`` browses.

    Raises:
        TypeError: that store keeps none (``keeps_health`` says so first).
    """
    store = health_rows(layer.browsed())
    if store is None:
        raise TypeError(f"{layer!r} keeps no health rows")
    return store


class HealthRowsLayer:
    """Passes `HealthRows` through a store layer to the store it browses (``browsed()``: the
    inner store, a tiered store's far one)."""

    @property
    def keeps_health(self: _Layer) -> bool:
        """Whether the store below keeps health rows."""
        return keeps_health(self.browsed())

    def publish_health(self: _Layer, row: ProcessHealth) -> None:
        """`HealthRows.publish_health` on the store below."""
        below(self).publish_health(row)

    def health_rows(self: _Layer, now: datetime) -> list[ProcessHealth]:
        """`HealthRows.health_rows` of the store below."""
        return below(self).health_rows(now)

    def remove_health(self: _Layer, process: str) -> None:
        """`HealthRows.remove_health` on the store below."""
        below(self).remove_health(process)
