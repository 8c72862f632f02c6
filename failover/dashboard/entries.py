"""Listing stored entries for the dashboard: one bounded page at a time, never a whole table.

SQL stores are read with keyset pagination on their primary key (``name, key``) and sizes are
computed by the database. Redis stores are listed through their per-name indexes, their values
read as stored (not decoded: the dashboard's process need not allow the entries' types).
In-process stores are bounded by their own cap and are listed from ``find_all``. Layers (copying,
async writes, tenants) are looked through to the raw store.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..stores.async_write import AsyncWriteStore
from ..stores.base import FailoverStore, Payload
from ..stores.copying import CopyingStore
from ..stores.serializer import time_or_none
from ..stores.tenant import MultiTenantStore

__all__ = ["Entry", "NameSummary", "Page", "page", "raw_store", "summary"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PAYLOAD_PREVIEW = 500
"""Characters of a payload shown with ``show_payloads=True``."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored entry as the dashboard shows it (no payload unless asked for)."""

    key: str
    as_of: datetime | None
    expire_on: datetime | None
    size: int | None
    payload: str | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the entry is past its expiry at ``now``."""
        return self.expire_on is not None and self.expire_on <= now

    def to_dict(self, now: datetime) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        data: dict[str, Any] = {
            "key": self.key,
            "as_of": _iso(self.as_of),
            "expire_on": _iso(self.expire_on),
            "age_seconds": None if self.as_of is None else (now - self.as_of).total_seconds(),
            "expired": self.expired(now),
            "size": self.size,
        }
        if self.payload is not None:
            data["payload"] = self.payload
        return data


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a name's entries, by key; ``next_after`` continues it."""

    name: str
    entries: list[Entry]
    total: int
    next_after: str | None


@dataclass(frozen=True, slots=True)
class NameSummary:
    """What a store holds under one name."""

    name: str
    count: int
    expired: int
    oldest: datetime | None
    newest: datetime | None
    size: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "name": self.name,
            "entries": self.count,
            "live": self.count - self.expired,
            "expired": self.expired,
            "oldest_as_of": _iso(self.oldest),
            "newest_as_of": _iso(self.newest),
            "size": self.size,
        }


def raw_store(store: FailoverStore) -> FailoverStore:
    """The store under the layers: the current tenant's, under copying and async writes."""
    while True:
        if isinstance(store, MultiTenantStore):
            store = store.current()
        elif isinstance(store, CopyingStore | AsyncWriteStore):
            store = store.inner
        else:
            return store


def page(
    store: FailoverStore,
    name: str,
    *,
    after: str | None = None,
    limit: int = 50,
    payloads: bool = False,
) -> Page:
    """Up to ``limit`` entries of ``name`` with keys after ``after``, by key."""
    from ..stores.sql import SqlStore

    store = raw_store(store)
    if isinstance(store, SqlStore):
        return _sql_page(store, name, after, limit, payloads)
    if _is_redis(store):
        return _redis_page(store, name, after, limit, payloads)
    found = sorted(store.find_all(name), key=lambda p: p.key)
    total = len(found)
    if after is not None:
        found = [p for p in found if p.key > after]
    chosen = found[:limit]
    entries = [_entry(p, payloads) for p in chosen]
    more = len(found) > limit
    return Page(name, entries, total, chosen[-1].key if more and chosen else None)


def summary(store: FailoverStore, now: datetime) -> list[NameSummary]:
    """Per name: entries, expired ones, oldest and newest ``as_of``, total size, in one
    aggregate query.

    Raises:
        TypeError: the store is neither a SQL nor a Redis store (the kinds shared by processes).
    """
    from ..stores.sql import SqlStore

    store = raw_store(store)
    if _is_redis(store):
        return _redis_summary(store, now)
    if not isinstance(store, SqlStore):
        raise TypeError(f"the store-wide view needs a SQL or a Redis store, got {store!r}")
    return _sql_summary(store, now)


def _is_redis(store: FailoverStore) -> bool:
    # Without importing redis-py where no Redis store was made (it is an optional extra).
    module = sys.modules.get("failover.stores.redis")
    return module is not None and isinstance(store, module.RedisStore)


def _redis_page(store: Any, name: str, after: str | None, limit: int, payloads: bool) -> Page:
    chosen, total = store.entries_page(name, after, limit + 1)  # only the page's values read
    entries = [
        Entry(e.key, e.as_of, e.expire_on, e.size, _preview(e.payload) if payloads else None)
        for e in chosen[:limit]
    ]
    more = len(chosen) > limit
    return Page(name, entries, total, entries[-1].key if more and entries else None)


def _redis_summary(store: Any, now: datetime) -> list[NameSummary]:
    # Redis has no aggregate over values: the summary reads each name's entries (their headers
    # give the times); the indexes keep this to the live entries.
    found = []
    for name in store.names():
        listed = store.entries(name)
        times = [e.as_of for e in listed if e.as_of is not None]
        expired = sum(e.expire_on is not None and e.expire_on <= now for e in listed)
        size = sum(e.size for e in listed)
        oldest, newest = (min(times), max(times)) if times else (None, None)
        found.append(NameSummary(name, len(listed), expired, oldest, newest, size))
    return found


def _entry(payload: Payload, payloads: bool) -> Entry:
    preview = None
    if payloads:
        preview = _preview(_json(payload.payload))
    return Entry(payload.key, payload.as_of, payload.expire_on, _size(payload.payload), preview)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _size(value: Any) -> int | None:
    """The payload's size: its length as JSON, in bytes (what a SQL store would hold)."""
    try:
        return len(_json(value).encode())
    except Exception:
        return None


def _preview(text: str) -> str:
    return text if len(text) <= PAYLOAD_PREVIEW else text[:PAYLOAD_PREVIEW] + "…"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# A row's time, or None when it is missing or not one (written by hand): listed, not fatal.
_time = time_or_none


def _sql_page(store: Any, name: str, after: str | None, limit: int, payloads: bool) -> Page:
    import sqlalchemy as sa

    c = store.table.c
    columns = [c.key, c.as_of, c.expire_on, sa.func.length(c.payload)]
    if payloads:
        columns.append(sa.func.substr(c.payload, 1, PAYLOAD_PREVIEW + 1))
    query = sa.select(*columns).where(c.name == name)
    if after is not None:
        query = query.where(c.key > after)
    query = query.order_by(c.key).limit(limit + 1)
    count = sa.select(sa.func.count()).select_from(store.table).where(c.name == name)
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
        total = conn.execute(count).scalar_one()
    entries = [
        Entry(
            row[0],
            _time(row[1]),
            _time(row[2]),
            row[3],
            _preview(row[4]) if payloads else None,
        )
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return Page(name, entries, total, entries[-1].key if more and entries else None)


def _sql_summary(store: Any, now: datetime) -> list[NameSummary]:
    import sqlalchemy as sa

    c = store.table.c
    micros = (now - _EPOCH) // timedelta(microseconds=1)
    expired = sa.func.sum(sa.case((c.expire_on <= micros, 1), else_=0))
    query = (
        sa.select(
            c.name,
            sa.func.count(),
            expired,
            sa.func.min(c.as_of),
            sa.func.max(c.as_of),
            sa.func.sum(sa.func.length(c.payload)),
        )
        .group_by(c.name)
        .order_by(c.name)
    )
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    return [
        NameSummary(name, count, int(gone or 0), _time(oldest), _time(newest), int(size or 0))
        for name, count, gone, oldest, newest, size in rows
    ]
