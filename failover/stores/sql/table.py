"""The table of a `SqlStore`: its name from the table prefix, its columns, and its creation.

The table ``{prefix}failover_store``: ``name``, ``key`` (the primary key), ``as_of`` and
``expire_on`` (microseconds since the Unix epoch, UTC: exact, indexable and the same on every
database), ``payload`` (the codec's text, with its marker, possibly encrypted) and
``payload_type`` (the stored value's type name), with an index on ``expire_on``.
"""

from __future__ import annotations

import re
import zlib

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ...errors import ConfigurationError, StoreError
from .engine import first_line

__all__ = ["VALUES", "create_table", "make_table", "split_prefix"]

# A schema part, then the table prefix; lengths keep every identifier (the index name is the
# longest) within PostgreSQL's 63 characters, past which it would silently truncate them.
_PREFIX = re.compile(r"(?:([A-Za-z_][A-Za-z0-9_]{0,62})\.)?([A-Za-z0-9_]{0,32})")
_TABLE = "failover_store"
VALUES = ("as_of", "expire_on", "payload", "payload_type")
"""The columns an upsert replaces (the others are the primary key)."""


def split_prefix(table_prefix: object) -> tuple[str | None, str]:
    """A table prefix as ``(schema or None, prefix)``.

    Raises:
        ConfigurationError: not letters, digits and underscores (at most 32), optionally after
            ``schema.``.
    """
    match = _PREFIX.fullmatch(table_prefix) if isinstance(table_prefix, str) else None
    if match is None:
        raise ConfigurationError(
            f"SqlStore: table_prefix must be letters, digits and underscores (at most 32), "
            f"optionally after 'schema.', got {table_prefix!r}"
        )
    return match.group(1), match.group(2)


def make_table(schema: str | None, prefix: str) -> sa.Table:
    """The store's table (not created)."""
    name = f"{prefix}{_TABLE}"
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        # NOT NULL since rows are bound to their times; a table made before (NULL allowed) is
        # read as it is, a NULL time being a corrupt row.
        sa.Column("as_of", sa.BigInteger, nullable=False),
        sa.Column("expire_on", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("payload_type", sa.String(255), nullable=False),
        sa.Index(f"{name}_expire_on", "expire_on"),
        schema=schema,
    )


def create_table(engine: sa.Engine, table: sa.Table, where: str) -> None:
    """Create ``table`` and its index when missing (and the schema, on PostgreSQL); safe to run
    from several processes at once.

    Raises:
        StoreError: the database refused or could not be reached.
    """
    dialect = engine.dialect.name
    try:
        with engine.begin() as conn:
            if dialect == "postgresql":
                # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog.
                lock = zlib.crc32(table.fullname.encode())
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock})
                if table.schema:
                    conn.execute(sa.schema.CreateSchema(table.schema, if_not_exists=True))
            if dialect in ("postgresql", "sqlite"):
                conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
                for index in table.indexes:
                    conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
            else:
                table.metadata.create_all(conn, checkfirst=True)
    except sa_exc.SQLAlchemyError as exc:
        raise StoreError(f"{where}: cannot create the table: {first_line(exc)}") from exc
