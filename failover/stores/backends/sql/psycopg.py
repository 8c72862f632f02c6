"""The PostgreSQL fast path of `SqlStore`: its statements sent through psycopg 3 directly.

Measured on loopback, a point read through SQLAlchemy cost five times a prepared select sent by
psycopg on one connection: a ping on every checkout (``pool_pre_ping``, one more round trip),
``BEGIN`` and the ``ROLLBACK`` of reset-on-return (two more, unless in autocommit), building a
`Connection`, its execution context and result, the pool's checkout and checkin. On
``postgresql+psycopg`` the store's reads and writes skip all of that:

- statements are written once, by hand, and prepared on the server (``prepare=True``): a point
  read is one ``Bind``/``Execute`` round trip;
- every statement runs in autocommit (one statement is atomic by itself);
- connections come from the engine's pool (its size, overflow, timeouts, events and ``dispose``
  apply), and a few are kept between calls, idle and in autocommit, by `Spares`: one per pool,
  shared by every store on it, at most half the pool (and 4), so that other users of the pool
  never starve; each keeps one cursor;
- a batch of writes is one statement: the rows travel as one JSON document, which the server
  unpacks in C (``json_to_recordset``) into one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE``
  (a row replaced only when its ``as_of`` is not after the new one's: entries only move
  forward); six array parameters cost twice as much, psycopg dumping arrays element by
  element in Python;
- instead of a ping per checkout, `make_engine` pings connections idle for more than 5 s
  (`ping_when_idle`); a connection that still turns out broken is dropped and the statement run
  once more on another.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ....forks import INHERITED
from ...layers.deadline import abandoned

if TYPE_CHECKING:
    from .aio import AsyncConnections

__all__ = ["PsycopgStatements", "Spares", "ping_when_idle", "supported"]

_CURSOR = "failover.cursor"  # a connection's kept cursor, in its pool record's info
_USED = "failover.used"  # when the connection was last checked out (time.monotonic)
_AUTOCOMMIT = "failover.autocommit"  # its autocommit when the pool handed it out
PING_AFTER_IDLE_S = 5.0
MAX_SPARES = 4


# ASCII out: any character reaches the server as an escape it turns back into the same text.
_rows_json = json.JSONEncoder(separators=(",", ":")).encode


def supported(engine: sa.Engine) -> bool:
    """Whether ``engine`` is PostgreSQL through psycopg 3, the fast path's driver."""
    return engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"


def ping_when_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """A pool ``checkout`` listener: ping a connection idle for more than 5 s, not every one.

    ``pool_pre_ping`` spends a round trip on every checkout, as much as the point read itself.
    A connection used within the last seconds is very likely alive; one that is not is found
    broken by its statement, which is then run again on another (see `PsycopgStatements`).

    Raises:
        sqlalchemy.exc.DisconnectionError: the ping failed: the pool replaces the connection.
    """
    now = time.monotonic()
    last = record.info.get(_USED)
    record.info[_USED] = now
    if last is None or now - last <= PING_AFTER_IDLE_S:
        return  # new (just connected), or recently used
    try:
        dbapi_connection.execute("SELECT 1")
        if not dbapi_connection.autocommit:
            dbapi_connection.rollback()  # hand it out idle, as the pool's reset left it
    except Exception as exc:
        raise sa_exc.DisconnectionError(
            f"ping after {now - last:.0f} s idle failed: {exc}"
        ) from exc


class Spares:
    """Connections of one pool kept checked out between calls, idle and in autocommit.

    A checkout and checkin through SQLAlchemy's pool cost a fifth of a point read; a spare costs
    a lock. At most ``cap`` are kept; past that, and when one has been idle for more than
    `PING_AFTER_IDLE_S`, a connection goes back to the pool (as its autocommit was), whose
    checkout pings it. A connection left in a transaction, or broken, is never kept. In a forked
    child the parent's spares are forgotten, never used nor closed.

    Args:
        engine: the engine whose pool lends the connections.
        cap: how many to keep at most.
    """

    def __init__(self, engine: sa.Engine, cap: int) -> None:
        from psycopg.pq import TransactionStatus

        self._engine = weakref.ref(engine)  # the registry's key is its pool: no cycle
        self.cap = cap
        self._idle: list[tuple[Any, float]] = []
        self._lock = threading.Lock()
        self._idle_status = TransactionStatus.IDLE
        self._pid = os.getpid()

    def __len__(self) -> int:
        """How many connections are kept now."""
        return len(self._idle)

    def _forked(self) -> bool:
        """Forget, without closing, the connections of the parent of a forked process: their
        sockets are the parent's (closing them would end the parent's sessions)."""
        if os.getpid() == self._pid:
            return False
        with self._lock:
            INHERITED.extend(self._idle)  # libpq would end the parent's sessions
            self._idle, self._pid = [], os.getpid()
        return True

    def take(self) -> Any:
        """A pooled connection (a SQLAlchemy pool proxy) whose psycopg connection is in
        autocommit."""
        spare = None
        if self._idle and not self._forked():
            with self._lock:
                spare = self._idle.pop() if self._idle else None
        if spare is not None:
            fairy, since = spare
            if time.monotonic() - since <= PING_AFTER_IDLE_S:
                return fairy
            self._release(fairy)
        engine = self._engine()
        if engine is None:  # pragma: no cover - a store keeps its engine alive
            raise sa_exc.InvalidRequestError("the engine of these connections is gone")
        fairy = engine.raw_connection()
        conn: Any = fairy.driver_connection
        fairy.info[_AUTOCOMMIT] = conn.autocommit
        if not conn.autocommit:
            conn.autocommit = True
        return fairy

    def give(self, fairy: Any) -> None:
        """Take back a connection from `take`: kept if idle and there is room, else returned to
        the pool, or dropped when broken or left mid-transaction."""
        conn = fairy.driver_connection
        if conn.broken or conn.pgconn.transaction_status != self._idle_status or abandoned():
            self.drop(fairy)
            return
        with self._lock:
            if len(self._idle) < self.cap:
                self._idle.append((fairy, time.monotonic()))
                return
        self._release(fairy)

    @staticmethod
    def drop(fairy: Any) -> None:
        """Close the connection for good; the pool opens a new one when next needed."""
        fairy.invalidate()
        fairy.close()

    def _release(self, fairy: Any) -> None:
        conn = fairy.driver_connection
        try:
            if not fairy.info.get(_AUTOCOMMIT, True) and not conn.broken:
                conn.autocommit = False  # back to the pool as the pool handed it out
        finally:
            fairy.close()

    def drain(self, close: bool = False) -> None:
        """Return every kept connection to the pool (``close``: close them, the pool being
        disposed)."""
        if self._forked():
            return
        with self._lock:
            idle, self._idle = self._idle, []
        for fairy, _ in idle:
            if close:
                self.drop(fairy)
            else:
                self._release(fairy)


_registry: weakref.WeakKeyDictionary[Any, Spares] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def spares(engine: sa.Engine) -> Spares:
    """The `Spares` of ``engine``'s pool (made on first use, shared by every store on it)."""
    pool = engine.pool
    with _registry_lock:
        found = _registry.get(pool)
        if found is None:
            size = pool.size() if isinstance(pool, sa.QueuePool) else 0
            found = _registry[pool] = Spares(engine, min(size // 2, MAX_SPARES))
            # Engine.dispose() closes the pool's idle connections and makes a new pool: the
            # spares of the old one are closed too, not left open until it is collected.
            sa.event.listen(engine, "engine_disposed", _drain_on_dispose(found))
        return found


def _drain_on_dispose(found: Spares) -> Callable[[sa.Engine], None]:
    def drain(engine: sa.Engine) -> None:
        found.drain(close=True)

    return drain


class PsycopgStatements:
    """The statements of one `SqlStore` table, run through psycopg on the engine's connections.

    Rows come back in the shapes the SQLAlchemy path gives: ``(payload, payload_type, as_of,
    expire_on)``, then ``label`` when the table has the column, with the key first for
    `find_many` and `find_all`. Errors are psycopg's.

    Args:
        engine: a ``postgresql+psycopg`` engine.
        table: the store's table.
    """

    def __init__(self, engine: sa.Engine, table: sa.Table) -> None:
        import psycopg

        self._spares = spares(engine)
        self._broken: type[Exception] = psycopg.OperationalError
        t = engine.dialect.identifier_preparer.format_table(table)
        # A table of an earlier version has no label (sql.table's LABEL; imported, a circle).
        self._label = "label" in table.c
        label = ", label" if self._label else ""
        values = f"payload, payload_type, as_of, expire_on{label}"
        self._find = f"SELECT {values} FROM {t} WHERE name = %s AND key = %s"
        # The keys travel as one array; each is looked up in the primary key (LIMIT 1 keeps the
        # planner from turning the lookups into one scan of every entry of the name). Arrays go
        # in binary (%b): as text, psycopg escapes every element, ten times slower.
        self._find_many = (
            f"SELECT found.key, found.payload, found.payload_type, found.as_of, found.expire_on"
            f"{', found.label' if self._label else ''} FROM unnest(%b::text[]) AS wanted(key) "
            f"JOIN LATERAL (SELECT key, {values} "
            f"FROM {t} WHERE name = %s AND key = wanted.key LIMIT 1) AS found ON true"
        )
        self._find_all = f"SELECT key, {values} FROM {t} WHERE name = %s ORDER BY key"
        self._delete = f"DELETE FROM {t} WHERE name = %s AND key = %s"
        self._delete_many = f"DELETE FROM {t} WHERE name = %s AND key = ANY(%b::text[])"
        # A batch travels as one JSON array of rows, which the server unpacks in C: twice the
        # rate of six binary arrays, whose dumping psycopg does in Python, element by element.
        self._upsert = (
            f"INSERT INTO {t} (name, key, as_of, expire_on, payload, payload_type{label}) "
            f"SELECT r.n, r.k, r.a, r.e, r.p, r.t{', r.l' if self._label else ''} "
            "FROM json_to_recordset(%s::json) AS "
            f"r(n text, k text, a bigint, e bigint, p text, t text{', l text' if label else ''}) "
            "ON CONFLICT (name, key) DO UPDATE SET "
            "as_of = excluded.as_of, expire_on = excluded.expire_on, "
            "payload = excluded.payload, payload_type = excluded.payload_type"
            f"{', label = excluded.label' if label else ''} "
            # Entries only move forward: a row stored by a call that started later stays.
            f"WHERE {t}.as_of <= excluded.as_of"
        )

    def _run(self, sql: str, params: Sequence[Any], fetch: int) -> Any:
        """Run one statement in autocommit (once more, on another connection, when this one
        turns out broken); ``fetch``: 0 nothing, 1 one row, 2 every row, 3 the rows changed."""
        spares = self._spares
        for attempt in (1, 2):
            fairy = spares.take()
            try:
                cursor = fairy.info.get(_CURSOR)
                if cursor is None or cursor.closed:
                    cursor = fairy.info[_CURSOR] = fairy.driver_connection.cursor()
                # Behind a transaction-pooling PgBouncer (prepare_threshold None, see
                # make_engine) a prepared statement may be missing on the next server session.
                prepare = fairy.driver_connection.prepare_threshold is not None
                cursor.execute(sql, params, prepare=prepare)
                if fetch == 3:
                    result = cursor.rowcount
                else:
                    result = (
                        cursor.fetchone() if fetch == 1 else cursor.fetchall() if fetch else None
                    )
            except self._broken:
                if fairy.driver_connection.broken and attempt == 1:
                    spares.drop(fairy)
                    # The other kept ones went to the same server (restarted, a bouncer
                    # restarted): the second try must not take one of them too.
                    spares.drain(close=True)
                    continue
                spares.give(fairy)
                raise
            except BaseException:
                spares.give(fairy)  # kept only if idle and not broken
                raise
            spares.give(fairy)
            return result
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        """Return the kept connections of this store's pool (when the store owns the engine)."""
        self._spares.drain()

    def find(self, name: str, key: str) -> Any:
        """The row of ``(name, key)``, or ``None``."""
        return self._run(self._find, (name, key), 1)

    def find_many(self, name: str, keys: list[str]) -> list[Any]:
        """The rows of those of ``keys`` that are stored, key first."""
        rows: list[Any] = self._run(self._find_many, (keys, name), 2)
        return rows

    async def afind(self, connections: AsyncConnections, name: str, key: str) -> Any:
        """`find` on one of ``connections`` (async, on the running loop)."""
        return await connections.run(self._find, (name, key), 1)

    async def afind_many(
        self, connections: AsyncConnections, name: str, keys: list[str]
    ) -> list[Any]:
        """`find_many` on one of ``connections`` (async, on the running loop)."""
        rows: list[Any] = await connections.run(self._find_many, (keys, name), 2)
        return rows

    def find_all(self, name: str) -> list[Any]:
        """Every row of ``name``, key first, by key."""
        rows: list[Any] = self._run(self._find_all, (name,), 2)
        return rows

    def delete(self, name: str, key: str) -> None:
        """Remove the row of ``(name, key)`` if present."""
        self._run(self._delete, (name, key), 0)

    def delete_many(self, name: str, keys: list[str]) -> None:
        """Remove the rows of ``name`` under ``keys``, in one statement (one array)."""
        self._run(self._delete_many, (name, keys), 0)

    def upsert(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert ``rows`` (no two with one name and key), or replace the stored rows not
        newer than them, in one statement; how many a newer stored row kept out."""
        batch = _rows_json(
            [
                {
                    "n": r["name"],
                    "k": r["key"],
                    "a": r["as_of"],
                    "e": r["expire_on"],
                    "p": r["payload"],
                    "t": r["payload_type"],
                    "l": r.get("label"),
                }
                for r in rows
            ]
        )
        changed: int = self._run(self._upsert, (batch,), 3)
        return len(rows) - changed if 0 <= changed <= len(rows) else 0
