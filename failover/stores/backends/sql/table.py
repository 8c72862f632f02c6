"""The table of a `SqlStore`: its name from the table prefix, its columns, and its creation.

The table ``{prefix}failover_store``: ``name``, ``key`` (the primary key), ``as_of`` and
``expire_on`` (microseconds since the Unix epoch, UTC: exact, indexable and the same on every
database), ``payload`` (the codec's text, with its marker, possibly encrypted) and
``payload_type`` (the stored value's type name), ``label`` (an entry's readable label, NULL
unless its failover opts in), with an index on ``expire_on``.

A table made by an earlier version has no ``label`` column: a store that creates its table adds
it (``ALTER TABLE``); one that may not (``create_table=False``, or the database refuses) works
on the table as it is, without labels (`label_column`).
"""

from __future__ import annotations

import logging
import re
import zlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ....errors import ConfigurationError, StoreError
from .engine import first_line

__all__ = [
    "LABEL",
    "create_table",
    "label_column",
    "label_of",
    "make_table",
    "replaced",
    "split_prefix",
]

log = logging.getLogger(__name__)

# A schema part, then the table prefix; lengths keep every identifier (the index name is the
# longest) within PostgreSQL's 63 characters, past which it would silently truncate them.
_PREFIX = re.compile(r"(?:([A-Za-z_][A-Za-z0-9_]{0,62})\.)?([A-Za-z0-9_]{0,32})")
_TABLE = "failover_store"
LABEL = "label"
_LABEL_TYPE = sa.String(255)  # labels are at most failover.labels.LABEL_MAX (200) characters


def label_of(table: sa.Table) -> list[sa.Column[Any]]:
    """The ``label`` column, in a list: empty for a table of an earlier version."""
    return [table.c[LABEL]] if LABEL in table.c else []


def replaced(table: sa.Table) -> tuple[str, ...]:
    """The columns an upsert replaces (the others are the primary key)."""
    values = ("as_of", "expire_on", "payload", "payload_type")
    return (*values, LABEL) if LABEL in table.c else values


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


def make_table(schema: str | None, prefix: str, label: bool = True) -> sa.Table:
    """The store's table (not created); ``label``: with the ``label`` column (a table of an
    earlier version has none)."""
    name = f"{prefix}{_TABLE}"
    labels = [sa.Column(LABEL, _LABEL_TYPE, nullable=True)] if label else []
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
        *labels,
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


def _has_label(engine: sa.Engine, table: sa.Table, where: str) -> bool:
    try:
        columns = sa.inspect(engine).get_columns(table.name, schema=table.schema)
    except sa_exc.NoSuchTableError:
        return True  # no table yet: one made later is made with the column
    except sa_exc.SQLAlchemyError as exc:
        raise StoreError(f"{where}: cannot read the table's columns: {first_line(exc)}") from exc
    return any(c["name"] == LABEL for c in columns)


def label_column(engine: sa.Engine, table: sa.Table, where: str, add: bool) -> bool:
    """Whether ``table`` has the ``label`` column; with ``add``, added to a table of an earlier
    version when missing. A database that refuses (no right to alter the table) leaves the
    table as it is, logged: the store then works without labels.

    Raises:
        StoreError: the database could not be reached.
    """
    if _has_label(engine, table, where):
        return True
    why = "the store does not create its table"
    if add:
        dialect = engine.dialect
        alter = (
            f"ALTER TABLE {dialect.identifier_preparer.format_table(table)} ADD COLUMN "
            f"{'IF NOT EXISTS ' if dialect.name == 'postgresql' else ''}"
            f"{dialect.identifier_preparer.quote(LABEL)} {_LABEL_TYPE.compile(dialect=dialect)}"
        )
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(alter))
            return True
        except sa_exc.SQLAlchemyError as exc:
            if _has_label(engine, table, where):  # another process added it meanwhile
                return True
            why = f"the database refused to add it: {first_line(exc)}"
    log.warning(
        "%s: the table, made by an earlier version, has no column %r (%s): entries are stored "
        "without labels",
        where,
        LABEL,
        why,
    )
    return False
