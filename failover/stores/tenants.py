"""The per-tenant factories of the SQL and Redis stores, and the checks they share.

- `tables`: one SQL table per tenant, one shared engine (`failover.stores.sql.per_tenant_tables`);
- `databases`: one SQL database per tenant (`failover.stores.sql.per_tenant_databases`);
- `key_prefixes`: one Redis key prefix per tenant, one shared client (`RedisStore.per_tenant`).

Each takes the store class it makes (so that this module imports no store module, and the store
modules can offer their factory). The in-process stores' factory (`per_tenant_stores`) and the
engine's pick from a store URL (`per_tenant`) are in `failover.stores.factory`, beside
`make_store` which they use. A tenant id that ends up in a table name, a file name or a key prefix
must match `failover.stores.tenant.TENANT_ID`; a mapping of prefixes is checked whole, before the
first tenant comes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError, StoreError
from .base import FailoverStore
from .tenant import SHOWN, TenantStores, safe_tenant_id

__all__ = ["databases", "distinct_prefixes", "key_prefixes", "prefix_of", "tables"]


def prefix_of(
    owner: str, what: str, prefixes: dict[str, str] | None, default: Callable[[str], str]
) -> Callable[[str], str]:
    """The prefix of a tenant: from ``prefixes`` (a tenant not listed is refused with
    `StoreError` naming ``owner`` and ``what``), or ``default(tenant id)`` when there is no
    mapping, for ids matching `failover.stores.tenant.TENANT_ID` (others are refused)."""

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
    url_or_engine: Any,
    prefixes: Mapping[str, str] | None,
    **store_kwargs: Any,
) -> TenantStores:
    """One table per tenant through one engine: see `failover.stores.sql.per_tenant_tables`."""
    import sqlalchemy as sa

    from .sql.engine import make_engine
    from .sql.table import split_prefix

    owner = "per_tenant_tables"

    def check(prefix: str, tenant: str) -> None:
        try:
            split_prefix(prefix)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{owner}: tenant {tenant!r}: {exc}") from None

    # SQLite table names ignore case: two prefixes differing only by case are one table.
    mapping = (
        None
        if prefixes is None
        else distinct_prefixes(owner, prefixes, check, True, "would share a table")
    )
    owned = not isinstance(url_or_engine, sa.Engine)
    engine = url_or_engine if isinstance(url_or_engine, sa.Engine) else make_engine(url_or_engine)
    of = prefix_of(owner, "table prefix", mapping, lambda tenant: f"{tenant}_")
    return TenantStores(
        lambda tenant: store_class(engine, table_prefix=of(tenant), **store_kwargs),
        True,
        f"{owner}({engine.url.render_as_string(hide_password=True)!r})",
        engine.dispose if owned else None,
    )


def databases(
    store_class: Callable[..., FailoverStore], url_template: str, **store_kwargs: Any
) -> TenantStores:
    """One database per tenant: see `failover.stores.sql.per_tenant_databases`."""
    from .sql.engine import make_engine, masked

    if not isinstance(url_template, str) or "{tenant}" not in url_template:
        shown = masked(url_template) if isinstance(url_template, str) else url_template
        raise ConfigurationError(
            f"per_tenant_databases: the URL template must contain '{{tenant}}', got {shown!r}"
        )
    make_engine(url_template.replace("{tenant}", "tenant")).dispose()  # connects to nothing
    return TenantStores(
        lambda tenant: store_class(
            url_template.replace("{tenant}", safe_tenant_id(tenant)), **store_kwargs
        ),
        True,
        f"per_tenant_databases({masked(url_template)!r})",
    )


def key_prefixes(
    store_class: Callable[..., FailoverStore],
    url_or_client: Any,
    prefixes: Mapping[str, str] | None,
    **store_kwargs: Any,
) -> TenantStores:
    """One key prefix per tenant through one client: see `RedisStore.per_tenant`."""
    import redis
    from redis.cluster import RedisCluster

    from .redis.client import DEFAULT_PREFIX, checked_prefix, masked, split_url
    from .redis.topology import LazyCluster, store_client

    owner = "RedisStore.per_tenant"
    base = store_kwargs.pop("prefix", DEFAULT_PREFIX)
    socket_timeout = store_kwargs.pop("socket_timeout", 1.0)
    close: Callable[[], None] | None = None
    shared_async: Any = None  # the tenants share one async client per loop, as one sync client
    if isinstance(url_or_client, str):
        from .redis.aio import AsyncClients, async_url

        url, url_prefix = split_url(url_or_client)
        base = url_prefix if url_prefix is not None else base
        cluster = store_kwargs.pop("cluster", False)
        client = store_client(url, socket_timeout, cluster)
        shown = masked(url)
        if async_url(url, cluster) is not None:
            shared_async = AsyncClients(url, socket_timeout, f"{owner}({shown})")

        def close() -> None:
            client.close()
            if shared_async is not None:
                shared_async.close()

    elif isinstance(url_or_client, redis.Redis | RedisCluster | LazyCluster):
        client, shown = url_or_client, repr(url_or_client)
    else:
        raise ConfigurationError(
            f"{owner}: expected a redis:// URL or a redis.Redis client, got {url_or_client!r}"
        )
    checked_prefix(base, owner)
    mapping = None
    if prefixes is not None:
        mapping = distinct_prefixes(
            owner,
            prefixes,
            lambda prefix, tenant: checked_prefix(prefix, f"{owner}: tenant {tenant!r}"),
            False,
            "share the prefix",
        )
    store_class(client, base, **store_kwargs)  # bad options fail now, not at the first tenant
    of = prefix_of(owner, "key prefix", mapping, lambda tenant: f"{base}t:{tenant}:")

    def make(tenant: str) -> FailoverStore:
        store: Any = store_class(client, of(tenant), **store_kwargs)
        if shared_async is not None:
            store.share_async(shared_async)
        return store  # type: ignore[no-any-return]

    return TenantStores(make, True, f"{owner}({shown}, prefix={base!r})", close)
