"""`MultiTenantStore`: one store chain per tenant.

The tenant is resolved on the calling thread, before any hand-off (the async-writes queue sits
below this layer, inside each tenant's chain), so a write can never land in another tenant's
store. Each tenant's store comes from a factory ``tenant -> store``: one of your own, or one a
kind of store makes (`failover.stores.factory.per_tenant` picks it from a URL):

- in-process stores: `failover.stores.factory.per_tenant_stores`;
- SQL: `failover.stores.sql.per_tenant_tables` (one table per tenant) and
  `failover.stores.sql.per_tenant_databases` (one database per tenant);
- Redis: `RedisStore.per_tenant` (one key prefix per tenant).

Tenant ids that end up in a table name, a file name or a key prefix must match `TENANT_ID` (lower
case letters, digits, ``_``; at most 31 characters): a hostile id never reaches SQL text or a path.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Final

from ..closeable import Closeable
from ..errors import ConfigurationError, StoreError
from ..tenant import current_tenant, pinned
from .base import (
    Capabilities,
    FailoverStore,
    Payload,
    delete_many,
    does_io,
    native_async,
    writes_async,
)
from .browsing import BrowsingLayer

__all__ = [
    "TENANT_ID",
    "MultiTenantStore",
    "TenantStoreFactory",
    "safe_tenant_id",
]

log = logging.getLogger(__name__)

TenantStoreFactory = Callable[[str], FailoverStore]
"""Makes the store of one tenant. It may declare ``does_io`` and ``writes_async`` as a store does
(see `failover.stores.base.Capabilities`), and have a ``close()`` method
(`failover.closeable.Closeable`), called when the `MultiTenantStore` closes."""

TENANT_ID: Final = re.compile(r"[a-z0-9_]{1,31}")
"""The tenant ids allowed in table and file names. Lower case only: SQLite table names and the
file names of some file systems ignore case, so ``Acme`` and ``acme`` would share a store. At
most 31 characters: with its ``_``, a table prefix of `SqlStore` is 32 at most."""

SHOWN = 60  # characters of a refused tenant id shown in an error message


def safe_tenant_id(tenant: str) -> str:
    """``tenant``, checked for use in a table or file name.

    Raises:
        StoreError: ``tenant`` does not match `TENANT_ID`.
    """
    if not isinstance(tenant, str) or TENANT_ID.fullmatch(tenant) is None:
        raise StoreError(
            f"tenant id {str(tenant)[:SHOWN]!r} cannot name a table or a file: "
            f"it must match {TENANT_ID.pattern}"
        )
    return tenant


class MultiTenantStore(BrowsingLayer, Capabilities):
    """Routes each operation to the current tenant's store, made on first use.

    Each tenant's store is made exactly once, even when many threads meet a new tenant at the same
    time. Operations on tenants already seen take no lock.

    Args:
        factory: makes one tenant's store (or store chain) from the tenant id.
        resolver: returns the current tenant id, or ``None``; default: `failover.current_tenant`.
        default_tenant: the tenant used when the resolver returns ``None``; without one, an
            operation without a tenant raises `StoreError`.
        strict: refuse tenants not in ``tenants`` (``default_tenant`` excepted) with `StoreError`.
        tenants: the known tenants. Without ``strict``, an unknown tenant is let through and
            logged once as a warning.

    Raises:
        ConfigurationError: a factory or resolver that is not callable, ``strict`` without
            ``tenants``, or a ``default_tenant`` that is not a string.
    """

    def __init__(
        self,
        factory: TenantStoreFactory,
        resolver: Callable[[], str | None] = current_tenant,
        default_tenant: str | None = None,
        strict: bool = False,
        tenants: Collection[str] | None = None,
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
        self.factory = factory
        self.resolver = resolver
        self.default_tenant = default_tenant
        self.strict = bool(strict)
        self.tenants: frozenset[str] | None = None if tenants is None else frozenset(tenants)
        self._stores: dict[str, FailoverStore] = {}
        self._lock = threading.Lock()
        self._closed = False  # under `_lock`: no store is made after close(), none would close it

    def __repr__(self) -> str:
        return (
            f"MultiTenantStore({self.factory!r}, default_tenant={self.default_tenant!r}, "
            f"strict={self.strict}, tenants seen: {len(self._stores)})"
        )

    @property
    def does_io(self) -> bool:
        """Whether the tenants' stores do I/O (as the factory declares; ``True`` if it does not)."""
        return does_io(self.factory)

    @property
    def writes_async(self) -> bool:
        """Whether writes never block the caller (as the factory declares)."""
        return writes_async(self.factory)

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
        store = self._stores.get(tenant)
        return store is not None and native_async(store)

    async def afind(self, name: str, key: str) -> Payload | None:
        """The current tenant's `afind` (only when `native_async`)."""
        store: Any = self.current()
        found: Payload | None = await store.afind(name, key)
        return found

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The current tenant's `afind_many` (only when `native_async`)."""
        store: Any = self.current()
        found: dict[str, Payload] = await store.afind_many(name, keys)
        return found

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """The current tenant's `astore_many` (only when `native_async`)."""
        store: Any = self.current()
        kept: int | None = await store.astore_many(payloads)
        return kept

    async def aclose(self) -> None:
        """Close this loop's async clients of every tenant's store made so far."""
        for store in list(self._stores.values()):
            if native_async(store):
                await store.aclose()

    def layers_below(self) -> list[FailoverStore]:
        """The stores made so far, one per tenant: `flush` waits for each."""
        return list(self._stores.values())

    @property
    def browsable(self) -> bool:
        """``True``: entries are listed from the current tenant's store (a store that cannot
        list them raises `TypeError` then), never across tenants."""
        return True

    def browsed(self) -> FailoverStore:
        """The current tenant's store."""
        return self.current()

    @property
    def stores(self) -> dict[str, FailoverStore]:
        """The stores made so far, by tenant (a snapshot)."""
        return dict(self._stores)

    def current(self) -> FailoverStore:
        """The current tenant's store, made on first use.

        Raises:
            StoreError: no tenant and no ``default_tenant``, a failing resolver, a tenant refused
                by ``strict``, or a closed store.
        """
        tenant = pinned.get()
        if tenant is None:  # not `or`: a pinned "" is a tenant the resolver returned
            tenant = self.resolve()
        store = self._stores.get(tenant)  # one dict read: atomic, no lock on the common path
        return store if store is not None else self.store_for(tenant)

    def ready(self) -> bool:
        """Whether the current tenant's store is made already, so using it sets nothing up.

        The first use of a tenant makes its store, which may connect to a database: async
        callers do that on a worker thread.
        """
        tenant = pinned.get()
        if tenant is None:
            try:
                tenant = self.resolve()
            except StoreError:
                return True  # nothing to make: the error shows where the store is used
        return tenant in self._stores

    def resolve(self) -> str:
        """The current tenant id, from the resolver or else ``default_tenant``.

        Raises:
            StoreError: no tenant and no ``default_tenant``, or the resolver raised.
        """
        try:
            tenant = self.resolver()
        except Exception as exc:
            # A store error, which callers handle as one: the async shells resolve the tenant
            # outside their store guards, before a hand-off, where anything else breaks the call.
            raise StoreError(f"MultiTenantStore: the tenant resolver failed: {exc!r}") from exc
        if tenant is None:
            tenant = self.default_tenant
            if tenant is None:
                raise StoreError(
                    "MultiTenantStore: no current tenant (set one with failover.tenant(...)) "
                    "and no default_tenant"
                )
        return tenant

    def store_for(self, tenant: str) -> FailoverStore:
        """The store of ``tenant``, made on first use (exactly once).

        Raises:
            StoreError: a tenant id that is not a string, is refused by ``strict``, or comes
                after `close`.
        """
        store = self._stores.get(tenant)
        if store is not None:
            return store
        if not isinstance(tenant, str):
            raise StoreError(f"MultiTenantStore: a tenant id must be a string, got {tenant!r}")
        known = self.tenants is None or tenant in self.tenants or tenant == self.default_tenant
        if self.strict and not known:
            raise StoreError(
                f"MultiTenantStore: unknown tenant {tenant[:SHOWN]!r} refused (strict=True)"
            )
        with self._lock:
            store = self._stores.get(tenant)
            if store is None:
                if self._closed:
                    raise StoreError("MultiTenantStore: closed; no tenant store is made any more")
                store = self.factory(tenant)
                self._stores[tenant] = store
                if not known:
                    log.warning(
                        "failover: tenant %r is not among the known tenants; it gets a store of "
                        "its own (strict=True would refuse it)",
                        tenant[:SHOWN],
                    )
            return store

    # -- the current tenant's store -------------------------------------------------------------

    def store(self, payload: Payload) -> int | None:
        """Insert or replace one entry of the current tenant."""
        return self.current().store(payload)

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """Insert or replace several entries of the current tenant."""
        return self.current().store_many(payloads)

    def find(self, name: str, key: str) -> Payload | None:
        """The current tenant's entry, or ``None``."""
        return self.current().find(name, key)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The current tenant's entries found among ``keys``."""
        return self.current().find_many(name, keys)

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name`` of the current tenant."""
        return self.current().find_all(name)

    def delete(self, name: str, key: str) -> None:
        """Remove the current tenant's entry if present."""
        self.current().delete(name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the current tenant's entries under ``keys``."""
        delete_many(self.current(), name, keys)

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
                log.warning("failover: cleaning tenant %r failed", tenant, exc_info=True)
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
            stores = list(self._stores.items())
            self._stores.clear()
        failed: list[Exception] = []
        for tenant, store in stores:
            try:
                store.close()
            except Exception as exc:
                # The others still close: each flushes its own queued writes.
                log.warning(
                    "failover: closing the store of tenant %r failed", tenant, exc_info=True
                )
                failed.append(exc)
        try:
            if isinstance(self.factory, Closeable):
                self.factory.close()
        finally:
            if failed:
                raise failed[0]
