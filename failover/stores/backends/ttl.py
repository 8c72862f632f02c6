"""`CachetoolsStore`: a cachetools TLRU cache, whose entries leave at their ``expire_on``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import cachetools

from ...errors import ConfigurationError
from ..base import Capabilities, Payload, older
from ..browsing import Page, Summary, page_of, summary_of
from ..control import fresh_ended

__all__ = ["CachetoolsStore"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class CachetoolsStore(Capabilities):
    """Entries in a `cachetools.TLRUCache`: expired entries leave on their own, without the
    cleanup scheduler, and the least recently used leave past ``maxsize``.

    Args:
        maxsize: the cap on entries.
        clock: the time source (the engine passes its own, so a fake clock expires entries too).
    """

    does_io = False
    browsable = True
    keeps_tags = True

    def __init__(self, maxsize: int = 10_000, clock: Callable[[], datetime] | None = None) -> None:
        if not isinstance(maxsize, int) or maxsize <= 0:
            raise ConfigurationError(
                f"CachetoolsStore: maxsize must be an int > 0, got {maxsize!r}"
            )
        self.maxsize = maxsize
        self._clock = clock or _utcnow
        self._cache: cachetools.TLRUCache[tuple[str, str], Payload] = cachetools.TLRUCache(
            maxsize=maxsize, ttu=self._ttu, timer=self._timer
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachetoolsStore(maxsize={self.maxsize})"

    def _timer(self) -> float:
        return self._clock().timestamp()

    @staticmethod
    def _ttu(_key: Any, payload: Payload, _now: float) -> float:
        return payload.expire_on.timestamp() if payload.expire_on is not None else float("inf")

    def store(self, payload: Payload) -> int:
        """Insert or replace one entry; 1 (not written) when the stored entry is newer."""
        return self.store_many((payload,))

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Insert or replace several entries; how many a newer stored entry kept out."""
        kept = 0
        cache = self._cache
        with self._lock:
            for payload in payloads:
                ident = (payload.name, payload.key)
                if older(payload, cache.get(ident)):
                    kept += 1
                else:
                    cache[ident] = payload
        return kept

    def find(self, name: str, key: str) -> Payload | None:
        """The live entry or ``None`` (expired entries are already gone)."""
        with self._lock:
            return self._cache.get((name, key))

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The live entries found among ``keys``."""
        with self._lock:
            found = {k: self._cache.get((name, k)) for k in keys}
        return {k: p for k, p in found.items() if p is not None}

    def find_all(self, name: str) -> list[Payload]:
        """Every live entry of ``name``."""
        with self._lock:
            self._cache.expire()
            return [p for (n, _), p in self._cache.items() if n == name]

    def delete(self, name: str, key: str) -> None:
        """Remove the entry if present."""
        with self._lock:
            self._cache.pop((name, key), None)

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``; how many there were."""
        with self._lock:
            gone = [i for i in self._cache if i[0] == name]
            for ident in gone:
                self._cache.pop(ident, None)
            return len(gone)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name; how many there were."""
        with self._lock:
            cache = self._cache
            gone = [i for i, p in cache.items() if p.tags and tag in p.tags]
            for ident in gone:
                cache.pop(ident, None)
            return len(gone)

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window in place (``fresh_ended``); whether there was one."""
        with self._lock:
            found = self._cache.get((name, key))
            if found is None:
                return False
            if not found.fresh_ended:
                self._cache[name, key] = fresh_ended(found)
            return True

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove entries expired at ``now``; return the count."""
        with self._lock:
            return len(self._cache.expire(now.timestamp()))

    def names(self) -> list[str]:
        """Every name that has live entries, sorted."""
        with self._lock:
            self._cache.expire()
            return sorted({n for n, _ in self._cache})

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """Up to ``limit`` live entries of ``name`` after the key ``after``, by key (listed
        from memory: the cache is bounded by ``maxsize``)."""
        return page_of(self.find_all(name), after, limit)

    def count(self, name: str) -> int:
        """How many entries ``name`` has."""
        return len(self.find_all(name))

    def summary(self, name: str, now: datetime) -> Summary:
        """``name``'s live entries counted and measured."""
        return summary_of(name, self.find_all(name), now)

    def close(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._cache.clear()
