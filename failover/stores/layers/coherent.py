"""The near copies of a `TieredStore` kept coherent across the processes of a fleet: what this
store writes is told to the fleet's backplane (`failover.fleet.backplane`) once ``far`` has it,
and what other processes wrote is dropped from ``near``."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..base import FailoverStore, Payload, delete_many, walk
from .async_write import AsyncWriteStore
from .write_queue import Tombstone

__all__ = ["Coherence", "CoherentNear", "by_name"]


class Coherence(Protocol):
    """Where a tiered store says what it wrote, for the other processes to drop their near
    copies (the fleet's backplane). Never waits."""

    def stored(self, name: str, keys: Sequence[str]) -> None: ...

    def invalidated(self, name: str, keys: Sequence[str]) -> None: ...


class CoherentNear:
    """`TieredStore`'s side of the backplane (its ``near``, ``far``, lock and delete count)."""

    near: FailoverStore
    far: FailoverStore
    _lock: threading.Lock
    _deletes: int
    _told: Coherence | None
    _peers: Coherence | None

    def cohere(self, coherence: Coherence) -> None:
        """Tell ``coherence`` (the fleet's backplane) of this store's writes once ``far`` has
        them (after its queue wrote them, when it has one: another process told earlier
        would read the old entry from ``far`` again)."""
        self._peers = coherence  # told of expire, clear-all and tags at once (`TieredControl`)
        queue = next((s for s in walk(self.far) if isinstance(s, AsyncWriteStore)), None)
        if queue is None:
            self._told = coherence
            return

        def landed(writes: list[Any]) -> None:
            stored: dict[str, list[str]] = {}
            deleted: dict[str, list[str]] = {}
            for name, key, value in writes:
                (deleted if isinstance(value, Tombstone) else stored).setdefault(name, []).append(
                    key
                )
            for name, keys in stored.items():
                coherence.stored(name, keys)
            for name, keys in deleted.items():
                coherence.invalidated(name, keys)

        queue.on_landed(landed)

    def drop_near(self, name: str, keys: Iterable[str]) -> None:
        """Drop the near copies of ``keys`` of ``name`` (another process wrote or deleted
        them): the next read asks ``far``. A refill read before this is not kept."""
        with self._lock:
            self._deletes += 1
            delete_many(self.near, name, list(keys))

    def drop_near_all(self, name: str | None = None) -> None:
        """Drop every near copy of ``name`` (``None``: of every name)."""
        near: Any = self.near
        with self._lock:
            self._deletes += 1
            names = [name] if name is not None else list(near.names())
            for each in names:
                delete_many(near, each, [p.key for p in near.find_all(each)])


def by_name(payloads: Sequence[Payload]) -> dict[str, list[str]]:
    """The keys of ``payloads``, by name."""
    found: dict[str, list[str]] = {}
    for payload in payloads:
        found.setdefault(payload.name, []).append(payload.key)
    return found
