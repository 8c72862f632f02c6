"""Browsing benchmark: the first, a middle and the last page of a large name.

Run with ``.venv/bin/python bench/browsing.py`` (SQLite: 1,000,000 entries in a temporary file;
Redis: 100,000 entries on a throwaway ``redis-server``, skipped when the binary is missing). Each
page is 100 entries, read through the store's browsing protocol (``page(name, after, limit)``);
the time is the median of 50 reads of that page. A keyset cursor makes the last page cost what
the first does; an offset would make it read the million rows before it.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/redis_server.py starts the throwaway server

from failover.payload import ReferentialPayload  # noqa: E402
from failover.stores.backends.sql import SqlStore  # noqa: E402

LIMIT = 100
ROUNDS = 50


def median_ms(read: Callable[[], Any]) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def pages(store: Any, name: str, keys: list[str]) -> list[tuple[str, float]]:
    """(position, median ms) of the pages after each of ``keys`` (None: the first)."""
    rows = []
    for label, after in zip(("first", "middle", "last"), keys, strict=True):
        found = store.page(name, after, LIMIT)
        assert len(found.entries) == LIMIT, (label, len(found.entries))
        rows.append((label, median_ms(lambda after=after: store.page(name, after, LIMIT))))
    return rows


def sqlite_rows(count: int) -> list[tuple[str, float]]:
    folder = tempfile.mkdtemp(prefix="failover-bench-")
    path = Path(folder) / "store.db"
    store = SqlStore(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO failover_store (name, key, as_of, expire_on, payload, payload_type) "
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "SELECT 'big', printf('k%07d', i), 1, 2, 'json:{\"v\":1}', 'builtins.dict' FROM n",
            (count - 1,),
        )
    conn.close()
    try:
        return pages(store, "big", [None, f"k{count // 2:07d}", f"k{count - LIMIT - 1:07d}"])
    finally:
        store.close()


def redis_rows(url: str, count: int) -> list[tuple[str, float]]:
    from failover.stores.backends.redis import RedisStore

    store = RedisStore(url, prefix="bench-browsing:")
    now = datetime.now(UTC)
    for start in range(0, count, 10_000):
        store.store_many(
            [
                ReferentialPayload(
                    "big", f"k{i:06d}", {"v": i}, now, now + timedelta(hours=1), True
                )
                for i in range(start, start + 10_000)
            ]
        )
    try:
        return pages(store, "big", [None, f"k{count // 2:06d}", f"k{count - LIMIT - 1:06d}"])
    finally:
        store.client.flushdb()
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite-entries", type=int, default=1_000_000)
    parser.add_argument("--redis-entries", type=int, default=100_000)
    args = parser.parse_args()
    print(f"Browsing, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; ")
    print(f"pages of {LIMIT} entries, median of {ROUNDS} reads\n")
    print("| store | entries | page | ms |")
    print("|---|---:|---|---:|")
    for label, ms in sqlite_rows(args.sqlite_entries):
        print(f"| SQLite | {args.sqlite_entries:,} | {label} | {ms:.2f} |")
    from tests.redis_server import RedisServer

    try:
        server = RedisServer().start()
    except BaseException as exc:  # pytest.skip outside pytest: the binary is missing
        print(f"\nno redis-server to run against: {exc}", file=sys.stderr)
        return 0
    try:
        for label, ms in redis_rows(server.url, args.redis_entries):
            print(f"| Redis | {args.redis_entries:,} | {label} | {ms:.2f} |")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
