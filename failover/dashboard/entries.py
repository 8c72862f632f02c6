"""Listing stored entries for the dashboard: one bounded page at a time, never a whole table.

Everything comes through the store's browsing protocol (`failover.stores.browsing`): its names,
a page of a name's entries by key (a keyset cursor), a name's summary. Entries are read as stored,
not decoded (the dashboard's process need not allow the entries' types). The layers (copying,
async writes, tiered, tenants) pass the protocol through; a store that does not browse cannot be
listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from ..stores.base import FailoverStore, browsable
from ..stores.browsing import Browsable, StoredEntry, Summary

__all__ = ["Entry", "Page", "page", "summary", "summary_dict"]

PAYLOAD_PREVIEW = 500
"""Characters of a payload shown with ``show_payloads=True``."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored entry as the dashboard shows it (no payload unless asked for; its label when
    its failover opted in to labels)."""

    key: str
    as_of: datetime | None
    expire_on: datetime | None
    size: int | None
    payload: str | None = None
    label: str | None = None

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
            "label": self.label,
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


def summary_dict(summary: Summary) -> dict[str, Any]:
    """A name's summary as the dashboard serves it (JSON-ready)."""
    return {
        "name": summary.name,
        "entries": summary.count,
        "live": summary.count - summary.expired,
        "expired": summary.expired,
        "oldest_as_of": _iso(summary.oldest),
        "newest_as_of": _iso(summary.newest),
        "size": summary.size,
    }


def _browser(store: FailoverStore) -> Browsable:
    if not browsable(store):
        raise TypeError(f"the dashboard lists the entries of a browsable store, got {store!r}")
    return cast(Browsable, store)


def page(
    store: FailoverStore,
    name: str,
    *,
    after: str | None = None,
    limit: int = 50,
    payloads: bool = False,
) -> Page:
    """Up to ``limit`` entries of ``name`` with keys after ``after``, by key, and how many the
    name holds.

    Raises:
        TypeError: the store is not browsable.
    """
    browser = _browser(store)
    found = browser.page(name, after, limit)
    total = browser.count(name)
    entries = [_entry(e, payloads) for e in found.entries]
    return Page(name, entries, total, found.next_after)


def summary(store: FailoverStore, now: datetime) -> list[Summary]:
    """Per name: entries, expired ones, oldest and newest ``as_of``, total size.

    Raises:
        TypeError: the store is not browsable.
    """
    browser = _browser(store)
    return [browser.summary(name, now) for name in browser.names()]


def _entry(e: StoredEntry, payloads: bool) -> Entry:
    preview = _preview(e.payload) if payloads else None
    return Entry(e.key, e.as_of, e.expire_on, e.size, preview, e.label)


def _preview(text: str) -> str:
    return text if len(text) <= PAYLOAD_PREVIEW else text[:PAYLOAD_PREVIEW] + "…"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
