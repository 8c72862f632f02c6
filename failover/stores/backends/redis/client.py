"""The redis-py client of a `RedisStore`: its URL, its timeouts and retry, and its errors.

Also the checks of a key prefix, shared with the per-tenant factory.
"""

from __future__ import annotations

import re
from types import TracebackType
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisClusterException
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - exercised where redis-py is not installed
    raise ImportError(f"RedisStore needs redis-py: pip install 'failover[redis]' ({exc})") from exc

from ....errors import ConfigurationError, StoreError
from ....masking import masked_url

__all__ = [
    "DEFAULT_PREFIX",
    "Errors",
    "Keys",
    "check_timeout",
    "checked_prefix",
    "make_client",
    "split_url",
]

DEFAULT_PREFIX = "failover:"
_PREFIX = re.compile(r"[!-~]{0,100}")  # printable ASCII, no spaces: readable in redis-cli
_SCHEMES = ("redis", "rediss", "unix")
_INF = float("inf")
_ERRORS = (redis.RedisError, RedisClusterException)


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


def check_timeout(socket_timeout: object) -> None:
    if not isinstance(socket_timeout, int | float) or not 0 < socket_timeout < _INF:
        raise ConfigurationError(
            f"RedisStore: socket_timeout must be a positive number of seconds, "
            f"got {socket_timeout!r}"
        )


def make_client(url: str, socket_timeout: float = 1.0) -> redis.Redis:
    """A redis-py client for a store URL: connections are made on first use, every socket
    operation gives up after ``socket_timeout`` seconds, and a command is retried once, at once,
    on a dropped connection (a restarted server), never on a timeout.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS) or
            ``unix:///path/to/redis.sock[?db=N]``, with redis-py's query options
            (``socket_timeout``, ``socket_connect_timeout``, ``max_connections``...), which win
            over ``socket_timeout``.
        socket_timeout: the default for both the connect and the read/write timeouts.

    Raises:
        ConfigurationError: not such a URL, or an option redis-py refuses (the password masked).
    """
    scheme = url.partition("://")[0].lower() if isinstance(url, str) else ""
    shown = masked_url(url) if isinstance(url, str) else repr(url)
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
    check_timeout(socket_timeout)
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
