"""`MultiTenantStore`: one store chain per tenant, and the factories that make them.

The tenant is resolved on the calling thread, before any hand-off (the async-writes queue sits
below this layer, inside each tenant's chain), so a write can never land in another tenant's
store. Strategies for SQL, each one a factory ``tenant -> store``:

- `per_tenant_tables`: one table per tenant (``{prefix}failover_store``), one shared database
  connection pool.
- `per_tenant_databases`: one database (a SQLite file, a PostgreSQL database) per tenant, from a
  URL template containing ``{tenant}``.
- any callable ``tenant -> FailoverStore`` of your own.

Tenant ids that end up in a table or file name must match `TENANT_ID` (lower case letters,
digits, ``_``; at most 31 characters): a hostile id never reaches SQL text or a path.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ..errors import ConfigurationError, StoreError
from ..tenant import current_tenant, pinned
from .async_write import flush_chain
from .base import FailoverStore, Payload

if TYPE_CHECKING:
    import sqlalchemy

__all__ = [
    "TENANT_ID",
    "MultiTenantStore",
    "TenantStoreFactory",
    "per_tenant",
    "per_tenant_databases",
    "per_tenant_stores",
    "per_tenant_tables",
    "safe_tenant_id",
]

log = logging.getLogger(__name__)

TenantStoreFactory = Callable[[str], FailoverStore]
"""Makes the store of one tenant. It may carry a ``does_io`` attribute (assumed ``True``
when absent) and a ``close()`` method, called when the `MultiTenantStore` closes."""

TENANT_ID: Final = re.compile(r"[a-z0-9_]{1,31}")
"""The tenant ids allowed in table and file names. Lower case only: SQLite table names and the
file names of some file systems ignore case, so ``Acme`` and ``acme`` would share a store. At
most 31 characters: with its ``_``, a table prefix of `SqlStore` is 32 at most."""

_IN_PROCESS = ("memory", "cachetools")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")  # masked in the factory's repr
_SHOWN = 60  # characters of a refused tenant id shown in an error message


def _masked(url: str) -> str:
    return _PASSWORD.sub(r"\1***@", url)


def safe_tenant_id(tenant: str) -> str:
    """``tenant``, checked for use in a table or file name.

    Raises:
        StoreError: ``tenant`` does not match `TENANT_ID`.
    """
    if not isinstance(tenant, str) or TENANT_ID.fullmatch(tenant) is None:
        raise StoreError(
            f"tenant id {str(tenant)[:_SHOWN]!r} cannot name a table or a file: "
            f"it must match {TENANT_ID.pattern}"
        )
    return tenant


class MultiTenantStore:
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
        """Whether the tenants' stores do I/O (the factory's ``does_io``, ``True`` if unknown)."""
        return bool(getattr(self.factory, "does_io", True))

    @property
    def writes_async(self) -> bool:
        """Whether writes leave the caller's thread (the factory's ``writes_async``)."""
        return bool(getattr(self.factory, "writes_async", False))

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
                f"MultiTenantStore: unknown tenant {tenant[:_SHOWN]!r} refused (strict=True)"
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
                        tenant[:_SHOWN],
                    )
            return store

    # -- the current tenant's store -------------------------------------------------------------

    def store(self, payload: Payload) -> None:
        """Insert or replace one entry of the current tenant."""
        self.current().store(payload)

    def store_many(self, payloads: Sequence[Payload]) -> None:
        """Insert or replace several entries of the current tenant."""
        self.current().store_many(payloads)

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

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued writes of every tenant are written.

        Args:
            timeout: the most seconds to wait, overall; ``None`` waits as long as it takes.

        Returns:
            ``True`` when everything was written, ``False`` when the timeout came first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        flushed = True
        for store in self.stores.values():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            flushed = flush_chain(store, remaining) and flushed
        return flushed

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
            close = getattr(self.factory, "close", None)
            if callable(close):
                close()
        finally:
            if failed:
                raise failed[0]


class _Stores:
    """A factory with the attributes `MultiTenantStore` reads (``does_io``, ``close``)."""

    def __init__(
        self,
        make: TenantStoreFactory,
        does_io: bool,
        description: str,
        close: Callable[[], None] | None = None,
    ) -> None:
        self._make = make
        self.does_io = does_io
        self._description = description
        self._close = close

    def __repr__(self) -> str:
        return self._description

    def __call__(self, tenant: str) -> FailoverStore:
        return self._make(tenant)

    def close(self) -> None:
        """Release what the tenants' stores share."""
        if self._close is not None:
            self._close()


def per_tenant_stores(url: str, *, clock: Callable[[], datetime] | None = None) -> _Stores:
    """One in-process store per tenant (``memory://``, ``cachetools://``), from one URL.

    Args:
        url: a `make_store` URL, made once per tenant.
        clock: the time source of ``cachetools://`` stores.

    Returns:
        A factory ``tenant -> store`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: a URL that is not an in-process store, or that `make_store` refuses.
    """
    from .factory import make_store

    scheme = url.split("://", 1)[0].lower() if isinstance(url, str) else ""
    if scheme not in _IN_PROCESS:
        # Several stores made from one database URL would share one table: no isolation.
        raise ConfigurationError(
            f"per_tenant_stores: {url!r} is not an in-process store URL; for a database use "
            "per_tenant_tables or per_tenant_databases"
        )
    make_store(url, clock=clock).close()  # a bad option fails now, not at the first tenant
    return _Stores(
        lambda tenant: make_store(url, clock=clock), False, f"per_tenant_stores({url!r})"
    )


def per_tenant_tables(
    url_or_engine: str | sqlalchemy.URL | sqlalchemy.Engine,
    prefixes: Mapping[str, str] | None = None,
    **store_kwargs: Any,
) -> _Stores:
    """One table per tenant, in one database, through one shared SQLAlchemy engine.

    Args:
        url_or_engine: a SQLAlchemy URL, or an `sqlalchemy.Engine` (never disposed here).
        prefixes: the table prefix of each tenant, e.g. ``{"acme": "acme_"}``; a tenant not listed
            is refused with `StoreError`. ``None``: the prefix is ``f"{tenant}_"``, for tenant ids
            matching `TENANT_ID`.
        **store_kwargs: passed to each `SqlStore` (``codec``, ``cipher``, ``allowed_types``...).

    Returns:
        A factory ``tenant -> SqlStore`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: a prefix `SqlStore` refuses (checked here, for every tenant, before
            any SQL runs), two tenants whose tables would be one table, or a bad URL.
    """
    from .sql import SqlStore, _split_prefix, make_engine

    if prefixes is not None:
        prefixes = dict(prefixes)
        seen: dict[str, str] = {}
        for tenant, prefix in prefixes.items():
            try:
                _split_prefix(prefix)
            except ConfigurationError as exc:
                raise ConfigurationError(f"per_tenant_tables: tenant {tenant!r}: {exc}") from None
            # SQLite table names ignore case: two prefixes differing only by case are one table.
            other = seen.setdefault(prefix.lower(), tenant)
            if other != tenant:
                raise ConfigurationError(
                    f"per_tenant_tables: tenants {other!r} and {tenant!r} would share a table "
                    f"(prefixes {prefixes[other]!r} and {prefix!r})"
                )
    from sqlalchemy import Engine

    owned = not isinstance(url_or_engine, Engine)
    engine = url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)

    def prefix_of(tenant: str) -> str:
        if prefixes is None:
            return f"{safe_tenant_id(tenant)}_"
        try:
            return prefixes[tenant]
        except KeyError:
            raise StoreError(
                f"per_tenant_tables: no table prefix for tenant {str(tenant)[:_SHOWN]!r}"
            ) from None

    return _Stores(
        lambda tenant: SqlStore(engine, table_prefix=prefix_of(tenant), **store_kwargs),
        True,
        f"per_tenant_tables({engine.url.render_as_string(hide_password=True)!r})",
        engine.dispose if owned else None,
    )


def per_tenant_databases(url_template: str, **store_kwargs: Any) -> _Stores:
    """One database per tenant: ``url_template`` with ``{tenant}`` replaced by the tenant id.

    For example ``"sqlite:////var/lib/app/failover-{tenant}.db"`` (one SQLite file per tenant)
    or ``"postgresql+psycopg://app@db/failover_{tenant}"``. Tenant ids must match `TENANT_ID`.

    Args:
        url_template: a SQLAlchemy URL containing ``{tenant}``.
        **store_kwargs: passed to each `SqlStore`.

    Returns:
        A factory ``tenant -> SqlStore`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: the template has no ``{tenant}``, or is not a URL `SqlStore` takes
            (checked here, before the first tenant comes).
    """
    from .sql import SqlStore, make_engine

    if not isinstance(url_template, str) or "{tenant}" not in url_template:
        shown = _masked(url_template) if isinstance(url_template, str) else url_template
        raise ConfigurationError(
            f"per_tenant_databases: the URL template must contain '{{tenant}}', got {shown!r}"
        )
    make_engine(url_template.replace("{tenant}", "tenant")).dispose()  # connects to nothing
    return _Stores(
        lambda tenant: SqlStore(
            url_template.replace("{tenant}", safe_tenant_id(tenant)), **store_kwargs
        ),
        True,
        f"per_tenant_databases({_masked(url_template)!r})",
    )


def per_tenant(url: str, *, clock: Callable[[], datetime] | None = None) -> _Stores:
    """The engine's strategy for a store URL under multi-tenancy.

    ``memory://`` and ``cachetools://`` URLs: one in-process store per tenant
    (`per_tenant_stores`). A database URL containing ``{tenant}``: one database per tenant
    (`per_tenant_databases`). Any other database URL: one table per tenant, prefixed
    ``{tenant}_`` (`per_tenant_tables`).

    Args:
        url: the engine's ``store`` URL.
        clock: the time source of ``cachetools://`` stores.

    Returns:
        A factory ``tenant -> store`` for `MultiTenantStore`.
    """
    scheme = url.split("://", 1)[0].lower()
    if scheme in _IN_PROCESS:
        return per_tenant_stores(url, clock=clock)
    if "{tenant}" in url:
        return per_tenant_databases(url)
    return per_tenant_tables(url)
