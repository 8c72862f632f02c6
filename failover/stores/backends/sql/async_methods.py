"""The async methods of a `SqlStore` (`failover.stores.base.AsyncFailoverStore`): on PostgreSQL
through psycopg, its reads on the caller's event loop (`failover.stores.backends.sql.aio`);
elsewhere async callers keep a worker thread. Here, not in ``aio``, so that it imports without
psycopg."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from ...base import Payload

__all__ = ["AsyncSqlMethods"]


class AsyncSqlMethods:
    """The async side of `SqlStore` (which sets the state declared here)."""

    _aio: Any
    _ready: bool
    _statements: Any

    def _prepare(self) -> None:
        raise NotImplementedError

    def _payload(self, name: str, key: str, row: Any) -> Payload:
        raise NotImplementedError

    def _decoded(self, name: str, rows: Iterable[Any]) -> Iterable[tuple[str, Payload]]:
        raise NotImplementedError

    def store_many(self, payloads: Sequence[Payload]) -> int:
        raise NotImplementedError

    @property
    def native_async(self) -> bool:
        """Whether async callers read on the event loop (PostgreSQL through psycopg: its async
        connections); other databases keep the worker thread."""
        return self._aio is not None

    async def _aready(self) -> Any:
        if self._aio is None:
            raise TypeError(f"{self!r} has no async driver: read it on a worker thread")
        if not self._ready:
            await asyncio.to_thread(self._prepare)
        return self._statements

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, awaited (one statement on the loop's connection)."""
        row = await (await self._aready()).afind(self._aio, name, key)
        return None if row is None else self._payload(name, key, row)

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, awaited (one statement on the loop's connection)."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows = await (await self._aready()).afind_many(self._aio, name, wanted)
        return dict(self._decoded(name, rows))

    async def astore_many(self, payloads: Sequence[Payload]) -> int:
        """`store_many` on a worker thread (writes from async callers are queued anyway)."""
        return await asyncio.to_thread(self.store_many, payloads)

    async def aclose(self) -> None:
        """Close the running loop's async connections."""
        if self._aio is not None:
            await self._aio.aclose()
