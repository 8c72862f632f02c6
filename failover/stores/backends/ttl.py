"""`CachetoolsStore`: a cachetools TLRU cache, whose entries leave at their ``expire_on``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import cachetools

from ...errors import ConfigurationError
from ..base import Capabilities, Payload, older
from .in_process import FORKS, InProcessEntries

__all__ = ["CachetoolsStore"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class CachetoolsStore(InProcessEntries, Capabilities):
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
        self._entries: cachetools.TLRUCache[tuple[str, str], Payload] = cachetools.TLRUCache(
            maxsize=maxsize, ttu=self._ttu, timer=self._timer
        )
        self._lock = threading.Lock()
        FORKS.add(self)  # a new lock in a forked child

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
        cache = self._entries
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
            return self._entries.get((name, key))

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The live entries found among ``keys``."""
        with self._lock:
            found = {k: self._entries.get((name, k)) for k in keys}
        return {k: p for k, p in found.items() if p is not None}

    def find_all(self, name: str) -> list[Payload]:
        """Every live entry of ``name``."""
        with self._lock:
            self._entries.expire()
            return [p for (n, _), p in self._entries.items() if n == name]

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove entries expired at ``now``; return the count."""
        with self._lock:
            return len(self._entries.expire(now.timestamp()))

    def names(self) -> list[str]:
        """Every name that has live entries, sorted."""
        with self._lock:
            self._entries.expire()
            return sorted({n for n, _ in self._entries})
