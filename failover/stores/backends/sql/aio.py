"""The async side of a PostgreSQL `SqlStore` (``postgresql+psycopg``): its reads through
psycopg's ``AsyncConnection``, on the caller's event loop.

psycopg's async connections belong to the loop that made them, so each event loop keeps a few
idle connections of its own (no psycopg_pool: a batch of recoveries is one statement, so a loop
rarely needs more than one connection at a time, and a handful kept idle per loop is all the
pooling this needs; a loop that ended without ``aclose()`` has its idle connections closed when
another loop next connects). Connections are made on first use, in autocommit, with the same
statements the sync path runs (prepared server-side); one cancelled mid-statement (an asyncio
timeout) is discarded, never reused in an unknown state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import psycopg
import sqlalchemy as sa

from .limits import CONNECT_TIMEOUT_S, KEEPALIVES

__all__ = ["AsyncConnections"]

_KEPT = 4  # idle connections kept per event loop


class AsyncConnections:
    """A few idle psycopg async connections per event loop, for one database.

    Args:
        url: the store's SQLAlchemy URL (``postgresql+psycopg://...``).
        prepare: prepare the statements server-side (not behind a transaction-pooling
            PgBouncer: see `failover.stores.backends.sql.make_engine`).
    """

    def __init__(self, url: sa.URL, prepare: bool = True) -> None:
        self.prepare = prepare
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._lock = threading.Lock()
        self._idle: dict[asyncio.AbstractEventLoop, list[psycopg.AsyncConnection[Any]]] = {}

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        loop = asyncio.get_running_loop()
        with self._lock:
            idle = self._idle.get(loop)
            if idle:
                return idle.pop()
            # A finished loop's connections are never taken again: closed, not kept open.
            for ended in [lp for lp in self._idle if lp.is_closed()]:
                for connection in self._idle.pop(ended):
                    self._discard(connection)
        return await psycopg.AsyncConnection.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            prepare_threshold=5 if self.prepare else None,
            **KEEPALIVES,
        )

    def _give(self, connection: psycopg.AsyncConnection[Any]) -> None:
        loop = asyncio.get_running_loop()
        if connection.broken or connection.closed:
            return
        with self._lock:
            idle = self._idle.setdefault(loop, [])
            if len(idle) < _KEPT:
                idle.append(connection)
                return
        connection.pgconn.finish()  # idle, on no statement: closed at once

    async def run(self, sql: str, params: Sequence[Any], fetch: int) -> Any:
        """Run one statement (once more, on a new connection, when the one taken turns out
        broken); ``fetch``: 1 one row, 2 every row."""
        for attempt in (1, 2):
            connection = await self._take()
            try:
                cursor = connection.cursor()
                await cursor.execute(sql, params, prepare=self.prepare)
                rows = await cursor.fetchone() if fetch == 1 else await cursor.fetchall()
            except psycopg.OperationalError:
                if connection.broken and attempt == 1:
                    continue
                self._discard(connection)
                raise
            except BaseException:
                # Cancelled or failed mid-statement: its state is unknown, it is not reused.
                self._discard(connection)
                raise
            self._give(connection)
            return rows
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @staticmethod
    def _discard(connection: psycopg.AsyncConnection[Any]) -> None:
        if not connection.closed:
            connection.pgconn.finish()

    async def aclose(self) -> None:
        """Close the running loop's idle connections."""
        loop = asyncio.get_running_loop()
        with self._lock:
            idle = self._idle.pop(loop, [])
        for connection in idle:
            await connection.close()

    def close(self) -> None:
        """Close every loop's idle connections at once (libpq's own close: no statement runs
        on an idle connection, so nothing is awaited)."""
        with self._lock:
            loops, self._idle = self._idle, {}
        for idle in loops.values():
            for connection in idle:
                self._discard(connection)
