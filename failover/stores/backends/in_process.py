"""What the stores that keep their entries in process memory share: the entries as a mapping
``(name, key) -> entry`` under a lock, and the control and browsing methods read from it
(`InProcessEntries`: `failover.stores.InMemoryStore`, `failover.stores.CachetoolsStore`)."""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from datetime import datetime
from typing import Any

from ...forks import AfterFork
from ..base import Payload
from ..browsing import Page, Summary, page_of, summary_of
from ..control import fresh_ended

__all__ = ["InProcessEntries"]


class InProcessEntries:
    """The control and browsing methods of a store whose entries are ``_entries`` (a mapping
    ``(name, key) -> entry``), guarded by ``_lock``; the store has its own ``find_all``. Its
    entries are looked through: the store is bounded by its cap."""

    _entries: MutableMapping[tuple[str, str], Any]  # an envelope, or the store's own form
    _lock: threading.Lock

    def forked(self) -> None:
        """Start anew in a forked child: the lock a parent's thread held at the fork (a write
        under way) stays held in the child, where that thread does not exist."""
        self._lock = threading.Lock()

    def find_all(self, name: str) -> list[Payload]:  # pragma: no cover - each store's own
        raise NotImplementedError

    def delete(self, name: str, key: str) -> None:
        """Remove the entry if present."""
        with self._lock:
            self._entries.pop((name, key), None)

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``; how many there were."""
        with self._lock:
            return _drop(self._entries, [i for i in self._entries if i[0] == name])

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name; how many there were."""
        with self._lock:
            entries = self._entries
            return _drop(entries, [i for i, p in entries.items() if p.tags and tag in p.tags])

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window in place (``fresh_ended``); whether there was one."""
        with self._lock:
            found = self._entries.get((name, key))
            if found is None:
                return False
            if not found.fresh_ended:
                self._entries[name, key] = fresh_ended(found)
            return True

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """Up to ``limit`` entries of ``name`` after the key ``after``, by key (listed from
        memory)."""
        return page_of(self.find_all(name), after, limit)

    def count(self, name: str) -> int:
        """How many entries ``name`` has."""
        return len(self.find_all(name))

    def summary(self, name: str, now: datetime) -> Summary:
        """``name``'s entries counted and measured."""
        return summary_of(name, self.find_all(name), now)

    def close(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()


def _drop(entries: MutableMapping[tuple[str, str], Any], idents: list[tuple[str, str]]) -> int:
    for ident in idents:
        entries.pop(ident, None)
    return len(idents)


FORKS = AfterFork(InProcessEntries.forked)
"""The in-process stores, each given a new lock in a forked child (their ``__init__`` adds)."""
