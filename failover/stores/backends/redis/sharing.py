"""The client the stores of `RedisStore.per_tenant` share: one sync client (one connection
pool) and, from a URL that redis.asyncio serves, one async client per event loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from ....errors import ConfigurationError
from ....masking import masked_url
from ....serialization.row_options import merged_row_options, split_row_options
from .aio import AsyncClients, async_url
from .client import DEFAULT_PREFIX, split_url
from .topology import Client, LazyCluster, store_client

__all__ = ["SharedClient", "shared_client"]


@dataclass(frozen=True, slots=True)
class SharedClient:
    """What the tenants' stores share.

    Attributes:
        client: the sync client.
        shown: the client as messages show it (a URL without its password).
        base: the base key prefix (the URL's ``prefix`` option, or the ``prefix`` given).
        aio: the async clients, or ``None`` (a client given, or a URL redis.asyncio cannot
            serve).
        close: closes what was made here (``None`` for a client given).
    """

    client: Client
    shown: str
    base: str
    aio: AsyncClients | None
    close: Callable[[], None] | None


def shared_client(url_or_client: Any, store_kwargs: dict[str, Any], owner: str) -> SharedClient:
    """The client of ``url_or_client``, made (not connected) from a URL; takes the options it
    uses (``prefix``, ``socket_timeout``, and ``cluster`` with a URL) out of ``store_kwargs``,
    and puts the URL's row options (``accept_plain``, ``max_row_bytes``) in.

    Raises:
        ConfigurationError: neither a Redis URL nor a redis-py client, or a bad URL.
    """
    base = store_kwargs.pop("prefix", DEFAULT_PREFIX)
    socket_timeout = store_kwargs.pop("socket_timeout", 1.0)
    if isinstance(url_or_client, str):
        url, url_prefix = split_url(url_or_client)
        base = url_prefix if url_prefix is not None else base
        url, from_url = split_row_options(url, masked_url(url))
        if from_url:  # the row options are each store's: handed to them with the others
            store_kwargs.update(merged_row_options(owner, store_kwargs, from_url))
        cluster = store_kwargs.pop("cluster", False)
        client = store_client(url, socket_timeout, cluster)
        shown = masked_url(url)
        aio = None
        if async_url(url, cluster) is not None:
            aio = AsyncClients(url, socket_timeout, f"{owner}({shown})")

        def close() -> None:
            client.close()
            if aio is not None:
                aio.close()

        return SharedClient(client, shown, base, aio, close)
    if isinstance(url_or_client, redis.Redis | RedisCluster | LazyCluster):
        return SharedClient(url_or_client, repr(url_or_client), base, None, None)
    raise ConfigurationError(
        f"{owner}: expected a redis:// URL or a redis.Redis client, got {url_or_client!r}"
    )
