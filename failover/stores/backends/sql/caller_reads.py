"""Reads of a SQLite file on the caller's thread, bounded by the store deadline: no hand-off to
a worker thread (`failover.stores.layers.bounded.ReadsHere`).

A read of a local SQLite file waits on nothing but the file's locks (a writer of another process
in exclusive locking mode, a recovery) and on its own work, and both are bounded here: the
connections these reads use wait for a lock at most the deadline (SQLite's busy timeout), and a
statement still running past the deadline is interrupted (a progress handler that looks at the
clock every `STEPS` virtual-machine steps). A read takes a connection free now, or goes to a
worker after all (`Elsewhere`): the caller never waits for the pool. The file is assumed local;
a file on a network share that stops answering holds a read as long as the system does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from math import ceil
from time import monotonic
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ...layers.bounded import Elsewhere, StoreTimeout, until
from .engine import first_line, reading_engine
from .statements import CoreStatements

__all__ = ["STEPS", "CallerReads"]

T = TypeVar("T")

STEPS = 10_000
"""SQLite virtual-machine steps between two looks at the deadline (well under a millisecond):
a 1,000-key read looks a few times, a one-key read not at all."""

# The result codes of a read given up: waited for a lock until the busy timeout, interrupted.
_GAVE_UP = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT}


def _past_deadline() -> bool:
    """The progress handler: whether the read running on this thread is past its deadline
    (SQLite then interrupts the statement)."""
    deadline = until()
    return deadline is not None and monotonic() > deadline


def _bounded_steps(dbapi_connection: Any, record: Any) -> None:
    dbapi_connection.set_progress_handler(_past_deadline, STEPS)


class CallerReads:
    """A SQLite file store's reads on callers' threads, within ``timeout`` seconds.

    Args:
        url: the SQLite file's URL (the store's engine's).
        timeout: the store deadline, in seconds.
    """

    def __init__(self, url: sa.URL, timeout: float) -> None:
        self.timeout = timeout
        self.engine = reading_engine(url, ceil(timeout * 1000), _bounded_steps)
        self._statements: CoreStatements | None = None

    def bind(self, table: sa.Table, chunk: int) -> None:
        """Read ``table`` (the store's, once ready), ``chunk`` keys per statement at most."""
        statements = CoreStatements(self.engine, table)
        statements.chunk = chunk
        self._statements = statements

    def find(self, name: str, key: str) -> Any:
        """`CoreStatements.find` on this thread, within the deadline."""
        return self._read(lambda s: s.find(name, key))

    def find_many(self, name: str, keys: list[str]) -> list[Any]:
        """`CoreStatements.find_many` on this thread, within the deadline."""
        return self._read(lambda s: s.find_many(name, keys))

    def _read(self, read: Callable[[CoreStatements], T]) -> T:
        """
        Raises:
            Elsewhere: the table is not ready, or no connection is free now.
            StoreTimeout: the read waited for a lock, or ran, until the deadline.
        """
        statements = self._statements
        if statements is None:
            raise Elsewhere("the store's table is not ready")
        try:
            return read(statements)
        except sa_exc.TimeoutError as exc:  # every connection taken: a checkout would wait
            raise Elsewhere("no connection free") from exc
        except (sa_exc.OperationalError, sqlite3.OperationalError) as exc:
            # A statement's error comes wrapped; a new connection's pragmas' (a file locked
            # before it opened), as the driver raised it.
            raw = exc.orig if isinstance(exc, sa_exc.OperationalError) else exc
            code = getattr(raw, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in _GAVE_UP:
                raise StoreTimeout(
                    f"store read did not answer within {self.timeout:g} s ({first_line(exc)})"
                ) from exc
            raise

    def close(self) -> None:
        """Close the connections."""
        self.engine.dispose()
