"""The async side of a `RedisStore` (`failover.stores.base.AsyncFailoverStore`): the same
commands through ``redis.asyncio``, on the caller's event loop.

``redis.asyncio`` connections belong to the loop that made them, so each event loop gets a
client of its own, made from the store's URL on first use and closed by ``aclose()`` (that
loop's) or ``close()`` (every loop's, each on its own loop).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ....serialization.text import EntryText
from ...base import Payload
from .client import Errors, Keys
from .writes import forward_fallback, write_commands

__all__ = ["AsyncClients", "AsyncRedisMethods", "async_url"]

log = logging.getLogger(__name__)


def async_url(url: str, cluster: bool) -> str | None:
    """``url`` when redis.asyncio can serve it (one server's: ``redis://``, ``rediss://``,
    ``unix://``), else ``None``: a cluster's or the sentinels' async callers use a worker
    thread."""
    plain = url.partition("://")[0].lower() in ("redis", "rediss", "unix")
    return url if plain and not cluster else None


class AsyncClients:
    """One ``redis.asyncio`` client per event loop, for one store URL.

    Args:
        url: the store's URL (its ``prefix`` option taken out).
        socket_timeout: seconds before a connect, a read or a write gives up.
        where: the store, as error messages name it.
    """

    def __init__(self, url: str, socket_timeout: float, where: str) -> None:
        self.url = url
        self.socket_timeout = socket_timeout
        self.where = where
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}

    def client(self) -> redis.asyncio.Redis:
        """The running loop's client (made, not connected, on first use)."""
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            with self._lock:
                for old in [lp for lp in self._clients if lp.is_closed()]:
                    del self._clients[old]  # a finished loop's connections died with it
                found = self._clients[loop] = redis.asyncio.Redis.from_url(
                    self.url,
                    socket_timeout=self.socket_timeout,
                    socket_connect_timeout=self.socket_timeout,
                    retry=Retry(NoBackoff(), 1, (redis.ConnectionError,)),
                )
        return found

    async def one(self, operation: str, *command: Any) -> Any:
        """One command's reply."""
        execute: Callable[..., Any] = self.client().execute_command  # untyped in redis-py
        with Errors(self.where, operation):
            return await execute(*command)

    async def pipelined(self, operation: str, commands: Iterable[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands``, sent in one round trip (not a transaction)."""
        with Errors(self.where, operation):
            pipe = self.client().pipeline(transaction=False)
            queue: Callable[..., Any] = pipe.execute_command  # untyped in redis-py
            for command in commands:
                queue(*command)
            replies: list[Any] = await pipe.execute()
            return replies

    async def scripted(self, operation: str, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """`pipelined`, for a write whose script calls a server may not know yet (as
        `failover.stores.backends.redis.commands.Commands.scripted`)."""
        with Errors(self.where, operation):
            replies = await self._execute(commands)
            places, again = forward_fallback(commands, replies)
            if again:
                for place, reply in zip(places, await self._execute(again), strict=True):
                    replies[place] = reply
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies

    async def _execute(self, commands: Iterable[tuple[Any, ...]]) -> list[Any]:
        pipe = self.client().pipeline(transaction=False)
        queue: Callable[..., Any] = pipe.execute_command  # untyped in redis-py
        for command in commands:
            queue(*command)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    async def aclose(self) -> None:
        """Close the running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.pop(loop, None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        """Close every loop's client without waiting (the caller may be running on that
        loop, which may end right after): each connection dropped on its own loop's thread; a
        closed loop's are just forgotten."""
        with self._lock:
            clients, self._clients = self._clients, {}
        for loop, client in clients.items():
            if loop.is_closed():
                continue
            try:
                loop.call_soon_threadsafe(_drop, client)
            except RuntimeError:  # the loop closed meanwhile
                log.debug("%s: a loop closed before its client", self.where)


def _drop(client: redis.asyncio.Redis) -> None:
    """Close ``client``'s connections at once. redis.asyncio only closes them by awaiting
    (``aclose``), which a sync ``close()`` cannot do; ``_close`` is the connection's own
    "close without waiting", the one its ``__del__`` uses."""
    pool: Any = client.connection_pool
    in_use = getattr(pool, "_in_use_connections", ())
    for connection in [*getattr(pool, "_available_connections", ()), *in_use]:
        connection._close()


class AsyncRedisMethods:
    """`RedisStore`'s async methods: its `find`, `find_many` and `store_many` awaited on the
    event loop (with a URL; a store given a client of yours has none: see `native_async`)."""

    _aio: AsyncClients | None
    _owns_aio: bool
    _keys: Keys
    _values: EntryText

    @property
    def native_async(self) -> bool:
        """Whether the store has async I/O (made from a URL: it can make async clients)."""
        return self._aio is not None

    def share_async(self, clients: AsyncClients) -> None:
        """Use ``clients`` for the async methods (the stores of `RedisStore.per_tenant`, which
        share one sync client, share one async client per loop too; closed by the factory)."""
        self._aio = clients
        self._owns_aio = False

    def _async(self) -> AsyncClients:
        if self._aio is None:
            raise TypeError(f"{self!r} was given a client: it has no async methods")
        return self._aio

    async def afind(self, name: str, key: str) -> Payload | None:
        """`RedisStore.find`, awaited (one ``GET``)."""
        raw = await self._async().one("find", "GET", self._keys.entries(name) + key)
        return None if raw is None else self._values.load(name, key, raw)

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`RedisStore.find_many`, awaited (one ``MGET``)."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        prefix = self._keys.entries(name)
        raws = await self._async().one("find_many", "MGET", *[prefix + k for k in wanted])
        return self._values.decoded(name, zip(wanted, raws, strict=True))

    async def astore_many(self, payloads: Sequence[Payload]) -> int:
        """`RedisStore.store_many`, awaited (one pipeline); how many a newer stored entry kept
        out."""
        writes = write_commands(self._keys, self._values, payloads, False)
        if not writes.commands:
            return 0
        return writes.kept(await self._async().scripted("store", writes.commands))

    async def aclose(self) -> None:
        """Close the running loop's async client."""
        if self._aio is not None:
            await self._aio.aclose()
