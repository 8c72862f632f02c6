"""``failover inspect``: list the stored entries, expired ones included."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..engine import utcnow
from .common import (
    display,
    open_store,
    plural,
    render_table,
    store_argument,
    table_prefix_argument,
    time_text,
)

if TYPE_CHECKING:
    from ..stores.redis import RedisStore
    from ..stores.sql import SqlStore

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    inspect = commands.add_parser(
        "inspect",
        help="list the stored entries, expired ones included",
        description="List every stored entry: name, key, as_of, expire_on, size, live/expired.",
    )
    store_argument(inspect)
    table_prefix_argument(inspect)
    inspect.add_argument("--name", help="only the entries of this failover name (or domain)")
    inspect.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    """Run the command."""
    store = open_store(args.store, "inspect", create=False, table_prefix=args.table_prefix)
    # The entries are read as stored, not decoded: this process registers no failover, so the
    # codec's allowlist would refuse their types, and sizes are those of what the store holds.
    try:
        found = _stored(store, args.name)
    finally:
        store.close()
    if not found:
        where = f"under {args.name!r} " if args.name else ""
        print(f"no entries {where}in {display(args.store)}")
        return 0
    now = utcnow()
    rows = []
    for name, key, as_of, expires, size, payload_type in found:
        status = "expired" if expires is not None and expires <= now else "live"
        rows.append(
            [name, key, time_text(as_of), time_text(expires), str(size), payload_type, status]
        )
    headers = ["name", "key", "as_of", "expire_on", "size", "type", "status"]
    print(render_table(headers, rows))
    expired = sum(row[-1] == "expired" for row in rows)
    print(f"\n{len(rows)} {plural(len(rows), 'entry', 'entries')}, {expired} expired")
    return 0


_Stored = tuple[str, str, datetime | None, datetime | None, int, str]


def _stored(store: SqlStore | RedisStore, name: str | None) -> Sequence[_Stored]:
    """Every entry (of ``name``) as stored: name, key, as_of, expire_on, size, type."""
    from ..stores.sql import SqlStore

    if not isinstance(store, SqlStore):
        return [
            (e.name, e.key, e.as_of, e.expire_on, e.size, e.payload_type)
            for e in store.entries(name)
        ]
    import sqlalchemy as sa

    from ..serialization.rows import time_or_none

    c = store.table.c
    query = sa.select(c.name, c.key, c.as_of, c.expire_on, c.payload, c.payload_type)
    if name is not None:
        query = query.where(c.name == name)
    with store.engine.connect() as conn:
        rows = conn.execute(query.order_by(c.name, c.as_of, c.key)).all()
    # Rows written by hand (times out of range or not numbers, a binary or NULL payload) are
    # listed as they are, not a traceback: inspect is what one runs on a suspect table.
    return [
        (n, key, time_or_none(as_of), time_or_none(expire_on), _size(payload), str(type_))
        for n, key, as_of, expire_on, payload, type_ in rows
    ]


def _size(payload: object) -> int:
    if isinstance(payload, str):
        return len(payload.encode(errors="surrogatepass"))
    return len(payload) if isinstance(payload, bytes) else 0
