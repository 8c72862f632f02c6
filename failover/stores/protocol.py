"""The `FailoverStore` protocol every store and store layer implements, the async methods a store
may add (`AsyncFailoverStore`), and the one comparison that keeps entries moving forward
(`older`). `failover.stores.base` exports them with what stores declare about themselves."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..payload import ReferentialPayload

__all__ = ["AsyncFailoverStore", "FailoverStore", "Payload", "older"]

Payload = ReferentialPayload[Any]


@runtime_checkable
class FailoverStore(Protocol):
    """Where envelopes are kept. Synchronous and thread-safe; entries are addressed by
    ``(name, key)``. Layers (copying, async writes, multi-tenant) implement it too.

    Entries only move forward: a write replaces the stored entry of its ``(name, key)`` only
    if its ``as_of`` is not older than the stored entry's (equal: it replaces), atomically
    (`older` is the comparison). ``store`` and ``store_many`` return how many of their entries
    were not written for that reason (superseded: the engine counts them); ``None`` counts as
    0, so a store that never compares may return nothing."""

    def store(self, payload: Payload) -> int | None:
        """Insert one entry, or replace the stored one unless it is newer (`older`); return 1
        when a newer entry kept it out, else 0."""
        ...

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """`store` for several entries, in one round trip where the store does I/O; return
        how many a newer stored entry kept out (of two writes of one key in ``payloads``, the
        newer one is written and the other counts too)."""
        ...

    def find(self, name: str, key: str) -> Payload | None:
        """The entry, expired or not, or ``None``."""
        ...

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``, by key, in one round trip."""
        ...

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``, expired ones included."""
        ...

    def delete(self, name: str, key: str) -> None:
        """Remove the entry if present."""
        ...

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove every entry whose ``expire_on`` is at or before ``now``; return the count."""
        ...

    def close(self) -> None:
        """Release resources; the store is not used afterwards."""
        ...


class AsyncFailoverStore(Protocol):
    """The async methods a store may add to `FailoverStore`, for ``async def`` callers: the
    same operations without a worker thread. A store that has them says so with
    `Capabilities.native_async`; layers pass them through to the store they wrap."""

    async def afind(self, name: str, key: str) -> Payload | None:
        """`FailoverStore.find`, awaited."""
        ...

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`FailoverStore.find_many`, awaited."""
        ...

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """`FailoverStore.store_many`, awaited: how many a newer stored entry kept out."""
        ...

    async def aclose(self) -> None:
        """Close what the async methods opened (their connections, on this event loop)."""
        ...


def older(payload: Payload, stored: Payload | None) -> bool:
    """Whether ``payload`` is older than the ``stored`` entry of its key, so that writing it
    would move the entry backwards: its ``as_of`` (when the call that got it started) is
    before the stored one's. An equal ``as_of`` is not older (the write replaces), and an entry
    without an ``as_of`` is never compared."""
    if stored is None:
        return False
    new, old = payload.as_of, stored.as_of
    return new is not None and old is not None and new < old
