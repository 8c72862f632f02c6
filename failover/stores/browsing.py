"""Browsing a store: its names, a page of a name's entries, a name's count and summary.

What the command line (``failover inspect``) and the dashboard read, through the store: neither
speaks SQL nor Redis. Entries are listed as stored, not decoded (the reading process need not
allow the entries' types), one bounded page at a time, by key. A page continues after the last key
of the one before (a keyset cursor, not an offset): a store with an index on its keys (SQL's
primary key, Redis's per-name index) reads a page of a million entries as fast as the first.

A store declares it browses with ``browsable = True`` (see `failover.stores.base.Capabilities`)
and implements `Browsable`; layers pass it through to the store they wrap. The helpers here serve
the in-process stores, which list a name's entries from memory (bounded by their own cap).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

from ..payload import ReferentialPayload
from ..serialization.base import type_name
from .base import browsable

__all__ = [
    "PREVIEW",
    "Browsable",
    "BrowsingLayer",
    "Page",
    "StoredEntry",
    "Summary",
    "describe",
    "overlaid",
    "page_of",
    "summary_of",
]

PREVIEW = 4096
"""At most this many characters of a payload come with a listed entry."""


class StoredEntry(NamedTuple):
    """One entry as the store holds it, not decoded.

    Attributes:
        name: the failover name.
        key: the entry's key.
        as_of: when it was stored, or ``None`` when unreadable (a row written by hand).
        expire_on: when it expires, or ``None`` when unreadable.
        size: the stored value's size (its payload text's length; for an in-process store, the
            length of the value as JSON).
        payload_type: the stored value's type name (``"?"`` when unreadable).
        payload: the start of the payload text as stored (``json:...``, ``pickle:...``,
            ``ENC(...)``; an in-process store's value as JSON), at most `PREVIEW` characters.
        label: the entry's readable label (the call's arguments), stored only for a failover
            that opts in (``label=``); ``None`` otherwise, and for entries of earlier versions.
    """

    name: str
    key: str
    as_of: datetime | None
    expire_on: datetime | None
    size: int
    payload_type: str
    payload: str
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """Entries of one name, by key.

    Attributes:
        entries: at most the page's ``limit`` entries.
        next_after: the ``after`` of the next page, or ``None`` when this page is the last.
    """

    entries: list[StoredEntry]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class Summary:
    """What a store holds under one name.

    Attributes:
        name: the failover name.
        count: its entries, expired ones included.
        expired: those expired at the time asked for.
        oldest: the oldest ``as_of``, or ``None``.
        newest: the newest ``as_of``, or ``None``.
        size: the entries' sizes, summed.
    """

    name: str
    count: int
    expired: int
    oldest: datetime | None
    newest: datetime | None
    size: int


@runtime_checkable
class Browsable(Protocol):
    """The browsing protocol: a store (or layer) whose entries can be listed without decoding."""

    def names(self) -> list[str]:
        """Every name that has entries, sorted."""
        ...

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """Up to ``limit`` entries of ``name`` whose keys sort after ``after``, by key."""
        ...

    def count(self, name: str) -> int:
        """How many entries ``name`` has (cheaper than `summary`: no entry is read)."""
        ...

    def summary(self, name: str, now: datetime) -> Summary:
        """``name``'s entries counted, those expired at ``now`` among them, their ``as_of``
        range and total size."""
        ...


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def describe(payload: ReferentialPayload[Any]) -> StoredEntry:
    """An in-process entry as listed: its value as JSON (repr where JSON has no form)."""
    text = _json(payload.payload)
    return StoredEntry(
        payload.name,
        payload.key,
        payload.as_of,
        payload.expire_on,
        len(text.encode(errors="surrogatepass")),
        type_name(type(payload.payload)),
        text[:PREVIEW],
        payload.label,
    )


def page_of(payloads: Iterable[ReferentialPayload[Any]], after: str | None, limit: int) -> Page:
    """A page of entries held in memory (every entry of one name)."""
    chosen = sorted((p for p in payloads if after is None or p.key > after), key=lambda p: p.key)
    more = len(chosen) > limit
    entries = [describe(p) for p in chosen[:limit]]
    return Page(entries, entries[-1].key if more and entries else None)


def summary_of(
    name: str, entries: Iterable[StoredEntry | ReferentialPayload[Any]], now: datetime
) -> Summary:
    """The summary of a name's entries (listed ones, or envelopes held in memory)."""
    count = expired = size = 0
    oldest: datetime | None = None
    newest: datetime | None = None
    for e in entries:
        listed = e if isinstance(e, StoredEntry) else describe(e)
        count += 1
        size += listed.size
        if listed.expire_on is not None and listed.expire_on <= now:
            expired += 1
        if listed.as_of is not None:
            oldest = listed.as_of if oldest is None else min(oldest, listed.as_of)
            newest = listed.as_of if newest is None else max(newest, listed.as_of)
    return Summary(name, count, expired, oldest, newest, size)


class BrowsingLayer:
    """Passes the browsing protocol through a store layer to the store it browses (`browsed`).

    Put before `failover.stores.base.Capabilities` among a layer's bases: the layer is
    browsable when that store is.
    """

    def browsed(self) -> object:
        """The store whose entries this layer lists."""
        raise NotImplementedError

    @property
    def browsable(self) -> bool:
        """Whether the browsed store is browsable."""
        return browsable(self.browsed())

    def _browser(self) -> Browsable:
        store = self.browsed()
        if not browsable(store):
            raise TypeError(f"{store!r} cannot list its entries (it is not browsable)")
        return cast(Browsable, store)

    def names(self) -> list[str]:
        """Every name that has entries, sorted."""
        return self._browser().names()

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """Up to ``limit`` entries of ``name`` after the key ``after``, by key."""
        return self._browser().page(name, after, limit)

    def count(self, name: str) -> int:
        """How many entries ``name`` has."""
        return self._browser().count(name)

    def summary(self, name: str, now: datetime) -> Summary:
        """``name``'s entries counted and measured."""
        return self._browser().summary(name, now)


def overlaid(
    inner: Browsable,
    name: str,
    queued: dict[str, ReferentialPayload[Any] | None],
    after: str | None,
    limit: int,
) -> Page:
    """A page of ``inner`` with writes not yet made laid over it (``queued``: key -> the entry
    written, or ``None`` for a delete): what a reader sees after its own writes.

    The inner page is read ``limit`` plus the queued deletes long, so that what the deletes remove
    still leaves a full page; a queued key past the inner page's last key is left to the page that
    reaches it.
    """
    deletes = sum(value is None for value in queued.values())
    page = inner.page(name, after, limit + deletes)
    merged = {e.key: e for e in page.entries}
    last = page.entries[-1].key if page.entries else None
    for key, value in queued.items():
        if (after is not None and key <= after) or (
            page.next_after is not None and last is not None and key > last
        ):
            continue
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = describe(value)
    keys = sorted(merged)
    more = page.next_after is not None or len(keys) > limit
    chosen = keys[:limit]
    return Page([merged[k] for k in chosen], chosen[-1] if more and chosen else None)
