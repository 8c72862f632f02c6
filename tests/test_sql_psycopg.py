"""The PostgreSQL fast path of `SqlStore` (``failover.stores.backends.sql.psycopg``) on the
suite's real server: connections that break, idle ones, spare connections and the pool they
come from, and processes forked with spares in hand."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from failover.stores.backends.sql import SqlStore, make_engine
from failover.stores.backends.sql.psycopg import PsycopgStatements, spares, supported

from . import postgres
from .conftest import FakeClock
from .test_sql_store import statements
from .test_store_contract import entry

pytestmark = pytest.mark.postgres


@pytest.fixture
def app() -> str:
    """An application name of the test's own: its connections, and only them, can be ended."""
    return f"failover-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def engine(postgres_url: str, app: str) -> Iterator[sa.Engine]:
    """An engine of the test's own, as `SqlStore` makes one."""
    made = make_engine(postgres_url, connect_args={"application_name": app, "connect_timeout": 10})
    yield made
    made.dispose()


def end_sessions(app: str) -> int:
    """End, from the server's side, every session of ``app`` (as a restart or a proxy would),
    and wait (5 s at most) until the server has let them go."""
    with postgres.engine().connect() as conn:
        ended = conn.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = :app"
            ),
            {"app": app},
        ).scalar_one()
    deadline = time.monotonic() + 5
    while sessions(app) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sessions(app) == 0
    return int(ended)


def sessions(app: str) -> int:
    with postgres.engine().connect() as conn:
        count = conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :app"),
            {"app": app},
        ).scalar_one()
    return int(count)


def test_the_fast_path_is_taken_on_psycopg_only(engine: sa.Engine, clock: FakeClock) -> None:
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    assert supported(engine)
    assert isinstance(store._statements, PsycopgStatements)
    sqlite = make_engine("sqlite://")
    assert not supported(sqlite)
    sqlite.dispose()


def test_a_point_find_is_one_prepared_statement_in_autocommit(
    engine: sa.Engine, clock: FakeClock
) -> None:
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    store.store(entry(clock, "k", {"v": 1}))
    with statements(engine) as seen:
        for _ in range(3):
            found = store.find("n", "k")
            assert found is not None
            assert found.payload == {"v": 1}
    assert [sql.split()[0] for sql, _ in seen.seen] == ["SELECT"] * 3  # no BEGIN, no ping
    (kept,) = spares(engine)._idle
    conn = kept[0].driver_connection
    assert conn.autocommit is True
    assert conn.pgconn.transaction_status == 0  # idle, not in a transaction


def test_a_connection_ended_by_the_server_is_replaced_and_the_statement_rerun(
    engine: sa.Engine, app: str, clock: FakeClock
) -> None:
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    store.store(entry(clock, "k", {"v": 1}))
    assert store.find("n", "k") is not None
    assert end_sessions(app) >= 1
    found = store.find("n", "k")  # the kept connection is dead: dropped, and the read rerun
    assert found is not None
    assert found.payload == {"v": 1}
    end_sessions(app)
    store.store_many([entry(clock, "k", {"v": 2}), entry(clock, "j", {"v": 3})])
    assert {k: p.payload for k, p in store.find_many("n", ["k", "j"]).items()} == {
        "k": {"v": 2},
        "j": {"v": 3},
    }
    end_sessions(app)
    store.delete("n", "j")
    assert [p.key for p in store.find_all("n")] == ["k"]


def test_idle_connections_are_pinged_before_use(
    engine: sa.Engine, app: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from failover.stores.backends.sql import psycopg as sql_psycopg

    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    store.store(entry(clock, "k", {"v": 1}))
    monkeypatch.setattr(sql_psycopg, "PING_AFTER_IDLE_S", -1.0)  # every connection is "idle"
    end_sessions(app)
    with statements(engine) as seen:
        assert store.find("n", "k") is not None
    # The ping found the dead connection before the read: the read ran once, on a new one.
    assert [sql.split()[0] for sql, _ in seen.seen] == ["SELECT"]


def test_spares_never_starve_a_small_pool(postgres_url: str, clock: FakeClock) -> None:
    engine = make_engine(postgres_url, pool_size=2, max_overflow=0, pool_timeout=5)
    tables = [SqlStore(engine, table_prefix=postgres.unique_prefix()) for _ in range(6)]
    errors: list[BaseException] = []

    def work(store: SqlStore) -> None:
        try:
            for i in range(30):
                store.store(entry(clock, f"k{i}"))
                assert store.find("n", f"k{i}") is not None
        except BaseException as exc:  # re-raised on the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(store,)) for store in tables]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(spares(engine)) <= 1  # at most half the pool is kept
    # The rest of the pool stays available to SQLAlchemy's own users (cleanup, DDL).
    assert sum(store.clean_by_expiry(clock.advance(3600)) for store in tables) == 6 * 30
    engine.dispose()


def test_connections_go_back_to_the_pool_as_it_handed_them_out(
    postgres_url: str, clock: FakeClock
) -> None:
    engine = make_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=5)
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    assert spares(engine).cap == 0  # a pool of one keeps no spare
    store.store(entry(clock, "k"))
    assert store.find("n", "k") is not None
    with engine.connect() as conn:  # not starved, and not left in autocommit
        dbapi: Any = conn.connection.driver_connection
        assert dbapi.autocommit is False
    engine.dispose()


def test_dispose_closes_the_spares(engine: sa.Engine, app: str, clock: FakeClock) -> None:
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    store.store(entry(clock, "k"))
    ((kept, _),) = spares(engine)._idle
    conn = kept.driver_connection
    engine.dispose()
    assert conn.closed
    assert store.find("n", "k") is not None  # a new pool, a new spare


def _child(store: SqlStore, done: Any) -> None:
    store.engine.dispose(close=False)  # what SQLAlchemy asks of a forked child
    found = store.find("n", "k")
    done.send(found is not None and found.payload == {"v": 1})


def test_a_forked_child_never_uses_nor_ends_the_parents_spares(
    engine: sa.Engine, app: str, clock: FakeClock
) -> None:
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    store.store(entry(clock, "k", {"v": 1}))
    assert store.find("n", "k") is not None
    (parent_spare,) = spares(engine)._idle
    parent_pid = parent_spare[0].driver_connection.info.backend_pid
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(store, send))
    child.start()
    assert receive.poll(30), "the child did not answer"
    assert receive.recv() is True
    child.join(30)
    assert child.exitcode == 0
    # The parent's session is still there, and still its own.
    found = store.find("n", "k")
    assert found is not None
    (still,) = spares(engine)._idle
    assert still[0].driver_connection.info.backend_pid == parent_pid


def _child_without_dispose(store: SqlStore, done: Any) -> None:
    # What a preforking server's worker does: use the store made before the fork, as it is.
    found = store.find("n", "k")
    with store.engine.connect() as conn:
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    (spare,) = spares(store.engine)._idle
    done.send((found is not None, {pid, spare[0].driver_connection.info.backend_pid}))


def test_a_forked_child_never_uses_the_parents_pooled_connections(
    engine: sa.Engine, app: str, clock: FakeClock
) -> None:
    store = SqlStore(engine, table_prefix=postgres.unique_prefix())
    store.store(entry(clock, "k", {"v": 1}))
    with engine.connect() as a, engine.connect() as b:  # two sessions left idle in the pool
        parents = {c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() for c in (a, b)}
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_without_dispose, args=(store, send))
    child.start()
    assert receive.poll(30), "the child did not answer"
    found, used = receive.recv()
    child.join(30)
    assert child.exitcode == 0
    assert found
    assert not used & parents  # sessions of its own: a shared socket corrupts both processes
    with engine.connect() as a, engine.connect() as b:  # the parent's sessions still work
        again = {c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() for c in (a, b)}
    assert again == parents
