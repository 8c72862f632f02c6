"""The members a store may declare without deriving from
`failover.stores.base.Capabilities`, each optional and each recognised by its Protocol:
`failover.stores.base.declared` reads them, with one ``isinstance`` per member (the Protocols are
runtime-checkable); a member a store lacks takes the default of `Capabilities`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

__all__ = [
    "DeclaresAsyncWrites",
    "DeclaresBrowsing",
    "DeclaresFreshReads",
    "DeclaresHealthRows",
    "DeclaresIO",
    "DeclaresIsolation",
    "DeclaresNativeAsync",
    "DeclaresSharing",
    "Flushable",
    "SupportsDeleteAll",
    "SupportsDeleteMany",
    "SupportsExpire",
    "SupportsTags",
]


@runtime_checkable
class DeclaresIO(Protocol):
    """A store that says whether it does I/O (`Capabilities.does_io`)."""

    does_io: bool


@runtime_checkable
class DeclaresAsyncWrites(Protocol):
    """A store that says whether its writes never block (`Capabilities.writes_async`)."""

    writes_async: bool


@runtime_checkable
class DeclaresIsolation(Protocol):
    """A store that says whether it isolates what it keeps (`Capabilities.isolating`)."""

    isolating: bool


@runtime_checkable
class DeclaresFreshReads(Protocol):
    """A store that says whether its reads hand back objects no one else holds
    (`Capabilities.reads_fresh`)."""

    reads_fresh: bool


@runtime_checkable
class DeclaresBrowsing(Protocol):
    """A store that says whether its entries can be listed (`Capabilities.browsable`)."""

    browsable: bool


@runtime_checkable
class DeclaresNativeAsync(Protocol):
    """A store that says whether it has the `AsyncFailoverStore` methods
    (`Capabilities.native_async`)."""

    native_async: bool


@runtime_checkable
class DeclaresHealthRows(Protocol):
    """A store that says whether it keeps health rows (`Capabilities.keeps_health`)."""

    keeps_health: bool


@runtime_checkable
class DeclaresSharing(Protocol):
    """A store that says whether callers share its objects (`Capabilities.shares_results`)."""

    shares_results: bool


@runtime_checkable
class SupportsDeleteMany(Protocol):
    """A store that removes several entries at once (`Capabilities.delete_many`)."""

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries of ``name`` under ``keys`` that are present."""
        ...


@runtime_checkable
class Flushable(Protocol):
    """A store that queues writes and can wait for them (`Capabilities.flush`)."""

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued writes are written; ``False`` when the timeout came first."""
        ...


@runtime_checkable
class SupportsDeleteAll(Protocol):
    """A store that removes every entry of a name at once (`Capabilities.delete_all`)."""

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``; how many there were."""
        ...


@runtime_checkable
class SupportsTags(Protocol):
    """A store that keeps the entries' tags and removes the entries of a tag at once
    (`Capabilities.delete_tagged`)."""

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name; how many there were."""
        ...


@runtime_checkable
class SupportsExpire(Protocol):
    """A store that ends an entry's fresh window in place, atomically (`Capabilities.expire`)."""

    def expire(self, name: str, key: str) -> bool:
        """Mark the entry ``fresh_ended`` if present; whether it was."""
        ...
