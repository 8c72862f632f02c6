"""``failover clean``: delete the expired entries once."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine import Failover
from .common import is_redis, open_store, plural, store_argument, table_prefix_argument

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    clean = commands.add_parser(
        "clean",
        help="delete the expired entries once",
        description="Delete the expired entries of the store once and print how many went.",
    )
    store_argument(clean)
    table_prefix_argument(clean)
    clean.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    """Run the command."""
    store = open_store(args.store, "clean", create=False, table_prefix=args.table_prefix)
    with Failover(store, metrics=False, async_writes=False) as engine:
        removed = engine.clean()
    why = " (Redis removes expired entries itself)" if is_redis(args.store) else ""
    print(f"removed {removed} expired {plural(removed, 'entry', 'entries')}{why}")
    return 0
