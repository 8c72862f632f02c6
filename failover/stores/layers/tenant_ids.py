"""Tenant ids: which ids may name a table, a file or a key prefix (`TENANT_ID`), and how many
tenants' stores a `failover.stores.layers.routing.MultiTenantStore` keeps open."""

from __future__ import annotations

import re
from typing import Final

from ...errors import ConfigurationError, StoreError

__all__ = ["DEFAULT_MAX_TENANTS", "SHOWN", "TENANT_ID", "check_max_tenants", "safe_tenant_id"]

TENANT_ID: Final = re.compile(r"[a-z0-9_]{1,31}")
"""The tenant ids allowed in table and file names. Lower case only: SQLite table names and the
file names of some file systems ignore case, so ``Acme`` and ``acme`` would share a store. At
most 31 characters: with its ``_``, a table prefix of `SqlStore` is 32 at most."""

SHOWN = 60  # characters of a refused tenant id shown in an error message

DEFAULT_MAX_TENANTS: Final = 1000
"""The tenants' stores a `MultiTenantStore` keeps open at once, unless told otherwise."""


def check_max_tenants(value: object, owner: str) -> int:
    """``value`` as a ``max_tenants`` setting.

    Raises:
        ConfigurationError: not a whole number >= 1 (naming ``owner``).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{owner}: max_tenants must be a whole number >= 1, got {value!r}")
    return value


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
