"""``failover inspect``: list the stored entries, expired ones included."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from ..engine import utcnow
from ..labels import escaped, printable
from ..stores.base import FailoverStore
from ..stores.browsing import Browsable
from .common import (
    display,
    open_store,
    plural,
    render_table,
    store_argument,
    table_prefix_argument,
    time_text,
)

__all__ = ["add", "run"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    inspect = commands.add_parser(
        "inspect",
        help="list the stored entries, expired ones included",
        description="List every stored entry: name, key, label (for failovers with label=), "
        "as_of, expire_on, size, live/expired.",
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
    labels = any(entry[-1] is not None for entry in found)  # a column only when there are some
    rows = []
    for name, key, as_of, expires, size, payload_type, label in found:
        status = "expired" if expires is not None and expires <= now else "live"
        # As stored, maybe written by hand: escaped, so that no row drives the terminal.
        rows.append(
            [escaped(name), escaped(key)]
            + ([printable(label or "")] if labels else [])
            + [time_text(as_of), time_text(expires), str(size), escaped(payload_type), status]
        )
    headers = ["name", "key"] + (["label"] if labels else [])
    headers += ["as_of", "expire_on", "size", "type", "status"]
    print(render_table(headers, rows))
    expired = sum(row[-1] == "expired" for row in rows)
    print(f"\n{len(rows)} {plural(len(rows), 'entry', 'entries')}, {expired} expired")
    return 0


_Stored = tuple[str, str, datetime | None, datetime | None, int, str, str | None]
_PAGE = 1_000  # entries per page read


def _stored(store: FailoverStore, name: str | None) -> Sequence[_Stored]:
    """Every entry (of ``name``) as stored, through the store's browsing protocol: name, key,
    as_of, expire_on, size, type, label; by name, then ``as_of``, then key."""
    browser = cast(Browsable, store)
    found: list[_Stored] = []
    for each in browser.names() if name is None else [name]:
        listed: list[_Stored] = []
        after: str | None = None
        while True:
            page = browser.page(each, after, _PAGE)
            listed += [
                (e.name, e.key, e.as_of, e.expire_on, e.size, e.payload_type, e.label)
                for e in page.entries
            ]
            if page.next_after is None:
                break
            after = page.next_after
        # An unreadable time (a row written by hand) first, as a database sorts NULL.
        listed.sort(key=lambda e: (e[2] is not None, e[2] or _EPOCH, e[1]))
        found += listed
    return found
