"""``failover demo``: a flaky upstream on loopback, called through @failover."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import PROG, display, duration, in_process, is_redis, open_store, render_table, shared

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    demo = commands.add_parser(
        "demo",
        help="a flaky upstream on loopback, called through @failover: live, stale, live",
        description=(
            "Start a flaky HTTP upstream on 127.0.0.1, call it through @failover while it goes "
            "down and comes back, and print the timeline. A fake clock moves the time on, so a "
            "run takes about a second."
        ),
    )
    demo.add_argument(
        "--store",
        metavar="URL",
        help="store URL (default: a SQLite file in the temporary directory)",
    )
    demo.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    """Run the command."""
    from .. import demo

    store = args.store or demo.default_store()
    out = sys.stdout
    print(f"failover demo: store {display(store)}", file=out)
    far = shared(store)  # the far store of a tiered URL
    local = in_process(far)
    if local:
        result = demo.run(store)
    elif is_redis(far) or far != store:
        # Reached once here; the engine then makes the store from the URL on the demo's clock,
        # which Redis must know to expire the entries when that clock says, not hours early.
        open_store(far, "demo", create=True).close()
        result = demo.run(store)
    else:
        result = demo.run(open_store(store, "demo", create=True))
    print(f"upstream {result.upstream_url}/countries/<code>, ttl {duration(result.ttl)}", file=out)
    print("time: a fake clock that the demo moves on, so nothing waits", file=out)
    print(file=out)
    rows = [
        [
            str(s.number),
            f"+{duration(s.elapsed)}",
            s.upstream,
            s.call,
            s.value,
            "-" if s.up_to_date is None else str(s.up_to_date),
            "-" if s.age is None else duration(s.age),
            s.outcome,
        ]
        for s in result.steps
    ]
    headers = ["step", "time", "upstream", "call", "value", "up_to_date", "age", "outcome"]
    print(render_table(headers, rows), file=out)
    print(file=out)
    for s in result.steps:
        if s.error:
            print(f"step {s.number}: {s.error}", file=out)
        if s.note:
            print(f"        re-raised with the note: {s.note}", file=out)
    if not local:
        print(f"\nthe entries are kept: {PROG} inspect --store {display(far)}", file=out)
    return 0
