"""The health rows of a `SqlStore`: one row per publishing process, in a table of their own.

The table ``{prefix}failover_health`` sits beside the entries' table (same schema, same prefix):
``process`` (the primary key), ``published_at`` and ``expire_on`` (microseconds since the Unix
epoch, UTC, as the entries' times) and ``health`` (the row as JSON text). It is created like the
entries' table, on the first publish (when the store creates its table). Each publish replaces
its process's row and deletes the rows expired since (processes that died): the table holds
about one row per live process. Reads skip expired rows, so a dead process is never shown.
"""

from __future__ import annotations

import threading
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ....errors import StoreError
from ....serialization.times import micros
from ...health_rows import ProcessHealth, decoded
from .engine import first_line
from .table import create_table

__all__ = ["SqlHealthRows", "make_health_table"]

_TABLE = "failover_health"


def make_health_table(schema: str | None, prefix: str) -> sa.Table:
    """The health rows' table (not created)."""
    return sa.Table(
        f"{prefix}{_TABLE}",
        sa.MetaData(),
        sa.Column("process", sa.String(64), primary_key=True),
        sa.Column("published_at", sa.BigInteger, nullable=False),
        sa.Column("expire_on", sa.BigInteger, nullable=False),
        sa.Column("health", sa.Text, nullable=False),
        schema=schema,
    )


class SqlHealthRows:
    """`failover.stores.health_rows.HealthRows` in a table beside a `SqlStore`'s.

    Args:
        engine: the store's engine.
        schema: the store's schema (``None``: the default one).
        prefix: the store's table prefix.
        where: the store, as messages name it.
        create: create the table on the first publish when it is missing.
    """

    def __init__(
        self, engine: sa.Engine, schema: str | None, prefix: str, where: str, create: bool
    ) -> None:
        self.engine = engine
        self.table = table = make_health_table(schema, prefix)
        self.where = where
        self._create = create
        self._created = False
        self._lock = threading.Lock()
        c = table.c
        self._select = sa.select(c.health).where(c.expire_on > sa.bindparam("now"))
        self._expired = table.delete().where(c.expire_on <= sa.bindparam("now"))
        self._delete = table.delete().where(c.process == sa.bindparam("p"))
        self._update = table.update().where(c.process == sa.bindparam("p"))
        dialect = engine.dialect.name
        self._upsert: sa.Executable | None = None
        if dialect in ("postgresql", "sqlite"):
            from sqlalchemy.dialects import postgresql, sqlite

            insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
            self._upsert = insert.on_conflict_do_update(
                index_elements=[c.process],
                set_={k: insert.excluded[k] for k in ("published_at", "expire_on", "health")},
            )

    def _ensure_table(self) -> None:
        if self._created or not self._create:
            return
        with self._lock:
            if not self._created:
                create_table(self.engine, self.table, self.where)
                self._created = True

    def publish_health(self, row: ProcessHealth) -> None:
        """Replace the process's row and delete the expired ones, in one transaction.

        Raises:
            StoreError: the database refused or could not be reached.
        """
        self._ensure_table()
        values = {
            "process": row.process,
            "published_at": micros(row.published_at),
            "expire_on": micros(row.expire_on),
            "health": row.to_json(),
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(self._expired, {"now": values["published_at"]})
                if self._upsert is not None:
                    conn.execute(self._upsert, values)
                else:
                    updated = conn.execute(self._update, {"p": row.process, **values})
                    if updated.rowcount == 0:
                        conn.execute(self.table.insert(), values)
        except sa_exc.SQLAlchemyError as exc:
            raise StoreError(f"{self.where}: cannot publish health: {first_line(exc)}") from exc

    def health_rows(self, now: datetime) -> list[ProcessHealth]:
        """The rows not expired at ``now``; none while the table does not exist (no process has
        published yet).

        Raises:
            StoreError: the database refused or could not be reached.
        """
        try:
            with self.engine.connect() as conn:
                texts = conn.execute(self._select, {"now": micros(now)}).scalars().all()
        except sa_exc.SQLAlchemyError as exc:
            if not self._exists():
                return []
            raise StoreError(f"{self.where}: cannot read health rows: {first_line(exc)}") from exc
        return decoded(self.where, texts, now)

    def remove_health(self, process: str) -> None:
        """Delete the process's row.

        Raises:
            StoreError: the database refused or could not be reached.
        """
        try:
            with self.engine.begin() as conn:
                conn.execute(self._delete, {"p": process})
        except sa_exc.SQLAlchemyError as exc:
            if not self._exists():
                return
            raise StoreError(f"{self.where}: cannot remove health: {first_line(exc)}") from exc

    def _exists(self) -> bool:
        try:
            return sa.inspect(self.engine).has_table(self.table.name, schema=self.table.schema)
        except sa_exc.SQLAlchemyError:
            return True  # the database is what failed: say so
