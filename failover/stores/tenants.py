"""The checks every per-tenant store factory shares: a mapping of tenant prefixes checked whole,
and the prefix of one tenant.

The factories themselves: `failover.stores.factory.per_tenant_stores` (in-process stores),
`failover.stores.sql.per_tenant_tables` and `per_tenant_databases`, `RedisStore.per_tenant`; the
engine picks one from its store URL with `failover.stores.factory.per_tenant`. A tenant id that
ends up in a table name, a file name or a key prefix must match
`failover.stores.tenant.TENANT_ID`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import ConfigurationError, StoreError
from .tenant import SHOWN, safe_tenant_id

__all__ = ["distinct_prefixes", "prefix_of"]


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
