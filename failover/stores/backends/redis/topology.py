"""The clients of scaled-out Redis deployments: a Sentinel set's master and a Redis Cluster,
and `store_client`, which makes a store's client from any of its URLs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from ....errors import ConfigurationError
from ....masking import masked_url
from .client import check_timeout, make_client

__all__ = ["CLUSTER", "SENTINEL", "Client", "LazyCluster", "make_cluster_client", "store_client"]

CLUSTER = "redis+cluster"
SENTINEL = "redis+sentinel"


def _hosts(url: str, shown: str) -> tuple[list[tuple[str, int]], list[str]]:
    """The ``host:port`` list of a cluster or sentinel URL, and its path's parts."""
    parts = urlsplit(url)
    hosts: list[tuple[str, int]] = []
    for each in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = each.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(
                f"store URL {shown!r}: expected host:port[,host:port...], got {each!r}"
            )
        hosts.append((host, int(port)))
    return hosts, [p for p in parts.path.split("/") if p]


class LazyCluster:
    """A Redis Cluster client made on first use.

    redis-py's `RedisCluster` asks its nodes for the slot map as it is made: made at once, a
    store could not be made (nor a service start) while the cluster is out of reach. Made here
    on first use, its failure is that use's `StoreError`, and the next use tries again.

    Args:
        make: makes the client.
    """

    def __init__(self, make: Callable[[], RedisCluster]) -> None:
        self._make = make
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()

    def get(self) -> RedisCluster:
        """The client, made now if not yet.

        Raises:
            redis.exceptions.RedisClusterException: no node listed answers.
        """
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    client = self._client = self._make()
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

    def close(self) -> None:
        """Close the client's connections, if it was made."""
        if self._client is not None:
            self._client.close()


def _cluster_client(url: str, shown: str, timeout: float) -> LazyCluster:
    """A Redis Cluster client on the nodes a ``redis+cluster://`` URL lists."""
    hosts, path = _hosts(url, shown)
    if path:
        raise ConfigurationError(f"store URL {shown!r}: a Redis Cluster has no database number")
    parts = urlsplit(url)
    if parts.query:
        raise ConfigurationError(
            f"store URL {shown!r}: options are not read from a cluster URL; pass a "
            "redis.cluster.RedisCluster client made with them"
        )
    nodes = [ClusterNode(h, p) for h, p in hosts]  # type: ignore[no-untyped-call]
    return LazyCluster(
        lambda: RedisCluster(
            startup_nodes=nodes,
            username=parts.username or None,
            password=parts.password or None,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    )


class _SentinelMaster(redis.Redis):
    """A Sentinel set's master client whose `close` also closes its connections to the
    sentinels (redis-py's own leaves them open: a socket per sentinel asked, per client)."""

    def close(self) -> None:
        super().close()
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            sentinel.close()


def _sentinel_client(url: str, shown: str, timeout: float) -> redis.Redis:
    """A client on the master the sentinels of a ``redis+sentinel://`` URL name."""
    hosts, path = _hosts(url, shown)
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigurationError(
            f"store URL {shown!r}: expected redis+sentinel://host:port,.../master_name[/db]"
        )
    parts = urlsplit(url)
    if parts.query:
        raise ConfigurationError(
            f"store URL {shown!r}: options are not read from a sentinel URL; pass the client "
            "of redis.sentinel.Sentinel(...).master_for(...) made with them"
        )
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        hosts, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        path[0],
        redis_class=_SentinelMaster,
        db=int(path[1]) if len(path) == 2 else 0,
        username=parts.username or None,
        password=parts.password or None,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1, (redis.ConnectionError,)),
    )
    return client


def make_cluster_client(url: str, socket_timeout: float = 1.0) -> LazyCluster:
    """A Redis Cluster client from a ``redis+cluster://host:port,host:port`` URL, or from a
    ``redis://`` URL naming one node (``RedisStore(..., cluster=True)``): redis-py's
    `RedisCluster`, which learns the slots' owners from the nodes and follows them when they
    move (a replica taking over a failed master), made on first use (`LazyCluster`).

    Raises:
        ConfigurationError: a bad URL (nothing is connected).
    """
    shown = masked_url(url)
    check_timeout(socket_timeout)
    scheme = url.partition("://")[0].lower()
    if scheme == CLUSTER:
        return _cluster_client(url, shown, socket_timeout)
    if scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"store URL {shown!r}: not a Redis Cluster URL")
    if urlsplit(url).path.strip("/") not in ("", "0"):
        raise ConfigurationError(f"store URL {shown!r}: a Redis Cluster has no database number")
    return LazyCluster(
        lambda: RedisCluster.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
        )
    )


def store_client(url: str, socket_timeout: float, cluster: bool) -> Client:
    """The client of a store URL: a cluster's (``redis+cluster://``, or with ``cluster``), a
    sentinel set's master's (``redis+sentinel://host:port,.../master[/db]``, found again after
    a failover), or `make_client`'s.

    Raises:
        ConfigurationError: a bad URL or option (nothing is connected).
    """
    scheme = url.partition("://")[0].lower()
    if cluster or scheme == CLUSTER:
        return make_cluster_client(url, socket_timeout)
    if scheme == SENTINEL:
        check_timeout(socket_timeout)
        return _sentinel_client(url, masked_url(url), socket_timeout)
    return make_client(url, socket_timeout)


Client = redis.Redis | RedisCluster | LazyCluster
"""A store's client: one server (or a Sentinel set's master), or a Redis Cluster."""
