"""`InMemoryStore`: a bounded LRU dictionary in process memory."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from datetime import datetime

from ...errors import ConfigurationError
from ..base import Capabilities, Payload
from .in_process import InProcessEntries

__all__ = ["InMemoryStore"]


class InMemoryStore(InProcessEntries, Capabilities):
    """Entries in process memory; past ``max_entries`` the least recently used leaves.

    Args:
        max_entries: the cap (``0``: unbounded).
        copy: an engine copies what it stores here and what it reads back (the default), so
            that a caller changing a result changes nothing stored. ``False``: callers share
            the stored objects, as with ``functools.lru_cache`` or cachetools; the fastest
            answers (a ``fresh_for`` hit costs about half), for results nobody changes.
    """

    does_io = False
    browsable = True
    keeps_tags = True

    def __init__(self, max_entries: int = 10_000, copy: bool = True) -> None:
        if not isinstance(max_entries, int) or max_entries < 0:
            raise ConfigurationError(
                f"InMemoryStore: max_entries must be an int >= 0, got {max_entries!r}"
            )
        if not isinstance(copy, bool):
            raise ConfigurationError(f"InMemoryStore: copy must be True or False, got {copy!r}")
        self.max_entries = max_entries
        self.copy = copy
        self._entries: OrderedDict[tuple[str, str], Payload] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        shared = "" if self.copy else ", copy=False"
        return f"InMemoryStore(max_entries={self.max_entries}{shared})"

    @property
    def shares_results(self) -> bool:
        """With ``copy=False``: callers share the stored objects (no copying layer)."""
        return not self.copy

    def __len__(self) -> int:
        return len(self._entries)

    def store(self, payload: Payload) -> int:
        """Insert or replace one entry, evicting the least recently used past the cap; 1 (not
        written) when the stored entry is newer."""
        ident = (payload.name, payload.key)
        entries = self._entries
        lock = self._lock
        lock.acquire()  # not `with`: half the cost, and this is on every success's path
        try:
            stored = entries.get(ident)
            # `older`, inlined: this runs on every success
            if stored is not None and (new := payload.as_of) is not None:
                old = stored.as_of
                if old is not None and new < old:
                    return 1
            entries[ident] = payload
            entries.move_to_end(ident)
            if self.max_entries and len(entries) > self.max_entries:
                entries.popitem(last=False)
        finally:
            lock.release()
        return 0

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Insert or replace several entries; how many a newer stored entry kept out."""
        return sum(self.store(payload) for payload in payloads)

    def find(self, name: str, key: str) -> Payload | None:
        """The entry or ``None``; a hit counts as a use for the LRU order."""
        ident = (name, key)
        entries = self._entries
        lock = self._lock
        lock.acquire()  # as in `store`: this is on every recovery's path
        try:
            payload = entries.get(ident)
            if payload is not None:
                entries.move_to_end(ident)
        finally:
            lock.release()
        return payload

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``."""
        found = {}
        for key in keys:
            payload = self.find(name, key)
            if payload is not None:
                found[key] = payload
        return found

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``."""
        with self._lock:
            return [p for (n, _), p in self._entries.items() if n == name]

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries; return the count."""
        with self._lock:
            expired = [
                ident
                for ident, p in self._entries.items()
                if p.expire_on is not None and p.expire_on <= now
            ]
            for ident in expired:
                del self._entries[ident]
            return len(expired)

    def names(self) -> list[str]:
        """Every name that has entries, sorted."""
        with self._lock:
            return sorted({n for n, _ in self._entries})
