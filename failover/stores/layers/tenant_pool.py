"""The tenants' stores a `failover.stores.layers.routing.MultiTenantStore` keeps open: made once
per tenant on first use, counted in use while an operation holds one, and past ``max_tenants``
the least recently used idle one closed to make room (`TenantPool`)."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from types import TracebackType

from ...errors import ConfigurationError, StoreError
from ...forks import AfterFork
from ...tenant import pinned
from ..base import FailoverStore, walk
from .tenant_ids import SHOWN

__all__ = ["POOL_FORKS", "OpenTenant", "TenantPool", "assign_tenant"]

log = logging.getLogger(
    "failover.stores.layers.routing"
)  # as before the split: what users filter on


class OpenTenant:
    """One tenant's store, how many calls use it now, and when it was last used.

    ``with`` it around a use of the store: a store in use is never closed. Entered only through
    `MultiTenantStore._use`, which counts the call in first."""

    __slots__ = ("busy", "closed", "lock", "store", "used")

    def __init__(self, store: FailoverStore, used: int) -> None:
        self.store = store
        self.busy = 1  # made for a call, which uses it
        self.used = used
        self.closed = False
        self.lock = threading.Lock()

    def __enter__(self) -> FailoverStore:
        return self.store

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self.lock:
            self.busy -= 1


class TenantPool:
    """The tenants' stores open, by tenant: the part of `MultiTenantStore` that makes, counts
    and closes them (its ``__init__`` sets the attributes declared here)."""

    factory: Callable[[str], FailoverStore]
    resolver: Callable[[], str | None]
    default_tenant: str | None
    strict: bool
    tenants: frozenset[str] | None
    max_tenants: int
    closed_tenants: int
    refused_tenants: int
    _stores: dict[str, OpenTenant]
    _lock: threading.Lock
    _closed: bool
    _ticks: itertools.count[int]
    _said: set[str]

    @property
    def stores(self) -> dict[str, FailoverStore]:
        """The stores open, by tenant (a snapshot)."""
        return {tenant: entry.store for tenant, entry in list(self._stores.items())}

    def current(self) -> FailoverStore:
        """The current tenant's store, made on first use. Not counted as in use: past
        ``max_tenants`` it may be closed while held (the operations here count theirs).

        Raises:
            StoreError: no tenant and no ``default_tenant``, a failing resolver, a tenant refused
                by ``strict`` or by ``max_tenants``, or a closed store.
        """
        with self._use() as store:
            return store

    def _use(self) -> OpenTenant:
        """The current tenant's store, counted in use until the ``with`` around it ends.

        Raises:
            StoreError: as `current`.
        """
        tenant = pinned.get()
        if tenant is None:  # not `or`: a pinned "" is a tenant the resolver returned
            tenant = self.resolve()
        entry = self._stores.get(tenant)  # one dict read: atomic
        if entry is not None:
            with entry.lock:
                if not entry.closed:
                    entry.busy += 1
                    entry.used = next(self._ticks)
                    return entry
            # Closed to make room for another tenant meanwhile: made again (under the lock
            # that closed it, released once the map no longer holds it).
        return self._made(tenant)

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

    def here(self) -> str | None:
        """The caller's tenant, resolved on its own thread before work moves to another thread
        (the one pinned already, if any), for the work to pin there (`pinned_call`); ``None``
        when it cannot be resolved (the work then meets the same error where its store guard
        handles it)."""
        tenant = pinned.get()
        if tenant is not None:
            return tenant
        try:
            return self.resolve()
        except StoreError:
            return None

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
        """The store of ``tenant``, made on first use (exactly once while it stays open). Not
        counted as in use, as `current`.

        Raises:
            StoreError: a tenant id that is not a string, is refused by ``strict`` or by
                ``max_tenants``, or comes after `close`.
        """
        entry = self._stores.get(tenant)
        if entry is not None:
            return entry.store
        with self._made(tenant) as store:
            return store

    def _made(self, tenant: str) -> OpenTenant:
        """The entry of ``tenant``, made unless another thread just made it, counted in use.

        Raises:
            StoreError: as `store_for`.
        """
        if not isinstance(tenant, str):
            raise StoreError(f"MultiTenantStore: a tenant id must be a string, got {tenant!r}")
        known = self.tenants is None or tenant in self.tenants or tenant == self.default_tenant
        if self.strict and not known:
            raise StoreError(
                f"MultiTenantStore: unknown tenant {tenant[:SHOWN]!r} refused (strict=True)"
            )
        evicted: tuple[str, OpenTenant] | None = None
        try:
            with self._lock:
                entry = self._stores.get(tenant)
                if entry is not None:
                    with entry.lock:
                        # Never closed while in the map: closing takes it out under _lock first.
                        entry.busy += 1
                        entry.used = next(self._ticks)
                    return entry
                if self._closed:
                    raise StoreError("MultiTenantStore: closed; no tenant store is made any more")
                if len(self._stores) >= self.max_tenants:
                    evicted = self._evict(tenant)
                store = self.factory(tenant)
                assign_tenant(store, tenant)
                entry = OpenTenant(store, next(self._ticks))
                self._stores[tenant] = entry
                if not known:
                    log.warning(
                        "failover: tenant %r is not among the known tenants; it gets a store of "
                        "its own (strict=True would refuse it)",
                        tenant[:SHOWN],
                    )
            return entry
        finally:
            # Outside the lock (closing flushes queued writes), even when the factory failed.
            if evicted is not None:
                self._close_evicted(*evicted)

    def _evict(self, tenant: str) -> tuple[str, OpenTenant]:
        """Take the least recently used store that no call uses out of the map (under `_lock`),
        marked closed: no call enters it any more.

        Raises:
            StoreError: every store open is in use; ``tenant`` is refused.
        """
        for old, entry in sorted(self._stores.items(), key=lambda item: item[1].used):
            with entry.lock:
                if entry.busy == 0:
                    entry.closed = True
                    del self._stores[old]
                    return old, entry
        self.refused_tenants += 1
        self._once(
            "refused",
            "failover: MultiTenantStore: max_tenants=%d stores are open and every one is in use: "
            "new tenants are refused until one is idle (their calls get the live result, no "
            "recovery); raise max_tenants? Logged once; refused_tenants counts them",
            self.max_tenants,
        )
        raise StoreError(
            f"MultiTenantStore: tenant {tenant[:SHOWN]!r} refused: max_tenants="
            f"{self.max_tenants} stores are open and every one is in use"
        )

    def _close_evicted(self, tenant: str, entry: OpenTenant) -> None:
        """Close an evicted tenant's store (its queued writes flushed first); never raises."""
        self.closed_tenants += 1
        self._once(
            "closed",
            "failover: MultiTenantStore: more than max_tenants=%d tenants; the least recently "
            "used tenant's store is closed to make room, and made again if it comes back. "
            "Logged once; closed_tenants counts them",
            self.max_tenants,
        )
        try:
            entry.store.close()
        except Exception:
            log.warning(
                "failover: closing the store of tenant %r failed", tenant[:SHOWN], exc_info=True
            )

    def _once(self, what: str, message: str, *args: object) -> None:
        if what not in self._said:
            self._said.add(what)
            log.warning(message, *args)

    def forked(self) -> None:
        """In a forked child: no store is in use (the calls that held them were the parent's
        threads, which did not come along and would never release them), and new locks
        (another thread may have held one at the fork)."""
        self._lock = threading.Lock()
        for entry in list(self._stores.values()):
            entry.lock = threading.Lock()
            entry.busy = 0


POOL_FORKS = AfterFork(TenantPool.forked)
"""The pools to reset in a forked child: `MultiTenantStore.__init__` adds itself."""


def assign_tenant(store: object, tenant: str) -> None:
    """Tell each layer of a tenant's new store that has a ``bind_tenant`` method (`SqlStore`,
    `RedisStore`: their encrypted and signed rows are bound to their tenant) which tenant it
    serves, before it is used.

    Raises:
        StoreError: a store that serves another tenant already (a factory handing one store
            to several tenants).
    """
    for layer in walk(store):
        bind = getattr(layer, "bind_tenant", None)
        if callable(bind):
            try:
                bind(tenant)
            except ConfigurationError as exc:
                raise StoreError(f"MultiTenantStore: {exc}") from None
