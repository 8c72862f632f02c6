"""Control over entries in a `SqlStore`: every entry of a name deleted (``.invalidate_all()``),
the entries of a tag (``engine.invalidate_tag``), an entry's fresh window ended (``.expire()``),
each one statement.

Tags live in a table beside the store's, ``{prefix}failover_tags``: ``tag``, ``name``, ``key``
(the primary key, in that order: the rows of a tag are one range of it). A write with tags
inserts its rows (one batch, ``ON CONFLICT DO NOTHING``) before its entries, so that an entry
is never stored untagged; a write without tags does not touch the table, and costs what it did.
A tag row stays when its entry goes (deleted, expired, invalidated): the entry of a key carries
the tags its failover's ``tags=`` gives for the key's arguments, so a later write of the key
brings the same rows; `clean` removes the rows whose entry is gone. The tags table is created
with the store's (``create_table=True``, also beside a table of an earlier version); with
``create_table=False`` it must exist for a failover with ``tags=`` (see docs/entries.md).

``expire`` puts `failover.serialization.rows.ENDED` in front of the payload text, in place
(``UPDATE ... SET payload = '!' || payload``): no column to add, nothing to decode, and a row
deleted meanwhile stays deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ....errors import StoreError
from ....serialization.rows import ENDED
from .engine import first_line

__all__ = ["SqlControl", "make_tags_table"]

_TAGS = "failover_tags"


def make_tags_table(schema: str | None, prefix: str) -> sa.Table:
    """The tags table beside a store's (not created)."""
    return sa.Table(
        f"{prefix}{_TAGS}",
        sa.MetaData(),
        sa.Column("tag", sa.String(255), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        schema=schema,
    )


class SqlControl:
    """The statements of the control over entries of one store's table.

    Args:
        engine: the store's engine.
        table: the store's table.
        tags: its tags table.
        where: the store, as error messages name it.
    """

    def __init__(self, engine: sa.Engine, table: sa.Table, tags: sa.Table, where: str) -> None:
        self.engine = engine
        self.table = table
        self.tags = tags
        self.where = where
        c, t = table.c, tags.c
        dialect = engine.dialect.name
        self._delete_all = table.delete().where(c.name == sa.bindparam("n"))
        tagged = sa.exists().where(t.tag == sa.bindparam("tag"), t.name == c.name, t.key == c.key)
        self._delete_tagged = table.delete().where(tagged)
        self._expire = (
            table.update()
            .where(c.name == sa.bindparam("n"), c.key == sa.bindparam("k"))
            .values(
                payload=sa.case(
                    (c.payload.startswith(ENDED, autoescape=True), c.payload),
                    else_=sa.literal(ENDED, sa.Text) + c.payload,
                )
            )
        )
        gone = ~sa.exists().where(c.name == t.name, c.key == t.key)
        self._orphans = tags.delete().where(gone)
        self._insert: Any = None
        if dialect in ("postgresql", "sqlite"):
            from sqlalchemy.dialects import postgresql, sqlite

            insert: Any = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}[dialect]
            self._insert = insert(tags).on_conflict_do_nothing()
        self._ready = False  # the tags table is known to exist

    def create(self) -> None:
        """Create the tags table when missing.

        Raises:
            StoreError: the database refused or could not be reached.
        """
        try:
            with self.engine.begin() as conn:
                self.tags.create(conn, checkfirst=True)
        except sa_exc.SQLAlchemyError as exc:
            if not self._exists():  # another process made it meanwhile: fine
                raise StoreError(
                    f"{self.where}: cannot create the tags table: {first_line(exc)}"
                ) from exc
        self._ready = True

    def _exists(self) -> bool:
        try:
            return sa.inspect(self.engine).has_table(self.tags.name, schema=self.tags.schema)
        except sa_exc.SQLAlchemyError:
            return False

    def tag(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """Insert the tag rows ``(tag, name, key)`` not there yet, in one batch.

        Raises:
            StoreError: the tags table is missing (``create_table=False``) or the database
                refused.
        """
        values = [{"tag": tag, "name": name, "key": key} for tag, name, key in dict.fromkeys(rows)]
        if not values:
            return
        try:
            with self.engine.begin() as conn:
                if self._insert is not None:
                    conn.execute(self._insert, values)
                else:  # no portable "do nothing on conflict": replaced instead
                    t = self.tags.c
                    conn.execute(
                        self.tags.delete().where(
                            t.tag == sa.bindparam("b_tag"),
                            t.name == sa.bindparam("b_name"),
                            t.key == sa.bindparam("b_key"),
                        ),
                        [{"b_" + k: v for k, v in row.items()} for row in values],
                    )
                    conn.execute(self.tags.insert(), values)
        except sa_exc.SQLAlchemyError as exc:
            raise StoreError(f"{self.where}: cannot store tags: {first_line(exc)}") from exc

    def delete_all(self, name: str) -> int:
        """Delete every row of ``name``: one statement; the count."""
        with self.engine.begin() as conn:
            return int(conn.execute(self._delete_all, {"n": name}).rowcount)

    def delete_tagged(self, tag: str) -> int:
        """Delete every row carrying ``tag``: one statement; the count.

        Raises:
            StoreError: the tags table is missing, or the database refused.
        """
        try:
            with self.engine.begin() as conn:
                return int(conn.execute(self._delete_tagged, {"tag": tag}).rowcount)
        except sa_exc.SQLAlchemyError as exc:
            raise StoreError(
                f"{self.where}: cannot delete the entries of a tag: {first_line(exc)}"
            ) from exc

    def expire(self, name: str, key: str) -> bool:
        """Mark the row of ``(name, key)`` `ENDED`, in place: one statement; whether a row was
        there."""
        with self.engine.begin() as conn:
            return bool(conn.execute(self._expire, {"n": name, "k": key}).rowcount)

    def clean(self) -> int:
        """Delete the tag rows whose entry is gone (when the tags table exists); the count."""
        if not self._ready and not self._exists():
            return 0
        self._ready = True
        with self.engine.begin() as conn:
            return int(conn.execute(self._orphans).rowcount)
