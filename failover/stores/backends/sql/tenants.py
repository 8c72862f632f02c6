"""The per-tenant factories of `SqlStore` (the stores are made in
`failover.stores.layers.tenant_stores`): one table per tenant through one engine, or one database
per tenant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ...layers import tenant_stores
from ...layers.tenant_stores import TenantStores
from .store import SqlStore
from .urls import check_settings, check_url

__all__ = ["per_tenant_databases", "per_tenant_tables"]


def per_tenant_tables(
    url_or_engine: str | sa.URL | Engine,
    prefixes: Mapping[str, str] | None = None,
    **store_kwargs: Any,
) -> TenantStores:
    """One table per tenant, in one database, through one shared SQLAlchemy engine.

    Args:
        url_or_engine: a SQLAlchemy URL, or an `sqlalchemy.Engine` (never disposed here).
        prefixes: the table prefix of each tenant, e.g. ``{"acme": "acme_"}``; a tenant not listed
            is refused with `StoreError`. ``None``: the prefix is ``f"{tenant}_"``, for tenant ids
            matching `failover.stores.layers.routing.TENANT_ID`.
        **store_kwargs: passed to each `SqlStore` (``codec``, ``cipher``, ``allowed_types``...).

    Returns:
        A factory ``tenant -> SqlStore`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: a prefix `SqlStore` refuses (checked here, for every tenant, before
            any SQL runs), two tenants whose tables would be one table, or a bad URL.
    """
    return SqlStore.per_tenant(url_or_engine, prefixes, **store_kwargs)


def per_tenant_databases(url_template: str, **store_kwargs: Any) -> TenantStores:
    """One database per tenant: ``url_template`` with ``{tenant}`` replaced by the tenant id.

    For example ``"sqlite:////var/lib/app/failover-{tenant}.db"`` (one SQLite file per tenant)
    or ``"postgresql+psycopg://app@db/failover_{tenant}"``. Tenant ids must match
    `failover.stores.layers.routing.TENANT_ID`.

    Args:
        url_template: a SQLAlchemy URL containing ``{tenant}``.
        **store_kwargs: passed to each `SqlStore`.

    Returns:
        A factory ``tenant -> SqlStore`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: the template has no ``{tenant}``, or is not a URL `SqlStore` takes
            (checked here, before the first tenant comes).
    """
    check_settings("per_tenant_databases", store_kwargs)
    return tenant_stores.databases(SqlStore, check_url, url_template, **store_kwargs)
