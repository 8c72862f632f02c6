"""Reads of a SQLite file on the caller's thread, bounded by the store deadline: no hand-off to
a worker thread (`failover.stores.layers.bounded.ReadsHere`).

A read of a local SQLite file waits on nothing but the file's locks (a writer of another process
in exclusive locking mode, a recovery) and on its own work, and both are bounded here: the
connections these reads use wait for a lock at most the deadline (SQLite's busy timeout), and a
statement still running past the deadline is interrupted (a progress handler that looks at the
clock every `STEPS` virtual-machine steps). A read takes a connection free now, or goes to a
worker after all (`Elsewhere`): the caller never waits for one. The file is assumed local; a
file on a network share that stops answering holds a read as long as the system does.

The reads go through the ``sqlite3`` module itself, past SQLAlchemy's execution layer (as the
psycopg statements do on PostgreSQL): a point read is a few microseconds of SQLite where a
SQLAlchemy checkout, execution and checkin cost about a hundred. Their statements are the
store's own, compiled by SQLAlchemy once; their errors are raised as SQLAlchemy's would be.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from time import monotonic
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import sqlite

from ....forks import INHERITED, AfterFork
from ...layers.bounded import Elsewhere, StoreTimeout, until
from .engine import first_line, sqlite_text
from .statements import CoreStatements

__all__ = ["SIZE", "STEPS", "CallerReads", "connect"]

T = TypeVar("T")

STEPS = 10_000
"""SQLite virtual-machine steps between two looks at the deadline (well under a millisecond):
a 1,000-key read looks a few times, a one-key read not at all."""

SIZE = 8
"""Connections the reads keep open at most (the store's pool keeps as many)."""

# The result codes of a read given up: waited for a lock until the busy timeout, interrupted.
_GAVE_UP = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT}
_POSTCOMPILE = "(__[POSTCOMPILE_keys])"


def _past_deadline() -> bool:
    """The progress handler: whether the read running on this thread is past its deadline
    (SQLite then interrupts the statement)."""
    deadline = until()
    return deadline is not None and monotonic() > deadline


def connect(path: str, timeout: float) -> sqlite3.Connection:
    """A connection for reads on callers' threads: autocommit (a read holds no transaction
    open), text read as the store's engine reads it, a busy timeout of ``timeout`` seconds and
    the deadline's progress handler. WAL mode is the file's, set by the store's engine."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.text_factory = sqlite_text
    conn.set_progress_handler(_past_deadline, STEPS)
    return conn


def _forked(reads: CallerReads) -> None:
    reads.forked()


_FORKS = AfterFork(_forked)


class CallerReads:
    """A SQLite file store's reads on callers' threads, within ``timeout`` seconds.

    Args:
        path: the SQLite file (the store's engine's database).
        timeout: the store deadline, in seconds.
    """

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._lock = threading.Lock()
        self._free: list[sqlite3.Connection] = []  # `list.pop` and `append`: atomic
        self._open = 0  # connections made and not closed, free or in use
        self._closed = False
        self._find: str | None = None
        self._find_many = ("", "")
        self._chunk = 0
        _FORKS.add(self)

    def __repr__(self) -> str:
        return f"CallerReads({self.path!r}, timeout={self.timeout:g})"

    @property
    def connections(self) -> int:
        """Connections open now, free or taken by a read."""
        return self._open

    @property
    def in_use(self) -> int:
        """Connections taken by reads now."""
        return self._open - len(self._free)

    def bind(self, statements: CoreStatements) -> None:
        """Read the table of ``statements`` (the store's, once ready), with its columns and its
        statements' chunk of keys."""
        c, dialect = statements.table.c, sqlite.dialect(paramstyle="qmark")
        columns = statements.columns
        by_name = c.name == sa.bindparam("n")
        find = sa.select(*columns).where(by_name, c.key == sa.bindparam("k"))
        many = sa.select(c.key, *columns).where(
            by_name, c.key.in_(sa.bindparam("keys", expanding=True))
        )
        head, _, tail = str(many.compile(dialect=dialect)).partition(_POSTCOMPILE)
        self._find_many = head + "(", ")" + tail
        self._chunk = statements.chunk
        self._find = str(find.compile(dialect=dialect))  # last: a read checks it for the rest

    def find(self, name: str, key: str) -> Any:
        """The row of ``(name, key)``, or ``None``, read on this thread within the deadline.

        Raises:
            Elsewhere: the table is not ready, or no connection is free now.
            StoreTimeout: the read waited for a lock, or ran, until the deadline.
        """
        sql = self._find
        if sql is None:
            raise Elsewhere("the store's table is not ready")
        return self._read(lambda conn: conn.execute(sql, (name, key)).fetchone(), sql)

    def find_many(self, name: str, keys: list[str]) -> list[Any]:
        """The rows of those of ``keys`` that are stored, key first, read on this thread within
        the deadline: one statement, chunked only past SQLite's parameter limit.

        Raises:
            Elsewhere: the table is not ready, or no connection is free now.
            StoreTimeout: the read waited for a lock, or ran, until the deadline.
        """
        if self._find is None:
            raise Elsewhere("the store's table is not ready")
        head, tail = self._find_many
        size = self._chunk or len(keys)

        def read(conn: sqlite3.Connection) -> list[Any]:
            rows: list[Any] = []
            for i in range(0, len(keys), size):
                part: Sequence[str] = keys[i : i + size]
                sql = head + ", ".join("?" * len(part)) + tail
                rows += conn.execute(sql, (name, *part)).fetchall()
            return rows

        return self._read(read, head + "...)" + tail)

    def _read(self, read: Callable[[sqlite3.Connection], T], sql: str) -> T:
        """``read(connection)`` on a connection taken for it, given back after."""
        conn = self._take()
        try:
            result = read(conn)
        except sqlite3.Error as exc:
            raise self._failed(conn, exc, sql) from exc
        except BaseException:  # interrupted (KeyboardInterrupt): the connection is not kept
            self._drop(conn)
            raise
        self._give(conn)
        return result

    def _take(self) -> sqlite3.Connection:
        try:
            return self._free.pop()
        except IndexError:
            pass
        with self._lock:
            if self._closed or self._open >= SIZE:
                raise Elsewhere("no connection free")
            self._open += 1
        try:
            return connect(self.path, self.timeout)
        except BaseException as exc:
            with self._lock:
                self._open -= 1
            if isinstance(exc, sqlite3.Error):
                raise self._wrapped(exc, None) from exc
            raise

    def _give(self, conn: sqlite3.Connection) -> None:
        if self._closed:
            self._drop(conn)
        else:
            self._free.append(conn)

    def _drop(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._open -= 1
        conn.close()

    def _failed(self, conn: sqlite3.Connection, exc: sqlite3.Error, sql: str) -> BaseException:
        """What to raise for a read that ended with ``exc``; its connection given back when
        the read was only given up (SQLite ends an interrupted or a locked-out statement
        cleanly), else closed."""
        given_up = isinstance(exc, sqlite3.OperationalError) and _code(exc) in _GAVE_UP
        if given_up:
            self._give(conn)
        else:
            self._drop(conn)
        return self._wrapped(exc, sql)

    def _wrapped(self, exc: sqlite3.Error, sql: str | None) -> BaseException:
        """``exc`` as the caller sees it: a read given up at the deadline is a `StoreTimeout`;
        any other driver error the SQLAlchemy error the store's engine would have raised."""
        wrapped = sa_exc.DBAPIError.instance(sql, None, exc, sqlite3.Error, hide_parameters=True)
        if isinstance(exc, sqlite3.OperationalError) and _code(exc) in _GAVE_UP:
            return StoreTimeout(
                f"store read did not answer within {self.timeout:g} s "
                f"({first_line(wrapped) if isinstance(wrapped, Exception) else exc})"
            )
        return wrapped if isinstance(wrapped, BaseException) else exc

    def forked(self) -> None:
        """In a forked child: the parent's connections are left alone (`INHERITED`)."""
        self._lock = threading.Lock()
        INHERITED.extend(self._free)
        self._free = []
        self._open = 0

    def close(self) -> None:
        """Close the free connections; one in use is closed when its read ends."""
        with self._lock:
            self._closed = True
        _FORKS.discard(self)
        while True:
            try:
                conn = self._free.pop()
            except IndexError:
                return
            self._drop(conn)


def _code(exc: sqlite3.Error) -> int:
    return int(getattr(exc, "sqlite_errorcode", 0)) & 0xFF
