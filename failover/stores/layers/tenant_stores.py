"""Every per-tenant factory: `TenantStores`, and how each kind of store is made per tenant.

- `in_process`: one in-process store per tenant (`failover.stores.factory.per_tenant_stores`);
- `layered`: a layer of its own over each tenant's store (the near store of ``tiered+`` URLs);
- `tables`: one SQL table per tenant, one shared engine (`stores.backends.sql.per_tenant_tables`,
  `SqlStore.per_tenant`);
- `databases`: one SQL database per tenant (`failover.stores.backends.sql.per_tenant_databases`);
- `key_prefixes`: one Redis key prefix per tenant, one shared client (`RedisStore.per_tenant`).

Each is given what it makes and what is the kind's own (the store class, the engine or client
to share, its prefix check): this module imports no store, so that the store classes can offer
their factory, and `failover.stores.factory.per_tenant` picks one from a URL, with no import
circle. A tenant id that ends up in a table name, a file name or a key prefix must match
`failover.stores.layers.routing.TENANT_ID`; a mapping of prefixes is checked whole, before the first
tenant comes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigurationError, StoreError
from ...masking import masked_url
from ..base import FailoverStore
from .routing import SHOWN, TenantStoreFactory, safe_tenant_id

__all__ = [
    "TenantStores",
    "databases",
    "distinct_prefixes",
    "in_process",
    "key_prefixes",
    "layered",
    "prefix_of",
    "tables",
]


class TenantStores:
    """A factory ``tenant -> store`` that declares whether its stores do I/O, and releases what
    they share (a connection pool) when the `MultiTenantStore` closes.

    Args:
        make: makes one tenant's store.
        does_io: whether the stores it makes do I/O.
        description: its ``repr``.
        close: releases what the stores share, if anything.

    Attributes:
        max_tenants: the stores a `MultiTenantStore` over it keeps open at once, when the URL
            says (``?max_tenants=``); ``None``: the router's default.
    """

    max_tenants: int | None = None

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


def in_process(make: Callable[[], FailoverStore], description: str) -> TenantStores:
    """A store of its own per tenant, each from ``make()``: one is made (and closed) now, so
    that a bad option fails here, not at the first tenant."""
    make().close()
    return TenantStores(lambda tenant: make(), False, description)


def layered(
    below: TenantStores, layer: Callable[[FailoverStore], FailoverStore], description: str
) -> TenantStores:
    """Each tenant's store of ``below`` under a ``layer`` of its own."""
    return TenantStores(lambda tenant: layer(below(tenant)), True, description, below.close)


def prefix_of(
    owner: str, what: str, prefixes: dict[str, str] | None, default: Callable[[str], str]
) -> Callable[[str], str]:
    """The prefix of a tenant: from ``prefixes`` (a tenant not listed is refused with
    `StoreError` naming ``owner`` and ``what``), or ``default(tenant id)`` when there is no
    mapping, for ids matching `failover.stores.layers.routing.TENANT_ID` (others are refused)."""

    def of(tenant: str) -> str:
        if prefixes is None:
            return default(safe_tenant_id(tenant))
        try:
            return prefixes[tenant]
        except KeyError:
            raise StoreError(f"{owner}: no {what} for tenant {str(tenant)[:SHOWN]!r}") from None

    return of


def distinct_prefixes(
    owner: str,
    prefixes: Mapping[str, str],
    check: Callable[[str, str], object],
    fold: bool,
    shared: str,
) -> dict[str, str]:
    """``prefixes`` checked whole, before the first tenant comes: each by ``check(prefix,
    tenant)``, no two tenants sharing one (compared case-insensitively with ``fold``;
    ``shared`` says what they would share).

    Raises:
        ConfigurationError: a prefix ``check`` refuses, or two tenants sharing one.
    """
    prefixes = dict(prefixes)
    seen: dict[str, str] = {}
    for tenant, prefix in prefixes.items():
        check(prefix, tenant)
        other = seen.setdefault(prefix.lower() if fold else prefix, tenant)
        if other != tenant:
            raise ConfigurationError(
                f"{owner}: tenants {other!r} and {tenant!r} {shared} "
                f"(prefixes {prefixes[other]!r} and {prefix!r})"
            )
    return prefixes


def tables(
    store_class: Callable[..., FailoverStore],
    shared_engine: Callable[[Any], tuple[Any, bool]],
    check_prefix: Callable[[str], object],
    url_or_engine: Any,
    prefixes: Mapping[str, str] | None,
    /,
    **store_kwargs: Any,
) -> TenantStores:
    """One table per tenant through one engine: see `stores.backends.sql.per_tenant_tables`.
    ``shared_engine(url_or_engine)`` gives the engine and whether it was made here (then
    disposed of on close); ``check_prefix`` refuses a table prefix with `ConfigurationError`."""
    owner = "per_tenant_tables"

    def check(prefix: str, tenant: str) -> None:
        try:
            check_prefix(prefix)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{owner}: tenant {tenant!r}: {exc}") from None

    # SQLite table names ignore case: two prefixes differing only by case are one table.
    mapping = (
        None
        if prefixes is None
        else distinct_prefixes(owner, prefixes, check, True, "would share a table")
    )
    engine, owned = shared_engine(url_or_engine)
    of = prefix_of(owner, "table prefix", mapping, lambda tenant: f"{tenant}_")
    return TenantStores(
        lambda tenant: store_class(engine, table_prefix=of(tenant), tenant=tenant, **store_kwargs),
        True,
        f"{owner}({masked_url(engine.url)!r})",
        engine.dispose if owned else None,
    )


def databases(
    store_class: Callable[..., FailoverStore],
    check_url: Callable[[str], object],
    url_template: str,
    /,
    **store_kwargs: Any,
) -> TenantStores:
    """One database per tenant: see `failover.stores.backends.sql.per_tenant_databases`.
    ``check_url`` refuses a URL with `ConfigurationError` (connecting to nothing)."""
    if not isinstance(url_template, str) or "{tenant}" not in url_template:
        shown = masked_url(url_template) if isinstance(url_template, str) else url_template
        raise ConfigurationError(
            f"per_tenant_databases: the URL template must contain '{{tenant}}', got {shown!r}"
        )
    check_url(url_template.replace("{tenant}", "tenant"))
    return TenantStores(
        lambda tenant: store_class(
            url_template.replace("{tenant}", safe_tenant_id(tenant)), tenant=tenant, **store_kwargs
        ),
        True,
        f"per_tenant_databases({masked_url(url_template)!r})",
    )


def key_prefixes(
    store_class: Callable[..., FailoverStore],
    shared: Any,
    check_prefix: Callable[[str, str], object],
    prefixes: Mapping[str, str] | None,
    /,
    **store_kwargs: Any,
) -> TenantStores:
    """One key prefix per tenant through one client: see `RedisStore.per_tenant`. ``shared``
    is the client the stores share (`stores.backends.redis.sharing.SharedClient`: the client,
    how it shows, the base prefix, its async clients and how to close them);
    ``check_prefix(prefix, owner)`` refuses a key prefix with `ConfigurationError`."""
    owner = "RedisStore.per_tenant"
    base = shared.base
    check_prefix(base, owner)
    mapping = None
    if prefixes is not None:
        mapping = distinct_prefixes(
            owner,
            prefixes,
            lambda prefix, tenant: check_prefix(prefix, f"{owner}: tenant {tenant!r}"),
            False,
            "share the prefix",
        )
    store_class(shared.client, base, **store_kwargs)  # bad options fail now, not at a tenant
    of = prefix_of(owner, "key prefix", mapping, lambda tenant: f"{base}t:{tenant}:")

    def make(tenant: str) -> FailoverStore:
        store: Any = store_class(shared.client, of(tenant), tenant=tenant, **store_kwargs)
        if shared.aio is not None:
            store.share_async(shared.aio)
        return store  # type: ignore[no-any-return]

    return TenantStores(make, True, f"{owner}({shared.shown}, prefix={base!r})", shared.close)
