"""Browsing large stores: a page costs the same at the end of a million entries as at the start.

Constancy is shown by counted work, never by time: SQLite's plan for the page query (an index
search, not a scan) and the virtual-machine steps it runs per page; Redis's commands per page.
The timings of first and last pages are in ``bench/browsing.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from failover import ReferentialPayload
from failover.stores.backends.sql import SqlStore

from . import redis_server

SQLITE_ENTRIES = 1_000_000
REDIS_ENTRIES = 100_000
LIMIT = 100


def fill_sqlite(path: Path, name: str, count: int) -> None:
    """``count`` rows under ``name`` (keys ``k0000000``...), in one statement."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO failover_store (name, key, as_of, expire_on, payload, payload_type) "
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "SELECT ?, printf('k%07d', i), 1, 2, 'json:1', 'builtins.int' FROM n",
            (count - 1, name),
        )
    conn.close()


@pytest.fixture(scope="module")
def big_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlStore]:
    path = tmp_path_factory.mktemp("big") / "store.db"
    store = SqlStore(f"sqlite:///{path}")
    fill_sqlite(path, "big", SQLITE_ENTRIES)
    yield store
    store.close()


def steps(store: SqlStore, run: Any) -> int:
    """The SQLite virtual-machine steps (in hundreds) that ``run(store)`` takes."""
    counted = [0]

    def count() -> int:
        counted[0] += 1
        return 0  # go on

    with store.engine.connect() as conn:
        raw: Any = conn.connection.dbapi_connection
        raw.set_progress_handler(count, 100)
        try:
            run(conn)
        finally:
            raw.set_progress_handler(None, 100)
    return counted[0]


def test_the_sqlite_page_query_searches_the_primary_key(big_sqlite: SqlStore) -> None:
    for after in (None, "k0500000"):
        query = big_sqlite.browsing.page_query(after, LIMIT)
        compiled: Any = query.compile(big_sqlite.engine)
        values = compiled.construct_params({"n": "big", "after": after})
        params = tuple(values[name] for name in compiled.positiontup)
        with big_sqlite.engine.connect() as conn:
            raw: Any = conn.connection.dbapi_connection
            plan = [row[-1] for row in raw.execute(f"EXPLAIN QUERY PLAN {compiled}", params)]
        assert len(plan) == 1, plan
        assert plan[0].startswith("SEARCH failover_store USING INDEX"), plan
        assert ("key>?" in plan[0]) is (after is not None), plan


def test_a_million_sqlite_entries_page_in_constant_work(big_sqlite: SqlStore) -> None:
    first = big_sqlite.page("big", None, LIMIT)
    assert [e.key for e in first.entries] == [f"k{i:07d}" for i in range(LIMIT)]
    assert first.next_after == f"k{LIMIT - 1:07d}"
    before_last = f"k{SQLITE_ENTRIES - LIMIT - 1:07d}"
    last = big_sqlite.page("big", before_last, LIMIT)
    assert [e.key for e in last.entries][-1] == f"k{SQLITE_ENTRIES - 1:07d}"
    assert len(last.entries) == LIMIT
    assert last.next_after is None

    def page_at(after: str | None) -> Any:
        query = big_sqlite.browsing.page_query(after, LIMIT)
        return lambda conn: conn.execute(query, {"n": "big", "after": after}).all()

    at_start = steps(big_sqlite, page_at(None))
    at_end = steps(big_sqlite, page_at(before_last))
    middle = steps(big_sqlite, page_at(f"k{SQLITE_ENTRIES // 2:07d}"))
    # The same rows read from the index wherever the page is: the steps do not grow with the
    # page's position (a scan to the last page would take ten thousand times as many).
    assert at_end == at_start, (at_start, at_end)
    assert middle == at_start, (at_start, middle)
    assert big_sqlite.count("big") == SQLITE_ENTRIES


def test_paging_through_every_sqlite_entry(big_sqlite: SqlStore) -> None:
    seen = 0
    after = None
    previous = ""
    while True:
        page = big_sqlite.page("big", after, 50_000)
        seen += len(page.entries)
        assert page.entries[0].key > previous
        previous = page.entries[-1].key
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == SQLITE_ENTRIES


# -- Redis --------------------------------------------------------------------------------------


def commands(raw: Any) -> int:
    """How many commands the server has run (every client; the tests run one at a time)."""
    stats = raw.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def test_a_hundred_thousand_redis_entries_page_in_constant_commands() -> None:
    from failover.stores.backends.redis import RedisStore

    server = redis_server.server()
    store = RedisStore(server.url, prefix=redis_server.unique_prefix())
    raw = server.client()
    try:
        now = datetime.now(UTC)
        batch = 10_000
        for start in range(0, REDIS_ENTRIES, batch):
            store.store_many(
                [
                    ReferentialPayload("big", f"k{i:06d}", i, now, now + timedelta(hours=1), True)
                    for i in range(start, start + batch)
                ]
            )
        counted = []
        pages = []
        for after in (None, f"k{REDIS_ENTRIES // 2:06d}", f"k{REDIS_ENTRIES - LIMIT - 1:06d}"):
            before = commands(raw)
            pages.append(store.page("big", after, LIMIT))
            counted.append(commands(raw) - before)
        assert counted == [2, 2, 2]  # ZRANGE ... BYLEX, then one MGET: wherever the page is
        first, _, last = pages
        assert [e.key for e in first.entries] == [f"k{i:06d}" for i in range(LIMIT)]
        assert len(last.entries) == LIMIT
        assert last.entries[-1].key == f"k{REDIS_ENTRIES - 1:06d}"
        assert last.next_after is None
        assert store.count("big") == REDIS_ENTRIES
    finally:
        raw.close()
        store.close()
