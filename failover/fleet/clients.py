"""The fleet's Redis clients: the one its threads and sync callers share, and one
``redis.asyncio`` client per event loop for async callers (single flight's leases).

A fleet is one Redis server (``redis://``, ``rediss://``, ``unix://``), a Sentinel set's master
(``redis+sentinel://``) or a Redis Cluster (``redis+cluster://``), given as a URL or as a
redis-py client whose connection settings are copied into clients of the fleet's own, with the
fleet's socket timeouts. On a cluster every key of the fleet carries one hash tag (its prefix):
they live in one slot, so that one round reads every breaker's state in one ``MGET``; the
fleet's traffic is a few commands per second and per process (see docs/scale.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError
from ..masking import masked_url

__all__ = ["DEFAULT_PREFIX", "AsyncClients", "Target", "target_of"]

DEFAULT_PREFIX = "failover:fleet:"

# The connection settings copied from a given client into the fleet's own (redis-py's names).
_COPIED = (
    "host",
    "port",
    "path",
    "db",
    "username",
    "password",
    "client_name",
    "credential_provider",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_check_hostname",
)


class Target:
    """How to make the fleet's clients.

    Attributes:
        make: makes the sync client (a new one after a fork).
        make_async: makes a ``redis.asyncio`` client on the running loop; ``None`` (a cluster,
            a Sentinel set): async callers use a worker thread and the sync client.
        shown: the fleet as logs and errors show it (no password).
        prefix: put before every key (hash-tagged on a cluster).
        cluster: whether it is a Redis Cluster.
    """

    def __init__(
        self,
        make: Callable[[], Any],
        make_async: Callable[[], Any] | None,
        shown: str,
        prefix: str,
        cluster: bool = False,
    ) -> None:
        self.make = make
        self.make_async = make_async
        self.shown = shown
        self.prefix = _tagged(prefix) if cluster else prefix
        self.cluster = cluster


def _tagged(prefix: str) -> str:
    """``prefix`` with a hash tag, unless it has one: every fleet key in one cluster slot."""
    if "{" in prefix and "}" in prefix.partition("{")[2]:
        return prefix
    return "{" + (prefix.rstrip(":") or "failover:fleet") + "}:"


def target_of(target: object, timeout: float, owner: str) -> Target:
    """The `Target` of a ``fleet=`` setting.

    Raises:
        ConfigurationError: neither a Redis URL nor a Redis client, naming ``fleet``.
    """
    try:
        import redis
        import redis.asyncio
        from redis.cluster import RedisCluster
    except ImportError as exc:  # pragma: no cover - where redis-py is not installed
        raise ConfigurationError(
            f"{owner}: fleet needs redis-py: pip install 'failover[redis]' ({exc})"
        ) from exc
    if isinstance(target, str):
        return _from_url(target, timeout, owner)
    if isinstance(target, RedisCluster):
        nodes = [(n.host, n.port) for n in target.get_nodes()]  # type: ignore[no-untyped-call]
        given = target.get_default_node().redis_connection  # type: ignore[no-untyped-call]
        kwargs = {}
        if given is not None:
            kw = given.connection_pool.connection_kwargs
            kwargs = {k: kw[k] for k in ("username", "password") if kw.get(k) is not None}

        def make_cluster() -> Any:
            from redis.cluster import ClusterNode

            return RedisCluster(
                startup_nodes=[ClusterNode(h, p) for h, p in nodes],  # type: ignore[no-untyped-call]
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                **kwargs,
            )

        shown = f"redis.cluster.RedisCluster({','.join(f'{h}:{p}' for h, p in nodes)})"
        return Target(make_cluster, None, shown, DEFAULT_PREFIX, cluster=True)
    if isinstance(target, redis.Redis | redis.asyncio.Redis):
        pool = target.connection_pool
        given = pool.connection_kwargs
        kwargs = {k: given[k] for k in _COPIED if k in given}
        # The fleet's own bounds, whatever the given client waits: a round must end in time.
        kwargs["socket_timeout"] = kwargs["socket_connect_timeout"] = timeout
        if "path" in kwargs:
            kwargs["unix_socket_path"] = kwargs.pop("path")
            kwargs.pop("host", None)
            kwargs.pop("port", None)
        if "SSL" in pool.connection_class.__name__:
            kwargs["ssl"] = True
        where = given.get("path") or f"{given.get('host')}:{given.get('port')}"
        shown = f"{type(target).__module__}.{type(target).__name__}({where})"
        return Target(
            lambda: redis.Redis(**kwargs),
            lambda: redis.asyncio.Redis(**kwargs),
            shown,
            DEFAULT_PREFIX,
        )
    raise ConfigurationError(
        f"{owner}: fleet must be a Redis URL (redis://, rediss://, unix://, redis+sentinel://, "
        f"redis+cluster://) or a redis.Redis / redis.asyncio.Redis / RedisCluster client, got "
        f"{target!r}"
    )


def _from_url(target: str, timeout: float, owner: str) -> Target:
    import redis.asyncio

    from ..stores.backends.redis.client import checked_prefix, make_client, split_url
    from ..stores.backends.redis.topology import CLUSTER, SENTINEL, store_client

    try:
        url, prefix = split_url(target)
        prefix = checked_prefix(DEFAULT_PREFIX if prefix is None else prefix, owner)
        scheme = url.partition("://")[0].lower()
        if scheme in (CLUSTER, SENTINEL):
            store_client(url, timeout, False)  # checked now: a bad URL fails the engine
            return Target(
                lambda: store_client(url, timeout, False),
                None,
                masked_url(target),
                prefix,
                cluster=scheme == CLUSTER,
            )
        make_client(url, timeout)  # checked now: a bad URL fails the engine, not the thread
    except ConfigurationError as exc:
        raise ConfigurationError(f"{owner}: fleet: {exc}") from None

    def make_async() -> Any:
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        return redis.asyncio.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1, (redis.ConnectionError,)),
        )

    return Target(lambda: make_client(url, timeout), make_async, masked_url(target), prefix)


class AsyncClients:
    """One ``redis.asyncio`` client per event loop (its connections belong to that loop)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}

    def get(self) -> Any:
        """The running loop's client (made, not connected, on first use)."""
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            with self._lock:
                for old in [lp for lp in self._clients if lp.is_closed()]:
                    del self._clients[old]  # a finished loop's connections died with it
                found = self._clients[loop] = self._make()
        return found

    async def aclose(self) -> None:
        """Close the running loop's client (its connections can only be closed on it)."""
        with self._lock:
            found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found.aclose()

    def forked(self) -> None:
        """In a forked child: the parent's loops and connections are not the child's."""
        self._lock = threading.Lock()
        self._clients = {}
