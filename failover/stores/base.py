"""The `FailoverStore` protocol every store and store layer implements."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..payload import ReferentialPayload

__all__ = ["FailoverStore"]

Payload = ReferentialPayload[Any]


@runtime_checkable
class FailoverStore(Protocol):
    """Where envelopes are kept. Synchronous and thread-safe; entries are addressed by
    ``(name, key)``. Layers (copying, async writes, multi-tenant) implement it too."""

    def store(self, payload: Payload) -> None:
        """Insert or replace one entry."""
        ...

    def store_many(self, payloads: Sequence[Payload]) -> None:
        """Insert or replace several entries, in one round trip where the store does I/O."""
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
