"""`SqlStore` benchmark: batched and single-row writes, batch and point reads.

Run with ``.venv/bin/python bench/sql_store.py`` (SQLite: a WAL file in a temporary folder), add
``--postgres`` for a throwaway PostgreSQL server started as the test suite starts it (its
binaries must be installed), or ``--url URL`` for a database of your own (a table with a fresh
prefix is created and left there). Prints a markdown table. Every payload is a small dict, the
typical reference-data entry, encoded by the default `JsonCodec` (its time is included).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/postgres.py starts the --postgres server

from failover.payload import ReferentialPayload, envelope  # noqa: E402
from failover.stores.sql import SqlStore  # noqa: E402

BATCH = 1_000


def payloads(prefix: str, count: int) -> list[ReferentialPayload[Any]]:
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    return [
        envelope(
            "bench.rates",
            f"{prefix}{i:06d}",
            {"code": "EUR", "rate": 1.085 + i / 1e6, "source": "ecb", "n": i},
            now,
            later,
            True,
        )
        for i in range(count)
    ]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds taken by each of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def measure(store: SqlStore) -> list[tuple[str, str]]:
    """The figures of one store, as (measure, value) rows."""
    rows = []
    batches = [payloads(f"b{r}-", BATCH) for r in range(10)]
    inserts = iter(batches)
    insert_times = timed(lambda: store.store_many(next(inserts)), len(batches))
    updates = iter(batches)  # the same keys again: every row is an update
    update_times = timed(lambda: store.store_many(next(updates)), len(batches))
    rows.append(("batched writes, inserts", f"{BATCH / statistics.median(insert_times):,.0f} /s"))
    rows.append(("batched writes, upserts", f"{BATCH / statistics.median(update_times):,.0f} /s"))

    singles = iter(payloads("s-", 2_000))
    single_times = timed(lambda: store.store(next(singles)), 2_000)
    rows.append(("single-row writes", f"{1 / statistics.median(single_times):,.0f} /s"))

    keys = [p.key for p in batches[0]]
    store.find_many("bench.rates", keys)  # warm the statement cache
    many_times = timed(lambda: store.find_many("bench.rates", keys), 30)
    rows.append(("find_many, 1,000 keys", f"{statistics.median(many_times) * 1e3:.2f} ms"))

    key = keys[500]
    store.find("bench.rates", key)
    point_times = timed(lambda: store.find("bench.rates", key), 2_000)
    rows.append(("point find (pooled)", f"{statistics.median(point_times) * 1e6:.0f} µs"))
    return rows


def table(results: dict[str, list[tuple[str, str]]]) -> str:
    names = list(results)
    lines = [
        "| measure | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for i, (label, _) in enumerate(next(iter(results.values()))):
        lines.append(f"| {label} | " + " | ".join(results[n][i][1] for n in names) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true", help="also a throwaway PostgreSQL")
    parser.add_argument("--url", help="also this database (a SQLAlchemy URL)")
    args = parser.parse_args()
    results: dict[str, list[tuple[str, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlStore(f"sqlite:///{Path(tmp) / 'bench.db'}")
        results["SQLite (WAL file)"] = measure(store)
        store.close()
    if args.url:
        store = SqlStore(args.url, table_prefix=f"bench{uuid.uuid4().hex[:8]}_")
        results[store.engine.dialect.name] = measure(store)
        store.close()
    if args.postgres:
        from tests import postgres

        try:
            server = postgres.server()
        except BaseException as exc:  # pytest.skip outside pytest: binaries missing
            print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        else:
            try:
                store = SqlStore(server.url)
                results["PostgreSQL (local)"] = measure(store)
                store.close()
            finally:
                postgres.stop()
    print(
        f"SqlStore, Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
        f"SQLite {__import__('sqlite3').sqlite_version}; median of repeated runs\n"
    )
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
