"""`SqlStore`: entries in one SQL table, through SQLAlchemy.

- ``engine``: `make_engine`, the engine set-up (pools, SQLite's settings, fork safety);
- ``table``: the table, its prefix and its creation;
- ``statements``: one `Statements` object per driver path (SQLAlchemy Core everywhere);
- ``psycopg``: the PostgreSQL fast path (psycopg directly);
- ``store``: `SqlStore` itself;
- ``urls``: the store's own options in a URL (row options) and the factories' checks;
- ``tenants``: the per-tenant factories.
"""

from .engine import make_engine
from .store import SqlStore
from .tenants import per_tenant_databases, per_tenant_tables

__all__ = ["SqlStore", "make_engine", "per_tenant_databases", "per_tenant_tables"]
