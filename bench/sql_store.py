"""`SqlStore` benchmark: batched and single-row writes, batch and point reads.

Run with ``.venv/bin/python bench/sql_store.py`` (SQLite: a WAL file in a temporary folder), add
``--postgres`` for a throwaway PostgreSQL server started as the test suite starts it (its
binaries must be installed), or ``--url URL`` for a database of your own (a table with a fresh
prefix is created and left there). Prints a markdown table. Every payload is a small dict, the
typical reference-data entry, encoded by the default `JsonCodec` (its time is included).

On PostgreSQL through psycopg it also prints the store next to raw psycopg in the same run: a
point `find` against a prepared select of the same row on one connection, `find_many` of 1,000
keys against the same prepared statement, and batched writes against ``executemany`` (pipeline
mode) of the same upsert and against the store's own one-statement upsert sent by hand. The raw
writes get their rows already encoded: the store's figure includes its codec. The cases are
interleaved, round after round, and the ratio is the median of the rounds' ratios, so that load
elsewhere on the host moves both sides alike.
"""

from __future__ import annotations

import argparse
import json
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
from failover.stores.backends.sql import SqlStore  # noqa: E402
from failover.stores.backends.sql.psycopg import PsycopgStatements, supported  # noqa: E402

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


# -- against raw psycopg --------------------------------------------------------------------------

ROUNDS = 15


def interleaved(cases: dict[str, Callable[[], object]], calls: int) -> dict[str, list[float]]:
    """Seconds per call of each case, one median per round; the cases take turns every round."""
    per_round: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, fn in cases.items():
            per_round[name].append(statistics.median(timed(fn, calls)))
    return per_round


def ratio(store: list[float], raw: list[float]) -> float:
    return statistics.median(s / r for s, r in zip(store, raw, strict=True))


def against_raw(store: SqlStore) -> list[tuple[str, str, str, str]]:
    """(measure, store, raw psycopg, ratio) rows, measured in turns."""
    import psycopg

    url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    raw = psycopg.connect(url, autocommit=True)
    cursor = raw.cursor()
    fast = store._statements
    assert isinstance(fast, PsycopgStatements)
    prefix = f"raw{uuid.uuid4().hex[:6]}-"
    store.store_many(payloads(prefix, BATCH))
    keys = [f"{prefix}{i:06d}" for i in range(BATCH)]
    key = keys[BATCH // 2]
    name = "bench.rates"

    def raw_find() -> object:
        cursor.execute(fast._find, (name, key), prepare=True)
        return cursor.fetchone()

    def raw_find_many() -> object:
        cursor.execute(fast._find_many, (keys, name), prepare=True)
        return cursor.fetchall()

    rows: list[tuple[str, str, str, str]] = []
    point = interleaved({"store": lambda: store.find(name, key), "raw": raw_find}, calls=300)
    rows.append(
        (
            "point find",
            f"{statistics.median(point['store']) * 1e6:.0f} µs",
            f"{statistics.median(point['raw']) * 1e6:.0f} µs",
            f"{ratio(point['store'], point['raw']):.2f}",
        )
    )
    many = interleaved(
        {"store": lambda: store.find_many(name, keys), "raw": raw_find_many}, calls=5
    )
    rows.append(
        (
            "find_many, 1,000 keys",
            f"{statistics.median(many['store']) * 1e3:.2f} ms",
            f"{statistics.median(many['raw']) * 1e3:.2f} ms",
            f"{ratio(many['store'], many['raw']):.2f}",
        )
    )

    # Writes: each round writes fresh keys (inserts) and then the same keys again (upserts).
    columns = ["name", "key", "as_of", "expire_on", "payload", "payload_type"]
    columns += ["label"] if "label" in store.table.c else []  # a table of an earlier version
    replaced = ", ".join(f"{c} = excluded.{c}" for c in columns[2:])
    upsert = (
        f"INSERT INTO {store.table.fullname} ({', '.join(columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT (name, key) DO UPDATE SET "
        f"{replaced}"
        # As the store's: a row stored by a call that started later stays.
        f" WHERE {store.table.fullname}.as_of <= excluded.as_of"
    )
    batches = iter(range(10**9))

    def encoded(tag: str) -> list[dict[str, Any]]:
        return [store._row(p) for p in payloads(f"{tag}{next(batches)}-", BATCH)]

    def raw_executemany(batch: list[dict[str, Any]]) -> None:
        with raw.transaction(), raw.cursor() as c:
            c.executemany(upsert, [tuple(r[col] for col in columns) for r in batch])

    def raw_json(batch: list[dict[str, Any]]) -> None:
        # The store's own statement: the rows (payloads already encoded) as one JSON document.
        names = (("n", "name"), ("k", "key"), ("a", "as_of"), ("e", "expire_on"))
        names += (("p", "payload"), ("t", "payload_type"))
        doc = json.dumps([{short: r[c] for short, c in names} for r in batch])
        cursor.execute(fast._upsert, (doc,), prepare=True)

    writes: dict[str, list[float]] = {"store": [], "executemany": [], "json": []}
    for _ in range(ROUNDS):
        fresh = payloads(f"w{next(batches)}-", BATCH)
        start = time.perf_counter()
        store.store_many(fresh)
        writes["store"].append(time.perf_counter() - start)
        for label, send in (("executemany", raw_executemany), ("json", raw_json)):
            batch = encoded(label)
            start = time.perf_counter()
            send(batch)
            writes[label].append(time.perf_counter() - start)
    rate = {k: BATCH / statistics.median(v) for k, v in writes.items()}
    for label in ("executemany", "json"):
        rows.append(
            (
                f"batched writes of 1,000 vs raw {label}",
                f"{rate['store']:,.0f} /s",
                f"{rate[label]:,.0f} /s",
                f"{ratio(writes['store'], writes[label]):.2f}",
            )
        )
    raw.close()
    return rows


def raw_table(label: str, rows: list[tuple[str, str, str, str]]) -> str:
    lines = [
        f"| {label} | store | raw psycopg | store time / raw time |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {m} | {s} | {r} | {x} |" for m, s, r, x in rows]
    return "\n".join(lines)


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
    raw_results: dict[str, list[tuple[str, str, str, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlStore(f"sqlite:///{Path(tmp) / 'bench.db'}")
        results["SQLite (WAL file)"] = measure(store)
        store.close()
    if args.url:
        store = SqlStore(args.url, table_prefix=f"bench{uuid.uuid4().hex[:8]}_")
        results[store.engine.dialect.name] = measure(store)
        if supported(store.engine):
            raw_results[store.engine.dialect.name] = against_raw(store)
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
                raw_results["PostgreSQL (local)"] = against_raw(store)
                store.close()
            finally:
                postgres.stop()
    print(
        f"SqlStore, Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
        f"SQLite {__import__('sqlite3').sqlite_version}; median of repeated runs\n"
    )
    print(table(results))
    for label, rows in raw_results.items():
        print(f"\n{label}, against raw psycopg in the same run ({ROUNDS} interleaved rounds):\n")
        print(raw_table(label, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
