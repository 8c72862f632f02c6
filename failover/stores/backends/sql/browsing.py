"""Browsing a `SqlStore`'s table: names, keyset pages, per-name summaries.

A page is one select on the primary key ``(name, key)``: ``WHERE name = :n AND key > :after
ORDER BY key LIMIT :limit``, an index range read of the page's rows whatever the page's position.
Rows written by hand (times out of range or not numbers, a binary or NULL payload, a name or key
that is not text) are listed as they are, never an error: listing is what one does on a suspect
table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ....serialization.times import micros, time_or_none
from ...browsing import PREVIEW, Page, StoredEntry, Summary
from .table import label_of

__all__ = ["SqlBrowsing"]


class SqlBrowsing:
    """The browsing statements of one table.

    Args:
        engine: the engine (or an autocommit view of it) the selects run on.
        table: the store's table.
    """

    def __init__(self, engine: sa.Engine, table: sa.Table) -> None:
        self.engine = engine
        c = table.c
        self._names = sa.select(c.name).distinct().order_by(c.name)
        columns = (
            c.key,
            c.as_of,
            c.expire_on,
            sa.func.length(c.payload),
            c.payload_type,
            sa.func.substr(c.payload, 1, PREVIEW),
            *label_of(table),
        )
        by_name = c.name == sa.bindparam("n")
        self._first = sa.select(*columns).where(by_name).order_by(c.key)
        self._after = self._first.where(c.key > sa.bindparam("after"))
        self._count = sa.select(sa.func.count()).where(by_name)
        self._summary = sa.select(
            sa.func.count(),
            sa.func.sum(sa.case((c.expire_on <= sa.bindparam("now"), 1), else_=0)),
            sa.func.min(c.as_of),
            sa.func.max(c.as_of),
            sa.func.sum(sa.func.length(c.payload)),
        ).where(by_name)

    def names(self) -> list[str]:
        """Every name that has rows, sorted."""
        with self.engine.connect() as conn:
            return [_text(name) for name in conn.execute(self._names).scalars()]

    def page_query(self, after: str | None, limit: int) -> sa.Select[Any]:
        """The select of a page (for its plan: ``EXPLAIN QUERY PLAN`` in the tests)."""
        query = self._first if after is None else self._after
        return query.limit(limit + 1)

    def page(self, name: str, after: str | None, limit: int) -> Page:
        """Up to ``limit`` rows of ``name`` after the key ``after``, by key (one more is read
        to know whether a next page exists)."""
        params: dict[str, Any] = {"n": name, "after": after}
        with self.engine.connect() as conn:
            rows = conn.execute(self.page_query(after, limit), params).all()
        entries = [_entry(name, row) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(entries, entries[-1].key if more and entries else None)

    def count(self, name: str) -> int:
        """How many rows ``name`` has (a range of the primary key, counted)."""
        with self.engine.connect() as conn:
            return int(conn.execute(self._count, {"n": name}).scalar_one())

    def summary(self, name: str, now: datetime) -> Summary:
        """One aggregate over ``name``'s rows."""
        with self.engine.connect() as conn:
            row = conn.execute(self._summary, {"n": name, "now": micros(now)}).one()
        count, expired, oldest, newest, size = row
        return Summary(
            name,
            int(count),
            int(expired or 0),
            time_or_none(oldest),
            time_or_none(newest),
            int(size or 0),
        )


def _text(value: Any) -> Any:
    """A name or key as text: one written by hand as bytes (a BLOB, or text that is not
    UTF-8) is shown with replacement characters, not listed as bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _entry(name: str, row: Any) -> StoredEntry:
    key, as_of, expire_on, size, payload_type, payload, *label = row
    if isinstance(payload, bytes):  # written by hand: shown, not decoded
        payload = payload.decode(errors="replace")
    return StoredEntry(
        name,
        _text(key),
        time_or_none(as_of),
        time_or_none(expire_on),
        size if isinstance(size, int) else 0,
        str(payload_type),
        payload if isinstance(payload, str) else "",
        label[0] if label and isinstance(label[0], str) else None,
    )
