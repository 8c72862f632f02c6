"""Cleanup of a large SQL store: bounded batches, each its own transaction, so that a writer gets
the table between them; and ``delete_many``, one statement for many entries.

The longest write-lock hold for a million expired rows is measured in ``bench/cleanup.py``.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from failover import ReferentialPayload
from failover.stores.backends.sql import SqlStore

from .conftest import FakeClock

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fill_expired(path: Path, count: int) -> None:
    """``count`` rows that expired in 1970, in one statement."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO failover_store (name, key, as_of, expire_on, payload, payload_type) "
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "SELECT 'old', printf('k%07d', i), 1, 2, 'json:1', 'builtins.int' FROM n",
            (count - 1,),
        )
    conn.close()


def live(clock: FakeClock, key: str) -> ReferentialPayload[Any]:
    now = clock()
    return ReferentialPayload("new", key, {"k": key}, now, now + timedelta(hours=1), True)


def test_expired_rows_go_in_bounded_batches(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "store.db"
    store = SqlStore(f"sqlite:///{path}")
    store.clean_batch = 1_000
    fill_expired(path, 10_500)
    store.store(live(clock, "kept"))
    deletes: list[int] = []

    @sa.event.listens_for(store.engine, "after_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("DELETE") and "rowid IN" in statement:
            deletes.append(cursor.rowcount)

    assert store.clean_by_expiry(clock()) == 10_500
    assert deletes == [1_000] * 10 + [500]  # never more than a batch in one transaction
    assert [e.key for e in store.page("new").entries] == ["kept"]
    assert store.count("old") == 0
    store.close()


def test_a_writer_gets_the_table_between_batches(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "store.db"
    store = SqlStore(f"sqlite:///{path}")
    store.clean_batch = 100
    fill_expired(path, 1_000)
    cleaner = threading.get_ident()
    events: list[str] = []
    failed: list[BaseException] = []

    def write() -> None:
        try:
            store.store(live(clock, "written"))  # needs SQLite's write lock
            events.append("written")
        except BaseException as exc:  # reported by the test, not lost in the thread
            failed.append(exc)

    @sa.event.listens_for(store.engine, "after_cursor_execute")
    def batch(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.get_ident() == cleaner and "rowid IN" in statement:
            events.append("batch")

    @sa.event.listens_for(store.engine.pool, "checkin")
    def between(*args: Any) -> None:
        # The cleaner's first batch is committed and its connection back in the pool: a writer
        # on another thread must get the lock now, while the cleanup is not finished. Were the
        # batch's transaction still open, the writer would fail on SQLite's busy timeout.
        if threading.get_ident() == cleaner and events == ["batch"]:
            writer = threading.Thread(target=write)
            writer.start()
            writer.join()

    assert store.clean_by_expiry(clock()) == 1_000
    assert not failed, failed
    assert events[:3] == ["batch", "written", "batch"]
    assert events.count("batch") == 11  # ten full batches, and one that found none
    assert store.find("new", "written") is not None
    store.close()


def test_delete_many_is_one_statement(tmp_path: Path, clock: FakeClock) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    store.store_many([live(clock, f"k{i}") for i in range(300)])
    seen: list[str] = []

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split(None, 1)[0])

    store.delete_many("new", [f"k{i}" for i in range(0, 300, 2)] + ["absent"])
    assert seen == ["DELETE"]
    assert store.count("new") == 150
    assert store.find("new", "k1") is not None
    assert store.find("new", "k2") is None
    store.close()
