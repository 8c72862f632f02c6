"""The statements of a `SqlStore`, one strategy object per driver path.

`Statements` is what the store asks of a driver path: read one row, some rows, every row of a
name; upsert rows; delete one. `CoreStatements` runs them through SQLAlchemy Core on every
database (``INSERT ... ON CONFLICT (name, key) DO UPDATE ... WHERE`` on SQLite and PostgreSQL,
an update-then-insert transaction elsewhere; on PostgreSQL ``find_many`` sends the keys as one array
parameter). `psycopg.PsycopgStatements` is the PostgreSQL fast path. Rows come back as
``(payload, payload_type, as_of, expire_on)``, then ``label`` when the table has the column,
with the key first for ``find_many`` and ``find_all``.

Entries only move forward: every upsert replaces a row only when the row's ``as_of`` is not
after the new one's (``WHERE {table}.as_of <= excluded.as_of``: an older write leaves the row
as it is), in the same one statement per batch, so two processes racing on a key end with the
entry of the call that started last. Rows written by earlier versions have an ``as_of`` too
(when they were stored): they compare as any row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ....errors import StoreError
from .engine import first_line
from .table import label_of, replaced

__all__ = ["CoreStatements", "Statements"]

_IN_CHUNK = 1_000  # keys per IN (...) list where the database's parameter limit is unknown


class Statements(Protocol):
    """One driver path's statements over a store's table."""

    def find(self, name: str, key: str) -> Any:
        """The row of ``(name, key)``, or ``None``."""
        ...

    def find_many(self, name: str, keys: list[str]) -> Sequence[Any]:
        """The rows of those of ``keys`` that are stored, key first."""
        ...

    def find_all(self, name: str) -> Sequence[Any]:
        """Every row of ``name``, key first, by key."""
        ...

    def delete(self, name: str, key: str) -> None:
        """Remove the row of ``(name, key)`` if present."""
        ...

    def delete_many(self, name: str, keys: list[str]) -> None:
        """Remove the rows of ``name`` under ``keys`` (distinct), in one statement."""
        ...

    def upsert(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert ``rows`` (no two with one name and key), or replace the stored rows that are
        not newer (their ``as_of`` not after the row's), atomically; how many were not written
        for a newer stored row."""
        ...

    def close(self) -> None:
        """Give back what the path keeps (connections) when the store owns the engine."""
        ...


def _upsert(table: sa.Table, dialect: str) -> sa.Executable | None:
    """The single-statement upsert of ``dialect``, or ``None`` where there is none portable."""
    from sqlalchemy.dialects import postgresql, sqlite

    inserts: dict[str, Any] = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}
    if dialect not in inserts:
        return None
    stmt = inserts[dialect](table)
    upsert: sa.Executable = stmt.on_conflict_do_update(
        index_elements=[table.c.name, table.c.key],
        set_={c: stmt.excluded[c] for c in replaced(table)},
        # Entries only move forward: a row stored by a call that started later stays.
        where=table.c.as_of <= stmt.excluded.as_of,
    )
    return upsert


def _driver_upsert(
    upsert: sa.Executable | None, dialect: sa.Dialect
) -> tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]] | None:
    """SQLite's upsert as the driver takes it: its SQL, compiled once, and what makes a row's
    parameters in its order; ``None`` elsewhere, or where a column's type converts its value
    (SQLAlchemy's execution does that)."""
    if (
        not isinstance(upsert, sa.ClauseElement)
        or dialect.name != "sqlite"
        or dialect.paramstyle != "qmark"
    ):
        return None
    compiled: Any = upsert.compile(dialect=dialect)
    order = compiled.positiontup
    binds = compiled.binds
    # itemgetter of two names or more makes a tuple: an upsert has them (name, key, ...).
    if len(order) < 2 or any(binds[n].type._cached_bind_processor(dialect) for n in order):
        return None
    return str(compiled), itemgetter(*order)


class CoreStatements:
    """The statements through SQLAlchemy Core: every database SQLAlchemy supports.

    Args:
        engine: the store's engine.
        table: the store's table.
    """

    def __init__(self, engine: sa.Engine, table: sa.Table) -> None:
        self.engine = engine
        self.table = table
        dialect = engine.dialect.name
        c = table.c
        self._upsert = _upsert(table, dialect)
        # SQLite: the upsert's rows go to the driver as they are (`exec_driver_sql`), past
        # SQLAlchemy's parameter processing, which costs more than SQLite's own work per row.
        self._driver_upsert = _driver_upsert(self._upsert, engine.dialect)
        self._replaced = replaced(table)
        self._update = table.update().where(
            c.name == sa.bindparam("b_name"),
            c.key == sa.bindparam("b_key"),
            c.as_of <= sa.bindparam("b_as_of"),
        )
        self._exists = sa.select(c.key).where(
            c.name == sa.bindparam("b_name"), c.key == sa.bindparam("b_key")
        )
        columns = (c.payload, c.payload_type, c.as_of, c.expire_on, *label_of(table))
        self.columns = columns  # what a read selects after the key, in this order
        by_name = c.name == sa.bindparam("n")
        self._find = sa.select(*columns).where(by_name, c.key == sa.bindparam("k"))
        self._find_all = sa.select(c.key, *columns).where(by_name).order_by(c.key)
        self._delete = table.delete().where(by_name, c.key == sa.bindparam("k"))
        self._clean = table.delete().where(c.expire_on <= sa.bindparam("now"))
        # A NULL expiry (possible only in a table of an earlier version) is a corrupt row. Its
        # own statement: OR-ed into the range, SQLite scans the table instead of the index.
        self._clean_null = table.delete().where(c.expire_on.is_(None))
        # A batch: the keys of at most `batch` expired rows (read on the expiry index), deleted
        # by primary key. Not every database takes LIMIT in such a subquery: those delete all
        # at once.
        self._batched = dialect in ("sqlite", "postgresql")
        self._rest = dialect == "sqlite"  # PostgreSQL's writers wait for rows, not the table
        self._expired_keys = sa.select(c.name, c.key).where(c.expire_on <= sa.bindparam("now"))
        self._table_sql = engine.dialect.identifier_preparer.format_table(table)
        self._delete_many = table.delete().where(
            by_name, c.key.in_(sa.bindparam("keys", expanding=True))
        )
        self.single = engine  # for operations that are one statement
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import ARRAY

            # The keys travel as one array parameter. Each is looked up in the primary key
            # (LIMIT 1 keeps the planner from turning the lookups into a scan of every entry of
            # the name, which `key = ANY(:keys)` gets from a generic plan: 100x slower).
            keys = sa.bindparam("keys", type_=ARRAY(sa.String))
            wanted = sa.func.unnest(keys).table_valued("key").render_derived(name="wanted")
            found = (
                sa.select(c.key, *columns)
                .where(by_name, c.key == wanted.c.key)
                .limit(1)
                .lateral("found")
            )
            self._find_many = sa.select(found).select_from(wanted.join(found, sa.true()))
            self.chunk = 0  # one array parameter: no limit
            # One statement is atomic by itself: autocommit spares the round trips of BEGIN and
            # COMMIT (or ROLLBACK, after a read).
            self.single = engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            keys = sa.bindparam("keys", expanding=True)
            self._find_many = sa.select(c.key, *columns).where(by_name, c.key.in_(keys))
            self.chunk = _IN_CHUNK

    def learn_limits(self, where: str) -> None:
        """Learn SQLite's parameter limit (``find_many`` chunks keys by it).

        Raises:
            StoreError: the database cannot be reached.
        """
        if self.engine.dialect.name != "sqlite":
            return
        import sqlite3

        try:
            with self.engine.connect() as conn:
                dbapi_connection: Any = conn.connection.dbapi_connection
                limit = int(dbapi_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
        except sa_exc.SQLAlchemyError as exc:
            raise StoreError(f"{where}: cannot connect: {first_line(exc)}") from exc
        self.chunk = limit - 1  # one parameter is the name

    def upsert(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert ``rows``, or replace the stored rows not newer than them: one statement (one
        batch) where the database has an upsert, else an update-then-insert transaction, run
        again when another writer inserted one of the keys meanwhile. How many rows a newer
        stored row kept out (the rows the statement did not change)."""
        if self._driver_upsert is not None:
            sql, parameters = self._driver_upsert
            with self.engine.begin() as conn:
                if len(rows) == 1:
                    changed = conn.exec_driver_sql(sql, parameters(rows[0])).rowcount
                else:
                    changed = conn.exec_driver_sql(sql, list(map(parameters, rows))).rowcount
            return len(rows) - changed if 0 <= changed <= len(rows) else 0
        if self._upsert is not None:
            if len(rows) == 1:
                with self.single.begin() as conn:
                    changed = conn.execute(self._upsert, rows[0]).rowcount
            else:
                # A batch is many statements on some drivers: one transaction.
                with self.engine.begin() as conn:
                    changed = conn.execute(self._upsert, list(rows)).rowcount
            # A driver that cannot count (-1) says nothing: none counted.
            return len(rows) - changed if 0 <= changed <= len(rows) else 0
        try:
            return self._portable_upsert(rows)
        except sa_exc.IntegrityError:
            return self._portable_upsert(rows)  # another writer inserted one of the keys

    def _portable_upsert(self, rows: Sequence[dict[str, Any]]) -> int:
        """Update each row not newer, then insert those that were not there, in one
        transaction; how many a newer stored row kept out."""
        kept = 0
        with self.engine.begin() as conn:
            missing = []
            for row in rows:
                ident = {"b_name": row["name"], "b_key": row["key"]}
                values = {c: row[c] for c in self._replaced}
                result = conn.execute(self._update, {**ident, "b_as_of": row["as_of"], **values})
                if result.rowcount != 0:
                    continue
                if conn.execute(self._exists, ident).first() is None:
                    missing.append(row)
                else:
                    kept += 1  # there, and newer: left as it is
            if missing:
                conn.execute(self.table.insert(), missing)
        return kept

    def find(self, name: str, key: str) -> Any:
        """The row of ``(name, key)``, or ``None``."""
        with self.single.connect() as conn:
            return conn.execute(self._find, {"n": name, "k": key}).first()

    def find_many(self, name: str, keys: list[str]) -> list[Any]:
        """The rows of those of ``keys`` that are stored, key first: one statement, chunked
        only past the database's parameter limit."""
        size = self.chunk or len(keys)
        with self.single.connect() as conn:
            if size >= len(keys):  # one statement, its rows fetched at once (not row by row)
                return list(conn.execute(self._find_many, {"n": name, "keys": keys}).all())
            return [
                row
                for i in range(0, len(keys), size)
                for row in conn.execute(
                    self._find_many, {"n": name, "keys": keys[i : i + size]}
                ).all()
            ]

    def find_all(self, name: str) -> Sequence[Any]:
        """Every row of ``name``, key first, by key."""
        with self.single.connect() as conn:
            return conn.execute(self._find_all, {"n": name}).all()

    def delete(self, name: str, key: str) -> None:
        """Remove the row of ``(name, key)`` if present."""
        with self.single.begin() as conn:
            conn.execute(self._delete, {"n": name, "k": key})

    def delete_many(self, name: str, keys: list[str]) -> None:
        """Remove the rows of ``name`` under ``keys``: one statement (chunked only past the
        database's parameter limit), one transaction."""
        size = self.chunk or _IN_CHUNK
        with self.engine.begin() as conn:
            for i in range(0, len(keys), size):
                conn.execute(self._delete_many, {"n": name, "keys": keys[i : i + size]})

    def _clean_batch(self, batch: int) -> sa.Executable:
        """The delete of one batch of at most ``batch`` expired rows."""
        if self.engine.dialect.name == "sqlite":
            # By rowid: the subquery reads the expiry index, the delete goes straight to rows.
            t = self._table_sql
            return sa.text(
                f"DELETE FROM {t} WHERE rowid IN "
                f"(SELECT rowid FROM {t} WHERE expire_on <= :now LIMIT {int(batch)})"
            )
        c = self.table.c
        return self.table.delete().where(
            sa.tuple_(c.name, c.key).in_(self._expired_keys.limit(batch))
        )

    def clean(self, now: int, batch: int) -> int:
        """Delete the rows expired at ``now`` (microseconds), ``batch`` rows per transaction
        where the database allows it (on SQLite resting between batches as long as each took);
        then those with a NULL expiry. The count deleted."""
        removed = 0
        if self._batched:
            delete = self._clean_batch(batch)
            while True:
                started = time.monotonic()
                with self.engine.begin() as conn:  # committed: the write lock is free again
                    count = conn.execute(delete, {"now": now}).rowcount
                removed += count
                if count < batch:
                    break
                if self._rest:
                    # SQLite has one write lock, and a waiting writer polls for it with growing
                    # sleeps: resting as long as the batch held it lets the writer in within
                    # about one batch (230-850 ms at worst without, in bench/cleanup.py).
                    time.sleep(time.monotonic() - started)
        else:
            with self.engine.begin() as conn:
                removed += conn.execute(self._clean, {"now": now}).rowcount
        with self.engine.begin() as conn:
            removed += conn.execute(self._clean_null).rowcount
        return int(removed)

    def close(self) -> None:
        """Nothing kept: the engine's pool holds the connections."""
