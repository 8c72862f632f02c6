"""Cleanup benchmark: a million expired SQLite rows, deleted in batches while a writer writes.

Run with ``.venv/bin/python bench/cleanup.py``. A SQLite file holds 1,000,000 expired rows
(``--rows``); `SqlStore.clean_by_expiry` deletes them in batches of ``clean_batch`` rows (10,000
by default, ``--batch``), each its own transaction, resting as long as each batch took.
Meanwhile a writer thread stores one live entry after another. Printed: the whole cleanup's
time, the longest batch (from its DELETE to its COMMIT: how long the write lock was held at
most), and the writer's slowest store (how long a writer waited at most for the lock).
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from failover.payload import ReferentialPayload  # noqa: E402
from failover.stores.backends.sql import SqlStore  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=SqlStore.clean_batch)
    args = parser.parse_args()
    path = Path(tempfile.mkdtemp(prefix="failover-bench-")) / "store.db"
    store = SqlStore(f"sqlite:///{path}")
    store.clean_batch = args.batch
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO failover_store (name, key, as_of, expire_on, payload, payload_type) "
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "SELECT 'old', printf('k%07d', i), 1, 2, 'json:{\"v\":1}', 'builtins.dict' FROM n",
            (args.rows - 1,),
        )
    conn.close()

    cleaner = threading.get_ident()
    started: list[float] = []
    held: list[float] = []

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def begin(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if threading.get_ident() == cleaner and "rowid IN" in statement:
            started.append(time.perf_counter())

    @sa.event.listens_for(store.engine.pool, "checkin")
    def end(*rest: Any) -> None:  # after the batch's COMMIT
        if threading.get_ident() == cleaner and len(held) < len(started):
            held.append(time.perf_counter() - started[-1])

    stop = threading.Event()
    waits: list[float] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            now = datetime.now(UTC)
            entry = ReferentialPayload(
                "new", f"w{i}", {"i": i}, now, now + timedelta(hours=1), True
            )
            t = time.perf_counter()
            store.store(entry)
            waits.append(time.perf_counter() - t)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    start = time.perf_counter()
    removed = store.clean_by_expiry(datetime.now(UTC))
    total = time.perf_counter() - start
    stop.set()
    thread.join()
    store.close()
    print(f"Cleanup, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}\n")
    print("| rows removed | batch | batches | total s | longest batch ms | writer's slowest ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {removed:,} | {args.batch:,} | {len(held)} | {total:.2f} | {max(held) * 1000:.1f} "
        f"| {max(waits) * 1000:.1f} |"
    )
    print(f"\nwriter: {len(waits):,} stores during the cleanup")
    return 0


if __name__ == "__main__":
    sys.exit(main())
