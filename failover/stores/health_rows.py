"""Health rows: each process's health summary, kept in the shared store for a while.

An engine made with ``Failover(publish_health=...)`` writes one `ProcessHealth` row every
interval (`failover.publish`); the store dashboard (``failover dashboard --store URL``) reads
the rows of every process and adds them up. A row expires by itself: a process that dies
stops being shown once its row's ``expire_on`` passes.

A store that keeps rows declares it (``keeps_health``, see `failover.stores.base.Capabilities`)
and implements `HealthRows`: `failover.stores.SqlStore` in a table of its own beside the
entries' table, `failover.stores.RedisStore` in a key per process. The layers over a store
pass the rows through (`HealthRowsLayer`); a tenant router does not: the rows are a process's,
not a tenant's.

Rows are JSON text, read back with `json.loads` and checked field by field: nothing stored can
run code when read. Whoever can write to the store writes rows too, so every field is bounded
(counts from 0 to `MAX_COUNT`, text of a few hundred characters at most, times a `datetime` can
hold in UTC): a row that does not check out is never added up, it is shown as one
``unreadable`` row (`ProcessHealth.problem` says why) and logged as a warning.
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
    "MAX_COUNT",
    "UNREADABLE",
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
MAX_COUNT = 2**53 - 1
"""The largest count a row may hold: exact as a JSON number in any reader, and added up over
every process and failover it stays far from what a float cannot divide."""
_MAX_TEXT = {"process": 64, "hostname": 255, "status": 32, "breaker": 32, "last_failure": 300}
_MAX_TEXT.update(dict.fromkeys(("started_at", "published_at", "expire_on"), 64))
_MAX_NAME = 300  # a failover's name
_MAX_PID = 2**32
_MAX_WINDOW = 10**7  # seconds (months): far beyond any health window
UNREADABLE = "unreadable"
"""The status of the row that stands for the rows that cannot be read (`decoded`)."""


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
        problem: why rows could not be read, on the one row standing for them (status
            `UNREADABLE`, no failovers); ``None`` on every row read.
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
    problem: str | None = None

    @classmethod
    def unreadable(cls, count: int, first: str, now: datetime) -> ProcessHealth:
        """The row shown for ``count`` rows that cannot be read, the first for reason ``first``."""
        rows = "a health row" if count == 1 else f"{count} health rows"
        problem = f"{rows} cannot be read: {first}"
        return cls(UNREADABLE, "?", 0, now, now, now, UNREADABLE, 0, {}, problem)

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
            **({} if self.problem is None else {"problem": self.problem}),
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
            process=_text(data, "process"),
            hostname=_text(data, "hostname"),
            pid=_number(data, "pid", _MAX_PID),
            started_at=_time(data, "started_at"),
            published_at=_time(data, "published_at"),
            expire_on=_time(data, "expire_on"),
            status=_text(data, "status"),
            window=_number(data, "window_seconds", _MAX_WINDOW),
            failovers={_name(name): _summary(f) for name, f in failovers.items()},
        )


def _field(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{name} is not a {kind.__name__}")
    return value


def _text(data: dict[str, Any], name: str) -> str:
    value: str = _field(data, name, str)
    if len(value) > _MAX_TEXT[name]:
        raise ValueError(f"{name} is longer than {_MAX_TEXT[name]} characters")
    return value


def _name(name: str) -> str:
    if len(name) > _MAX_NAME:
        raise ValueError(f"a failover's name is longer than {_MAX_NAME} characters")
    return name


def _number(data: dict[str, Any], name: str, most: int) -> int:
    value: int = _field(data, name, int)
    if not 0 <= value <= most:
        raise ValueError(f"{name} is not a whole number from 0 to {most}")
    return value


def _optional(data: dict[str, Any], name: str) -> str | None:
    if data.get(name) is None:
        return None
    return _text(data, name)


def _time(data: dict[str, Any], name: str) -> datetime:
    text = _text(data, name)
    try:
        at = datetime.fromisoformat(text)
        # In UTC now: a time at the edge of datetime's range in another zone fails here, not
        # later in a subtraction or a format on the page.
        return at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)
    except OverflowError:
        raise ValueError(f"{name} is out of range") from None


def _summary(data: object) -> FailoverSummary:
    if not isinstance(data, dict):
        raise ValueError("a failover's summary is a JSON object")
    live, stale, not_recovered = (
        _number(data, k, MAX_COUNT) for k in ("live", "stale", "not_recovered")
    )
    # Absent from the rows of versions before fresh_for: none of their calls were fresh.
    fresh = _number(data, "fresh", MAX_COUNT) if "fresh" in data else 0
    return FailoverSummary(
        _text(data, "status"),
        live,
        stale,
        not_recovered,
        fresh,
        breaker=_optional(data, "breaker"),
        last_failure=_optional(data, "last_failure"),
    )


def decoded(where: str, texts: Iterable[str | bytes], now: datetime) -> list[ProcessHealth]:
    """The rows of ``texts`` not expired at ``now``, by hostname and pid. Texts that are not
    health rows are left out of them, and stand as one `ProcessHealth.unreadable` row, first,
    with one warning naming ``where``."""
    rows = []
    bad = 0
    first = ""
    for text in texts:
        try:
            row = ProcessHealth.from_json(text)
        except (ValueError, TypeError, RecursionError, OverflowError) as exc:
            bad += 1
            first = first or str(exc)[:200]
            continue
        if not row.expired(now):
            rows.append(row)
    rows.sort(key=lambda r: (r.hostname, r.pid, r.process))
    if bad:
        log.warning("%s: skipped %d health row(s) that cannot be read (%s)", where, bad, first)
        rows.insert(0, ProcessHealth.unreadable(bad, first, now))
    return rows


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
