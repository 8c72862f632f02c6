"""The redis-py client of a `RedisStore`: its URL, its timeouts and retry, and its errors.

Also the checks of a key prefix, shared with the per-tenant factory.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.exceptions import RedisClusterException
    from redis.retry import Retry
    from redis.sentinel import Sentinel
except ImportError as exc:  # pragma: no cover - exercised where redis-py is not installed
    raise ImportError(f"RedisStore needs redis-py: pip install 'failover[redis]' ({exc})") from exc

from ...errors import ConfigurationError, StoreError

__all__ = [
    "DEFAULT_PREFIX",
    "Client",
    "Commands",
    "Errors",
    "Keys",
    "LazyCluster",
    "checked_prefix",
    "make_client",
    "make_cluster_client",
    "masked",
    "split_url",
    "store_client",
]

DEFAULT_PREFIX = "failover:"
_PREFIX = re.compile(r"[!-~]{0,100}")  # printable ASCII, no spaces: readable in redis-cli
_SCHEMES = ("redis", "rediss", "unix")
CLUSTER = "redis+cluster"
SENTINEL = "redis+sentinel"
_INF = float("inf")
_ERRORS = (redis.RedisError, RedisClusterException)


def masked(url: str) -> str:
    """``url`` with its password masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def checked_prefix(prefix: object, owner: str) -> str:
    """``prefix``, checked for use as a key prefix.

    Raises:
        ConfigurationError: not printable ASCII without spaces (at most 100 characters).
    """
    if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None:
        raise ConfigurationError(
            f"{owner}: prefix must be printable ASCII without spaces (at most 100 characters), "
            f"got {prefix!r}"
        )
    return prefix


def split_url(url: str) -> tuple[str, str | None]:
    """A ``redis://``/``rediss://``/``unix://`` URL without its ``prefix`` option, and that
    option (``None`` when absent); the other options are redis-py's own."""
    parts = urlsplit(url)
    options = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [v for k, v in options if k == "prefix"]
    if not prefixes:
        return url, None
    rest = urlencode([(k, v) for k, v in options if k != "prefix"])
    # Not urlunsplit: it would turn unix:///path into unix:/path.
    return url.partition("?")[0] + (f"?{rest}" if rest else ""), prefixes[-1]


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
    shown = masked(url)
    _check_timeout(socket_timeout)
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


def _check_timeout(socket_timeout: object) -> None:
    if not isinstance(socket_timeout, int | float) or not 0 < socket_timeout < _INF:
        raise ConfigurationError(
            f"RedisStore: socket_timeout must be a positive number of seconds, "
            f"got {socket_timeout!r}"
        )


def store_client(url: str, socket_timeout: float, cluster: bool) -> Client:
    """The client of a store URL: a cluster's (``redis+cluster://``, or with ``cluster``), or
    `make_client`'s."""
    if cluster or url.partition("://")[0].lower() == CLUSTER:
        return make_cluster_client(url, socket_timeout)
    return make_client(url, socket_timeout)


def make_client(url: str, socket_timeout: float = 1.0) -> redis.Redis:
    """A redis-py client for a store URL: connections are made on first use, every socket
    operation gives up after ``socket_timeout`` seconds, and a command is retried once, at once,
    on a dropped connection (a restarted server), never on a timeout.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS),
            ``unix:///path/to/redis.sock[?db=N]``, ``redis+sentinel://host:port,.../master[/db]``
            (the master the sentinels name, found again after a failover) or
            with redis-py's query options
            (``socket_timeout``, ``socket_connect_timeout``, ``max_connections``...), which win
            over ``socket_timeout``.
        socket_timeout: the default for both the connect and the read/write timeouts.

    Raises:
        ConfigurationError: not such a URL, or an option redis-py refuses (the password masked).
    """
    scheme = url.partition("://")[0].lower() if isinstance(url, str) else ""
    shown = masked(url) if isinstance(url, str) else repr(url)
    if scheme == SENTINEL:
        _check_timeout(socket_timeout)
        return _sentinel_client(url, shown, socket_timeout)
    if scheme not in _SCHEMES:
        raise ConfigurationError(
            f"store URL {shown!r} is not a Redis URL (redis://, rediss://, unix://, "
            "redis+sentinel:// or redis+cluster://)"
        )
    database = urlsplit(url).path.strip("/") if scheme != "unix" else ""
    if database and not database.isdigit():  # redis-py would quietly use database 0
        raise ConfigurationError(
            f"store URL {shown!r}: the database must be a number (redis://host:6379/0)"
        )
    _check_timeout(socket_timeout)
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 1, (redis.ConnectionError,)),
        )
        # redis-py keeps the URL's options for the first connection: an unknown one would fail
        # there, at the first call. A connection object made here (not connected) checks them.
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
    except ValueError as exc:
        raise ConfigurationError(f"store URL {shown!r}: {exc}") from None
    except TypeError as exc:
        raise ConfigurationError(
            f"store URL {shown!r}: an option redis-py refuses ({exc})"
        ) from None
    return client


Client = redis.Redis | RedisCluster | LazyCluster
"""A store's client: one server (or a Sentinel set's master), or a Redis Cluster."""


class Errors:
    """Turns redis-py's errors (an unreachable server, a timeout, a refused command) into
    `StoreError` naming the store and the operation."""

    __slots__ = ("operation", "where")

    def __init__(self, where: str, operation: str) -> None:
        self.where = where
        self.operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and isinstance(exc, _ERRORS):
            raise StoreError(f"{self.where}: {self.operation} failed: {exc}") from exc


class Keys:
    """The Redis keys of one store, under its prefix (a failover name ``N`` percent-encoded, so
    that a ``:`` in a name can never make two entries share a key).

    Args:
        prefix: the store's key prefix.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.names = f"{prefix}names"
        """The set of the names that have entries."""
        self._entry_prefixes: dict[str, str] = {}  # name -> "{prefix}e:{N}:"

    def entries(self, name: str) -> str:
        """What the keys of ``name``'s entries start with: ``{prefix}e:{N}:``."""
        found = self._entry_prefixes.get(name)
        if found is None:
            if len(self._entry_prefixes) > 10_000:  # names come from code: this is a safeguard
                self._entry_prefixes.clear()
            found = self._entry_prefixes[name] = f"{self.prefix}e:{quote(name, safe='')}:"
        return found

    def index(self, name: str) -> str:
        """``name``'s index of keys scored by expiry (ms): ``{prefix}i:{N}``."""
        return f"{self.prefix}i:{quote(name, safe='')}"

    def lex(self, name: str) -> str:
        """``name``'s index of keys in key order (every score 0, read ``BYLEX``):
        ``{prefix}k:{N}``."""
        return f"{self.prefix}k:{quote(name, safe='')}"


class Commands:
    """Runs a store's commands, its errors turned into `StoreError` naming the store.

    Args:
        client: the redis-py client.
        where: the store, as error messages name it.
    """

    def __init__(self, client: Client, where: str) -> None:
        self.client = client
        self.where = where
        self.cluster = isinstance(client, RedisCluster | LazyCluster)
        """Whether the keys spread over a Redis Cluster's slots: a command may name the keys
        of one slot only."""

    def one(self, operation: str, *command: Any) -> Any:
        """One command's reply."""
        with Errors(self.where, operation):  # a cluster's client is made on first use
            execute: Callable[..., Any] = self.client.execute_command  # untyped in redis-py
            return execute(*command)

    def pipelined(self, operation: str, commands: Iterable[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands``, sent in one round trip (not a transaction)."""
        with Errors(self.where, operation):
            pipe = self.client.pipeline(transaction=False)
            queue: Callable[..., Any] = pipe.execute_command  # untyped in redis-py
            for command in commands:
                queue(*command)
            replies: list[Any] = pipe.execute()
            return replies

    def mget(self, operation: str, keys: list[str]) -> list[Any]:
        """The values of ``keys`` (``None`` where missing): one ``MGET``; on a cluster one per
        slot, sent in one pipeline per node, to every node at once."""
        with Errors(self.where, operation):
            if self.cluster:
                return list(self.client.mget_nonatomic(keys))  # type: ignore[union-attr]
            execute: Callable[..., Any] = self.client.execute_command
            found: list[Any] = execute("MGET", *keys)
            return found

    def spread(
        self, command: str, first: Iterable[Any], keys: Iterable[str]
    ) -> list[tuple[Any, ...]]:
        """``command`` over ``keys`` as commands to pipeline: one, or one per key on a cluster
        (a command names the keys of one slot only)."""
        if self.cluster:
            return [(command, *first, k) for k in keys]
        return [(command, *first, *keys)]
