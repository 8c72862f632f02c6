"""`MultiTenantStore`: routes each call to its tenant's store chain (one chain per tenant).

The tenant is resolved on the calling thread, before any hand-off (the async-writes queue sits
below this layer, inside each tenant's chain), so a write can never land in another tenant's
store. Each tenant's store comes from a factory ``tenant -> store``: one of your own, or one a
kind of store makes (`failover.stores.factory.per_tenant` picks it from a URL):

- in-process stores: `failover.stores.factory.per_tenant_stores`;
- SQL: `failover.stores.backends.sql.per_tenant_tables` (one table per tenant) and
  `failover.stores.backends.sql.per_tenant_databases` (one database per tenant);
- Redis: `RedisStore.per_tenant` (one key prefix per tenant).

Tenant ids that end up in a table name, a file name or a key prefix must match `TENANT_ID` (lower
case letters, digits, ``_``; at most 31 characters): a hostile id never reaches SQL text or a path.

At most ``max_tenants`` stores are open at once (`DEFAULT_MAX_TENANTS`): a tenant id taken from a
request cannot open tables, files or connections without end. Past it, a new tenant's store
takes the place of the least recently used one that no call is using: that one is closed (its
queued writes flushed first) and made again if its tenant comes back. When every store is in use,
the new tenant is refused with `StoreError`, which a call handles as store trouble (the live
result returns; a recovery misses).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime

from ...closeable import Closeable
from ...errors import ConfigurationError, StoreError
from ...tenant import current_tenant, pinned
from ..base import (
    FailoverStore,
    Payload,
    delete_many,
    native_async,
)
from ..browsing import BrowsingLayer
from ..layer import PassingDown
from .tenant_ids import DEFAULT_MAX_TENANTS, SHOWN, TENANT_ID, check_max_tenants, safe_tenant_id
from .tenant_pool import POOL_FORKS, OpenTenant, TenantPool, assign_tenant

__all__ = [
    "DEFAULT_MAX_TENANTS",
    "SHOWN",
    "TENANT_ID",
    "MultiTenantStore",
    "TenantStoreFactory",
    "assign_tenant",
    "check_max_tenants",
    "safe_tenant_id",
]

log = logging.getLogger(__name__)

TenantStoreFactory = Callable[[str], FailoverStore]
"""Makes the store of one tenant. It may declare ``does_io`` and ``writes_async`` as a store does
(see `failover.stores.base.Capabilities`), and have a ``close()`` method
(`failover.closeable.Closeable`), called when the `MultiTenantStore` closes."""


class MultiTenantStore(TenantPool, BrowsingLayer, PassingDown):
    """Routes each operation to the current tenant's store, made on first use.

    Each tenant's store is made exactly once while it stays open, even when many threads meet a
    new tenant at the same time. Operations on tenants already seen take only their tenant's own
    lock, to count the store in use (a store in use is never closed for ``max_tenants``).

    Args:
        factory: makes one tenant's store (or store chain) from the tenant id.
        resolver: returns the current tenant id, or ``None``; default: `failover.current_tenant`.
        default_tenant: the tenant used when the resolver returns ``None``; without one, an
            operation without a tenant raises `StoreError`.
        strict: refuse tenants not in ``tenants`` (``default_tenant`` excepted) with `StoreError`.
        tenants: the known tenants. Without ``strict``, an unknown tenant is let through and
            logged once as a warning.
        max_tenants: the tenants' stores kept open at once; past it the least recently used
            idle one is closed (``closed_tenants`` counts them), or, all in use, the new tenant
            refused (``refused_tenants``). ``None``: the factory's own ``max_tenants`` if it
            declares one (a ``?max_tenants=`` URL option), else `DEFAULT_MAX_TENANTS`.

    Raises:
        ConfigurationError: a factory or resolver that is not callable, ``strict`` without
            ``tenants``, a ``default_tenant`` that is not a string, or a ``max_tenants`` that
            is not a whole number >= 1.
    """

    def __init__(
        self,
        factory: TenantStoreFactory,
        resolver: Callable[[], str | None] = current_tenant,
        default_tenant: str | None = None,
        strict: bool = False,
        tenants: Collection[str] | None = None,
        max_tenants: int | None = None,
    ) -> None:
        for setting, value in (("factory", factory), ("resolver", resolver)):
            if not callable(value):
                raise ConfigurationError(
                    f"MultiTenantStore: {setting} must be callable, got {value!r}"
                )
        if default_tenant is not None and not isinstance(default_tenant, str):
            raise ConfigurationError(
                f"MultiTenantStore: default_tenant must be a string, got {default_tenant!r}"
            )
        if isinstance(tenants, str):
            raise ConfigurationError(
                "MultiTenantStore: tenants must be a collection of tenant ids, not a string"
            )
        if strict and tenants is None:
            raise ConfigurationError("MultiTenantStore: strict=True needs tenants= (the known ids)")
        if max_tenants is None:
            max_tenants = getattr(factory, "max_tenants", None) or DEFAULT_MAX_TENANTS
        self.max_tenants = check_max_tenants(max_tenants, "MultiTenantStore")
        self.factory = factory
        self.resolver = resolver
        self.default_tenant = default_tenant
        self.strict = bool(strict)
        self.tenants: frozenset[str] | None = None if tenants is None else frozenset(tenants)
        self._stores: dict[str, OpenTenant] = {}
        self._lock = threading.Lock()
        self._closed = False  # under `_lock`: no store is made after close(), none would close it
        self._ticks = itertools.count()  # next() is atomic: the recency of each use, lock-free
        self.closed_tenants = 0
        """Tenants' stores closed to make room for another (least recently used first)."""
        self.refused_tenants = 0
        """New tenants refused because every store open was in use."""
        self._said: set[str] = set()  # what was logged once already
        POOL_FORKS.add(self)

    def __repr__(self) -> str:
        return (
            f"MultiTenantStore({self.factory!r}, default_tenant={self.default_tenant!r}, "
            f"strict={self.strict}, tenants open: {len(self._stores)} of {self.max_tenants}, "
            f"closed: {self.closed_tenants}, refused: {self.refused_tenants})"
        )

    @property
    def _declaring(self) -> object:
        """The factory: the tenants' stores do I/O and write asynchronously as it declares
        (``does_io``: ``True`` if it does not say)."""
        return self.factory

    def _below(self) -> OpenTenant:
        """The current tenant's store: control over entries reaches no other tenant's (a tag
        names entries of one tenant)."""
        return self._use()

    @property
    def native_async(self) -> bool:
        """Whether the current tenant's store is made and has async methods (a tenant's first
        read, which makes its store, is done on a worker thread)."""
        tenant = pinned.get()
        if tenant is None:
            try:
                tenant = self.resolve()
            except StoreError:
                return False
        entry = self._stores.get(tenant)
        return entry is not None and native_async(entry.store)

    async def afind(self, name: str, key: str) -> Payload | None:
        """The current tenant's `afind` (only when `native_async`)."""
        with self._use() as store:
            found: Payload | None = await store.afind(name, key)  # type: ignore[attr-defined]
            return found

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The current tenant's `afind_many` (only when `native_async`)."""
        with self._use() as store:
            found: dict[str, Payload] = await store.afind_many(name, keys)  # type: ignore[attr-defined]
            return found

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """The current tenant's `astore_many` (only when `native_async`)."""
        with self._use() as store:
            kept: int | None = await store.astore_many(payloads)  # type: ignore[attr-defined]
            return kept

    async def aclose(self) -> None:
        """Close this loop's async clients of every tenant's store open."""
        for store in self.stores.values():
            if native_async(store):
                await store.aclose()

    def layers_below(self) -> list[FailoverStore]:
        """The stores open, one per tenant: `flush` waits for each."""
        return list(self.stores.values())

    @property
    def browsable(self) -> bool:
        """``True``: entries are listed from the current tenant's store (a store that cannot
        list them raises `TypeError` then), never across tenants."""
        return True

    def browsed(self) -> FailoverStore:
        """The current tenant's store."""
        return self.current()

    # -- the current tenant's store -------------------------------------------------------------

    def store(self, payload: Payload) -> int | None:
        """Insert or replace one entry of the current tenant."""
        with self._use() as store:
            return store.store(payload)

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """Insert or replace several entries of the current tenant."""
        with self._use() as store:
            return store.store_many(payloads)

    def find(self, name: str, key: str) -> Payload | None:
        """The current tenant's entry, or ``None``."""
        with self._use() as store:
            return store.find(name, key)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The current tenant's entries found among ``keys``."""
        with self._use() as store:
            return store.find_many(name, keys)

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name`` of the current tenant."""
        with self._use() as store:
            return store.find_all(name)

    def delete(self, name: str, key: str) -> None:
        """Remove the current tenant's entry if present."""
        with self._use() as store:
            store.delete(name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the current tenant's entries under ``keys``."""
        with self._use() as store:
            delete_many(store, name, keys)

    # Control over entries (delete_all, keeps_tags, delete_tagged, expire): `PassingDown`'s,
    # on the current tenant's store only (`_below`).

    # -- every tenant ---------------------------------------------------------------------------

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries of every tenant seen so far; return the total count.

        Raises:
            Exception: the first tenant's failure, once every other tenant was cleaned.
        """
        removed = 0
        failed: list[Exception] = []
        for tenant, store in self.stores.items():
            try:
                removed += store.clean_by_expiry(now)
            except Exception as exc:
                # One tenant's unreachable database must not keep the others' entries forever.
                log.warning("failover: cleaning tenant %r failed", tenant[:SHOWN], exc_info=True)
                failed.append(exc)
        if failed:
            raise failed[0]
        return removed

    def close(self) -> None:
        """Close every tenant's store, then the factory (if it has a ``close()``).

        Raises:
            Exception: the first failure, once every store and the factory were closed.
        """
        with self._lock:
            self._closed = True
            stores = [(tenant, entry.store) for tenant, entry in self._stores.items()]
            self._stores.clear()
        failed: list[Exception] = []
        for tenant, store in stores:
            try:
                store.close()
            except Exception as exc:
                # The others still close: each flushes its own queued writes.
                log.warning(
                    "failover: closing the store of tenant %r failed", tenant[:SHOWN], exc_info=True
                )
                failed.append(exc)
        try:
            if isinstance(self.factory, Closeable):
                self.factory.close()
        finally:
            if failed:
                raise failed[0]
