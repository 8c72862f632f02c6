"""Scatter / gather benchmark: a 1,000-item list stored and recovered per item, against raw SQL.

Run with ``.venv/bin/python bench/scatter.py`` (SQLite: a WAL file in a temporary folder); add
``--postgres`` for a throwaway PostgreSQL server started as the test suite starts it (its
binaries must be installed). Prints a markdown table per database.

The decorated function takes the codes as one comma-separated string (``find_by_codes("FR,DE")``)
and returns 1,000 small dicts (the typical reference-data item). Measured, interleaved round by
round so that load elsewhere on the host hits every case alike, best and median of the rounds:

- *raw select*: SQLAlchemy Core ``select key, payload … where name = … and key in (…)`` of the
  same 1,000 rows on a pooled connection, plus ``json.loads`` of each payload: the floor of what
  any recovery must do;
- *raw upsert*: ``json.dumps`` of each item and one executemany upsert of the 1,000 rows;
- ``SqlStore.find_many`` of the 1,000 slice keys: the store alone;
- the decorated call recovering the 1,000 slices (upstream raising): split, one ``find_many``,
  expiry check, enrichment, merge; with async writes on (the engine's default for SQL: copying
  and the queue layer in the chain) and off;
- the decorated call succeeding with async writes off: split and one ``store_many`` (encoding
  included), written before the call returns.

Ratios are given best against best, and as the median of each round's ratio to its floor.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/postgres.py starts the --postgres server

import failover  # noqa: E402
from failover.scatter import ListSplitter  # noqa: E402
from failover.stores.backends.sql import SqlStore  # noqa: E402

N = 1_000
CODES = [f"C{i:04d}" for i in range(N)]
ITEMS = [
    {"code": c, "name": f"Country {c}", "currency": "EUR", "population": i}
    for i, c in enumerate(CODES)
]
REQUEST = ",".join(CODES)


class Upstream:
    def __init__(self) -> None:
        self.down = False

    def __call__(self, codes: str) -> list[dict[str, Any]]:
        if self.down:
            raise ConnectionError("down")
        return ITEMS


def cases(url: str, tmp: Path) -> tuple[dict[str, Callable[[], object]], list[Any]]:
    """The timed callables, by label, and what to close afterwards."""
    upstream = Upstream()
    queued = failover.Failover(SqlStore(url, table_prefix="q_"), metrics=False)
    direct = failover.Failover(SqlStore(url, table_prefix="d_"), async_writes=False, metrics=False)
    splitter = ListSplitter("code")

    @failover.failover("bench.countries", splitter=splitter, engine=queued)
    def queued_find(codes: str) -> list[dict[str, Any]]:
        return upstream(codes)

    @failover.failover("bench.countries", splitter=splitter, engine=direct)
    def direct_find(codes: str) -> list[dict[str, Any]]:
        return upstream(codes)

    queued_find(REQUEST)
    assert queued.flush(60)
    direct_find(REQUEST)

    store = direct.raw_store
    assert isinstance(store, SqlStore)
    table, db = store.table, store.engine
    keys = sorted(p.key for p in store.find_all("bench.countries"))
    assert len(keys) == N
    select = sa.select(table.c.key, table.c.payload).where(
        table.c.name == "bench.countries", table.c.key.in_(sa.bindparam("keys", expanding=True))
    )

    def raw_select() -> object:
        with db.connect() as conn:
            rows = conn.execute(select, {"keys": keys}).all()
        return {key: json.loads(text.partition(":")[2]) for key, text in rows}

    raw_table = sa.Table(
        "raw_rows",
        sa.MetaData(),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("payload", sa.Text, nullable=False),
    )
    raw_table.create(db, checkfirst=True)
    dialect = postgresql if db.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(raw_table)
    upsert = insert.on_conflict_do_update(
        index_elements=["name", "key"], set_={"payload": insert.excluded.payload}
    )

    def raw_upsert() -> object:
        rows = [
            {"name": "raw", "key": key, "payload": json.dumps(item)}
            for key, item in zip(keys, ITEMS, strict=True)
        ]
        with db.begin() as conn:
            conn.execute(upsert, rows)
        return rows

    def recover(fn: Callable[[str], list[dict[str, Any]]]) -> Callable[[], object]:
        def call() -> object:
            upstream.down = True
            try:
                found = fn(REQUEST)
            finally:
                upstream.down = False
            assert len(found) == N
            return found

        return call

    timed = {
        "raw select + json.loads (floor)": raw_select,
        "SqlStore.find_many, 1,000 keys": lambda: store.find_many("bench.countries", keys),
        "@failover recover, 1,000 slices, async writes on": recover(queued_find),
        "@failover recover, 1,000 slices, async writes off": recover(direct_find),
        "raw upsert + json.dumps (floor)": raw_upsert,
        "@failover success, 1,000 slices stored, async writes off": lambda: direct_find(REQUEST),
    }
    return timed, [queued, direct]


def run(timed: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {label: [] for label in timed}
    for fn in timed.values():
        fn()  # warm statement caches and memos
    for _ in range(rounds):
        for label, fn in timed.items():
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    return times


def table(title: str, times: dict[str, list[float]]) -> str:
    """Best and median per case, and the ratio to its floor: best against best, and the median
    of the ratios of each round (the cases of one round ran moments apart, so a burst of load
    elsewhere on the host moves a round's case and its floor alike)."""
    lines = [
        f"### {title}",
        "",
        "| case | best ms | median ms | x raw, best | x raw, median of rounds |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, values in times.items():
        store = "upsert" in label or "success" in label
        floor = times[
            "raw upsert + json.dumps (floor)" if store else "raw select + json.loads (floor)"
        ]
        paired = statistics.median(v / f for v, f in zip(values, floor, strict=True))
        lines.append(
            f"| {label} | {min(values) * 1e3:.2f} | {statistics.median(values) * 1e3:.2f} "
            f"| {min(values) / min(floor):.2f} | {paired:.2f} |"
        )
    return "\n".join(lines)


def measure(title: str, url: str, tmp: Path, rounds: int) -> str:
    timed, engines = cases(url, tmp)
    try:
        return table(title, run(timed, rounds))
    finally:
        for engine in engines:
            engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true", help="also a throwaway PostgreSQL")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of every case")
    args = parser.parse_args()
    print(
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
        f"SQLite {__import__('sqlite3').sqlite_version}; {args.rounds} interleaved rounds\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        print(
            measure(
                "SQLite (WAL file)", f"sqlite:///{Path(tmp) / 'bench.db'}", Path(tmp), args.rounds
            )
        )
    if args.postgres:
        from tests import postgres

        try:
            server = postgres.server()
        except BaseException as exc:  # pytest.skip outside pytest: binaries missing
            print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        else:
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    print()
                    print(measure("PostgreSQL (local)", server.url, Path(tmp), args.rounds))
            finally:
                postgres.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
