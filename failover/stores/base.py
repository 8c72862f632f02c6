"""What stores and layers declare about themselves (`Capabilities`), read in one place
(`does_io`, `writes_async`, `isolating`, `browsable`, `flush`); and, from
`failover.stores.protocol`, the `FailoverStore` protocol every store and store layer implements."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeGuard, cast

from .control import delete_all_listed, expire_rewritten, no_tags
from .declaring import (
    DeclaresAsyncWrites,
    DeclaresBrowsing,
    DeclaresFreshReads,
    DeclaresHealthRows,
    DeclaresIO,
    DeclaresIsolation,
    DeclaresNativeAsync,
    DeclaresSharing,
    Flushable,
    SupportsDeleteAll,
    SupportsDeleteMany,
    SupportsExpire,
    SupportsTags,
)
from .protocol import AsyncFailoverStore, FailoverStore, Payload, older

__all__ = [
    "AsyncFailoverStore",
    "Capabilities",
    "FailoverStore",
    "Payload",
    "as_async",
    "browsable",
    "delete_all",
    "delete_many",
    "delete_tagged",
    "does_io",
    "expire",
    "flush",
    "isolating",
    "keeps_health",
    "keeps_tags",
    "native_async",
    "older",
    "reads_fresh",
    "walk",
    "writes_async",
]


class Capabilities:
    """What a store, a store layer or a tenant store factory declares about itself.

    The library's stores and layers derive from it; a store of your own may too, or declare the
    same members itself (each recognised by its Protocol, in `failover.stores.declaring`), or
    none (then it is taken to do I/O, write on the caller's thread and keep the objects it is
    given). The engine and the layers read the declarations through
    `does_io`, `writes_async`, `isolating` and `flush`, never by probing for them.

    Attributes:
        does_io: operations block on I/O (a database, a network): ``async def`` failovers reach
            the store from a worker thread, and writes are queued by default.
        writes_async: a write never blocks the caller on I/O (it is queued, or lands in process
            memory): no queue is put in front, and async callers write in place.
        isolating: what a caller holds is never what is stored (values are encoded as they
            are stored and decoded anew on every read, or copied both ways), so no copying
            layer is needed in front (unless writes are queued).
        reads_fresh: every read hands back objects no one else holds (decoded anew, or
            copied), so a copying layer in front copies writes only (the default: what
            ``isolating`` says).
        browsable: the store implements `failover.stores.browsing.Browsable` (``names``,
            ``page``, ``summary``): the command line and the dashboard can list its entries.
        native_async: the store has the `AsyncFailoverStore` methods, doing its I/O on the
            event loop (an async driver): async callers await them instead of a worker thread.
        keeps_health: the store implements `failover.stores.health_rows.HealthRows`: engines
            publish their health summary to it (``Failover(publish_health=...)``) and the
            store dashboard adds the processes' summaries up.
    """

    # Properties, so that a layer may answer per instance (as its inner store) and a raw store
    # with a plain class attribute (``does_io = False``).
    @property
    def does_io(self) -> bool:
        """Operations block on I/O (the default: ``True``)."""
        return True

    @property
    def writes_async(self) -> bool:
        """A write never blocks the caller on I/O (the default: ``False``)."""
        return False

    @property
    def isolating(self) -> bool:
        """What a caller holds is never what is stored (the default: ``False``)."""
        return False

    @property
    def reads_fresh(self) -> bool:
        """Every read hands back objects no one else holds (the default: ``isolating``: a
        store that isolates decodes or copies on every read)."""
        return self.isolating

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries of ``name`` under ``keys`` that are present: one ``delete`` each
        here; a store that can do it in one statement or round trip says so by overriding this.
        """
        store: Any = self
        for key in dict.fromkeys(keys):
            store.delete(name, key)

    # -- control over entries (``.invalidate_all()``, ``invalidate_tag``, ``.expire()``) ----------

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``; how many there were. Here: listed, then removed
        (`failover.stores.control.delete_all_listed`); a store that can do it in one statement
        or round trip says so by overriding this."""
        return delete_all_listed(cast(FailoverStore, self), name)

    @property
    def keeps_tags(self) -> bool:
        """The store keeps each entry's ``tags`` and `delete_tagged` removes the entries of a
        tag (the default: ``False``)."""
        return False

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name; how many there were.

        Raises:
            ConfigurationError: the store keeps no tags (the default).
        """
        raise no_tags(self)

    def expire(self, name: str, key: str) -> bool:
        """End the fresh window of the entry ``(name, key)``, keeping it for failing over:
        marked ``fresh_ended``, with its own ``as_of``, never moved backwards and never made
        again once deleted; whether there was an entry. Here: read and written again
        (`failover.stores.control.expire_rewritten`, not atomic); a store that can do it in
        place says so by overriding this."""
        return expire_rewritten(cast(FailoverStore, self), name, key)

    @property
    def browsable(self) -> bool:
        """Its entries can be listed (the default: ``False``)."""
        return False

    @property
    def shares_results(self) -> bool:
        """Callers share the stored objects on purpose: no copying layer is put in front,
        though the store does not isolate (the default: ``False``)."""
        return False

    @property
    def native_async(self) -> bool:
        """The store awaits its I/O natively (the default: ``False``)."""
        return False

    @property
    def keeps_health(self) -> bool:
        """The store keeps the processes' health rows (the default: ``False``)."""
        return False

    def layers_below(self) -> Sequence[object]:
        """The stores this one wraps (none for a raw store): what `flush` walks."""
        return ()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write queued in this store, or below it, is written.

        Args:
            timeout: the most seconds to wait, overall; ``None`` waits as long as it takes.

        Returns:
            ``True`` when everything was written (or nothing was queued), ``False`` when the
            timeout came first.
        """
        return flush_all(self.layers_below(), timeout)


def declared(store: object) -> Capabilities:
    """What ``store`` (or a tenant store factory) declares it can do.

    A store deriving from `Capabilities` answers itself. One of your own that does not (any
    object with the `FailoverStore` methods is a store) may still declare with plain members,
    each recognised by its Protocol of `failover.stores.declaring` (`DeclaresIO`,
    `DeclaresAsyncWrites`, `DeclaresIsolation`, `DeclaresFreshReads`, `DeclaresBrowsing`,
    `DeclaresNativeAsync`, `DeclaresHealthRows`, `DeclaresSharing`, `SupportsDeleteMany`,
    `Flushable`): this is the one place that reads them; what it does not declare takes the
    defaults of `Capabilities`.
    """
    return store if isinstance(store, Capabilities) else _Members(store)


class _Members(Capabilities):
    """The capabilities a store that does not derive from `Capabilities` declares with plain
    members; a member it lacks answers as `Capabilities` does."""

    def __init__(self, store: object) -> None:
        self.store = store

    @property
    def does_io(self) -> bool:
        """The store's ``does_io`` (`DeclaresIO`), else ``True``."""
        if isinstance(self.store, DeclaresIO):
            return bool(self.store.does_io)
        return super().does_io

    @property
    def writes_async(self) -> bool:
        """The store's ``writes_async`` (`DeclaresAsyncWrites`), else ``False``."""
        if isinstance(self.store, DeclaresAsyncWrites):
            return bool(self.store.writes_async)
        return super().writes_async

    @property
    def isolating(self) -> bool:
        """The store's ``isolating`` (`DeclaresIsolation`), else ``False``."""
        if isinstance(self.store, DeclaresIsolation):
            return bool(self.store.isolating)
        return super().isolating

    @property
    def reads_fresh(self) -> bool:
        """The store's ``reads_fresh`` (`DeclaresFreshReads`), else its ``isolating``."""
        if isinstance(self.store, DeclaresFreshReads):
            return bool(self.store.reads_fresh)
        return super().reads_fresh

    @property
    def browsable(self) -> bool:
        """The store's ``browsable`` (`DeclaresBrowsing`), else ``False``."""
        if isinstance(self.store, DeclaresBrowsing):
            return bool(self.store.browsable)
        return super().browsable

    @property
    def native_async(self) -> bool:
        """The store's ``native_async`` (`DeclaresNativeAsync`), else ``False``."""
        if isinstance(self.store, DeclaresNativeAsync):
            return bool(self.store.native_async)
        return super().native_async

    @property
    def keeps_health(self) -> bool:
        """The store's ``keeps_health`` (`DeclaresHealthRows`), else ``False``."""
        if isinstance(self.store, DeclaresHealthRows):
            return bool(self.store.keeps_health)
        return super().keeps_health

    @property
    def shares_results(self) -> bool:
        """The store's ``shares_results`` (`DeclaresSharing`), else ``False``."""
        if isinstance(self.store, DeclaresSharing):
            return bool(self.store.shares_results)
        return super().shares_results

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """The store's own ``delete_many`` (`SupportsDeleteMany`), else one ``delete`` per key."""
        store = self.store
        if isinstance(store, SupportsDeleteMany):
            store.delete_many(name, keys)
            return
        deletes = cast(FailoverStore, store).delete
        for key in dict.fromkeys(keys):
            deletes(name, key)

    def delete_all(self, name: str) -> int:
        """The store's own ``delete_all`` (`SupportsDeleteAll`), else listed and removed."""
        store = self.store
        if isinstance(store, SupportsDeleteAll):
            return int(store.delete_all(name))
        return delete_all_listed(cast(FailoverStore, store), name)

    @property
    def keeps_tags(self) -> bool:
        """Whether the store has a ``delete_tagged`` method (`SupportsTags`)."""
        return isinstance(self.store, SupportsTags)

    def delete_tagged(self, tag: str) -> int:
        """The store's own ``delete_tagged`` (`SupportsTags`).

        Raises:
            ConfigurationError: the store has none.
        """
        store = self.store
        if isinstance(store, SupportsTags):
            return int(store.delete_tagged(tag))
        raise no_tags(store)

    def expire(self, name: str, key: str) -> bool:
        """The store's own ``expire`` (`SupportsExpire`), else read and written again."""
        store = self.store
        if isinstance(store, SupportsExpire):
            return bool(store.expire(name, key))
        return expire_rewritten(cast(FailoverStore, store), name, key)

    def flush(self, timeout: float | None = None) -> bool:
        """The store's own ``flush`` (`Flushable`); a store without one queues nothing."""
        store = self.store
        return bool(store.flush(timeout)) if isinstance(store, Flushable) else True


def does_io(store: object) -> bool:
    """Whether ``store`` (or a tenant store factory) declares I/O; ``True`` when it says nothing."""
    return declared(store).does_io


def writes_async(store: object) -> bool:
    """Whether ``store`` declares writes that never block the caller; ``False`` when it says
    nothing."""
    return declared(store).writes_async


def isolating(store: object) -> bool:
    """Whether ``store`` declares that it isolates by encoding; ``False`` when it says nothing."""
    return declared(store).isolating


def reads_fresh(store: object) -> bool:
    """Whether ``store``'s reads hand back objects no one else holds; what it says of
    ``isolating`` when it says nothing of this."""
    return declared(store).reads_fresh


def delete_many(store: FailoverStore, name: str, keys: Iterable[str]) -> None:
    """Remove several entries of ``name``: in one go where ``store`` has ``delete_many`` (the
    library's stores and layers), else one ``delete`` each (a store of your own may have none)."""
    declared(store).delete_many(name, keys)


def delete_all(store: object, name: str) -> int:
    """Remove every entry of ``name`` from ``store``; how many there were (in one statement or
    round trip where the store declares ``delete_all``, else listed and removed)."""
    return declared(store).delete_all(name)


def keeps_tags(store: object) -> bool:
    """Whether ``store`` keeps the entries' tags (`Capabilities.keeps_tags`)."""
    return declared(store).keeps_tags


def delete_tagged(store: object, tag: str) -> int:
    """Remove every entry carrying ``tag`` from ``store``, of every name; how many there were.

    Raises:
        ConfigurationError: the store keeps no tags.
    """
    return declared(store).delete_tagged(tag)


def expire(store: object, name: str, key: str) -> bool:
    """End the fresh window of the entry ``(name, key)`` in ``store`` (`Capabilities.expire`);
    whether there was an entry."""
    return declared(store).expire(name, key)


def browsable(store: object) -> bool:
    """Whether ``store`` declares the browsing protocol (`failover.stores.browsing.Browsable`);
    ``False`` when it says nothing."""
    return declared(store).browsable


def keeps_health(store: object) -> bool:
    """Whether ``store`` declares that it keeps health rows
    (`failover.stores.health_rows.HealthRows`); ``False`` when it says nothing."""
    return declared(store).keeps_health


def native_async(store: object) -> TypeGuard[AsyncFailoverStore]:
    """Whether ``store`` declares the `AsyncFailoverStore` methods (`Capabilities.native_async`);
    ``False`` when it says nothing (async callers then reach it on a worker thread)."""
    return declared(store).native_async


def as_async(store: object) -> AsyncFailoverStore:
    """``store`` as the `AsyncFailoverStore` it is: for a layer's async methods, which its
    callers only reach when the layer declares `Capabilities.native_async`, that is when the
    store it wraps has them."""
    return cast(AsyncFailoverStore, store)


def flush(store: object, timeout: float | None = None) -> bool:
    """Wait until the writes queued in ``store`` (a store chain: every layer, every tenant, both
    tiers) are written; a store without a ``flush`` method queues nothing.

    Args:
        store: the outermost layer.
        timeout: the most seconds to wait, overall; ``None`` waits as long as it takes.

    Returns:
        ``True`` when everything queued was written, ``False`` when the timeout came first.
    """
    return declared(store).flush(timeout)


def flush_all(stores: Iterable[object], timeout: float | None = None) -> bool:
    """`flush` each store in turn, within one deadline for them all."""
    deadline = None if timeout is None else time.monotonic() + timeout
    flushed = True
    for store in stores:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        flushed = flush(store, remaining) and flushed
    return flushed


def walk(store: object) -> Iterator[object]:
    """``store`` and every store below it (what its layers wrap, both tiers), outermost first."""
    yield store
    if isinstance(store, Capabilities):
        for below in store.layers_below():
            yield from walk(below)
