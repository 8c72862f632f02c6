"""The fleet: where the processes of one service coordinate, through one Redis
(``Failover(fleet="redis://…")``).

Everything on it is owned by the library and held to a store's rules. Its Redis is only ever
spoken to by one daemon thread per process, with bounded socket timeouts: never on a caller's
thread, never on an event loop. Each tick (`SYNC_EVERY`) the thread runs one pipelined round
made of the fleet's parts (today the engine's breakers, `failover.execution.fleet_state`), and
it runs one at once when a part asks (a transition to publish, a trial lease to take). While
Redis does not answer, every part keeps working in this process alone; the trouble is counted
as a store's (``failover_store_up{store="fleet"}`` 0, ``failover_store_errors_total{store=
"fleet",operation="sync",reason=…}``) and logged once, then at most once per `LOG_EVERY` with a
count; the next round that gets through re-syncs (what this process decided meanwhile is
published, what the others published is applied). A forked child starts its thread, its
connections and its lease token anew.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import pybreaker

from ..errors import ConfigurationError
from ..execution.fleet_state import FleetStorage, SharedBreakers
from ..forks import AfterFork
from ..health import StoreHealth
from ..masking import masked_url

__all__ = ["LABEL", "LEASE_TTL", "LOG_EVERY", "SYNC_EVERY", "Fleet", "make_fleet"]

log = logging.getLogger("failover.fleet")

LABEL = "fleet"  # the ``store`` label of its health
SYNC_EVERY = 0.5  # seconds between rounds: another process's trip is seen within about this
LEASE_TTL = 5.0  # seconds a half-open trial lease lives (a crashed holder frees it then)
LOG_EVERY = 60.0  # seconds between two log lines about the same outage
DEFAULT_PREFIX = "failover:fleet:"


class Part(Protocol):
    """What a part of the fleet gives a round (see `SharedBreakers.commands`)."""

    def commands(self, pipe: Any) -> Any: ...


class Fleet:
    """One process's side of the fleet: a Redis client of its own, a daemon thread, the parts.

    Args:
        target: a ``redis://``/``rediss://``/``unix://`` URL (``?prefix=`` sets the key prefix,
            default ``failover:fleet:``), or a `redis.Redis` / `redis.asyncio.Redis` client,
            whose connection settings are copied into a client of the fleet's own (with the
            fleet's socket timeouts).
        timeout: seconds before a connect, a read or a write gives up.
        owner: what error messages name.

    Raises:
        ConfigurationError: neither a Redis URL nor a Redis client.
    """

    def __init__(self, target: object, timeout: float = 0.5, owner: str = "Failover") -> None:
        self.timeout = timeout
        self._make, self.shown, prefix = _client_factory(target, timeout, owner)
        self.client: Any = self._make()
        self.up = True  # until a round fails: the parts then keep to this process
        self.errors: Counter[tuple[str, str]] = Counter()  # (operation, reason) -> count
        self.failed_rounds = 0
        self.breakers = SharedBreakers(self, prefix, LEASE_TTL, _notice)
        self.parts: list[Part] = [self.breakers]
        self.synced = threading.Event()  # set after each round that got through
        self._wake = threading.Event()
        self._round = threading.Lock()  # one round at a time (the thread's, or `sync`'s)
        self._closed = False
        self._logged_at = 0.0
        self._unlogged = 0
        self._thread: threading.Thread | None = None
        self._start()
        _FORKS.add(self)

    def __repr__(self) -> str:
        return f"Fleet({self.shown!r}, up={self.up})"

    # -- the breakers' side --------------------------------------------------------------------

    def breaker_storage(self, name: str) -> FleetStorage:
        """The shared state of the engine's breaker ``name``."""
        return self.breakers.storage(name)

    def attach(self, breaker: pybreaker.CircuitBreaker, storage: FleetStorage) -> None:
        """``breaker`` uses ``storage``: a state another process published reaches its
        listeners from the thread."""
        self.breakers.attach(breaker, storage)
        self.wake()

    # -- the thread ----------------------------------------------------------------------------

    def wake(self) -> None:
        """Run a round now (a transition to publish, a lease to take); never waits."""
        self._wake.set()

    def sync(self) -> bool:
        """Run one round on this thread, after the thread's round in progress if any; return
        whether it got through. For tests and tools: callers never need it."""
        with self._round:
            return self._sync_once()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="failover-fleet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            with self._round:
                if self._closed:
                    return
                self._sync_once()
            self._wake.wait(SYNC_EVERY)
            self._wake.clear()

    def _sync_once(self) -> bool:
        pipe = self.client.pipeline(transaction=False)
        rounds = [part.commands(pipe) for part in self.parts]
        try:
            if not pipe.command_stack:
                pipe.ping()
            answers = pipe.execute()
        except Exception as exc:
            for one in rounds:
                one.failed()
            self._trouble(exc)
            return False
        at = 0
        for one in rounds:
            try:
                one.replies(answers[at : at + one.count])
            except Exception:  # a record another version wrote: this part's round is lost
                log.warning("fleet %s: reading the replies failed", self.shown, exc_info=True)
            at += one.count
        self._answered()
        return True

    def _trouble(self, exc: BaseException) -> None:
        import redis

        reason = "timeout" if isinstance(exc, redis.TimeoutError | TimeoutError) else "error"
        self.errors[("sync", reason)] += 1
        self.failed_rounds += 1
        now = time.monotonic()
        if self.up:
            self.up = False
            self._logged_at, self._unlogged = now, 0
            log.warning(
                "fleet %s: unreachable (%s); breakers keep working in this process alone "
                "until it answers",
                self.shown,
                type(exc).__name__,
                exc_info=True,
            )
        elif now - self._logged_at >= LOG_EVERY:
            log.warning(
                "fleet %s: still unreachable (%s), %d failed rounds since the last line",
                self.shown,
                type(exc).__name__,
                self._unlogged + 1,
            )
            self._logged_at, self._unlogged = now, 0
        else:
            self._unlogged += 1

    def _answered(self) -> None:
        if not self.up:
            log.warning(
                "fleet %s: answers again after %d failed rounds; breaker states re-synced",
                self.shown,
                self.failed_rounds,
            )
            self.failed_rounds = 0
            self.up = True
        self.synced.set()

    # -- health, fork, close -------------------------------------------------------------------

    def health(self) -> StoreHealth:
        """The fleet's health, as a store's (``HealthReport.stores``)."""
        errors: Counter[str] = Counter()
        for (_, reason), n in list(self.errors.items()):
            errors[reason] += n
        return StoreHealth(LABEL, "up" if self.up else "down", dict(errors))

    def forked(self) -> None:
        """In a forked child: new locks, a new client (the parent's sockets are the parent's),
        a new lease token, and a thread of its own (the parent's did not come along)."""
        self._round = threading.Lock()
        self._wake = threading.Event()
        self.synced = threading.Event()
        _unlock(self.client)
        self.client = self._make()
        self.breakers.forked()
        if not self._closed:
            self._start()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread and close the client; return whether the thread ended in time (a
        round in progress ends within the socket timeout)."""
        self._closed = True
        self._wake.set()
        thread = self._thread
        ended = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            ended = not thread.is_alive()
        _FORKS.discard(self)
        try:
            self.client.close()
        except Exception:
            log.debug("fleet %s: closing the client failed", self.shown, exc_info=True)
        return ended

    close = stop


def _unlock(client: Any) -> None:
    """Give the parent's client, dropped in a forked child, new locks: its connection pool's
    may have been held by the parent's fleet thread at the fork, and closing it (when it is
    collected) would wait for them for ever (redis-py's pool resets itself in a child under its
    lock)."""
    pool = getattr(client, "connection_pool", None)
    for name in ("_lock", "_fork_lock"):
        held = getattr(pool, name, None)
        if held is not None:
            setattr(pool, name, type(held)())


def _notice(breaker: pybreaker.CircuitBreaker) -> None:
    """Let ``breaker`` notice the state applied to its storage: its listeners (the metrics, the
    health) hear of it now, not at the next call."""
    try:
        breaker.state  # noqa: B018 - pybreaker's property notices a changed storage
    except Exception:
        log.warning("circuit breaker %r: a listener failed", breaker.name, exc_info=True)


def make_fleet(value: object, timeout: float | None) -> Fleet | None:
    """The engine's `Fleet` for its ``fleet=`` setting (``None``: none).

    Raises:
        ConfigurationError: not a Redis URL nor a Redis client, naming ``fleet``.
    """
    if value is None:
        return None
    return Fleet(value, timeout if timeout is not None else 0.5)


_FORKS = AfterFork(Fleet.forked)

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


def _client_factory(
    target: object, timeout: float, owner: str
) -> tuple[Callable[[], Any], str, str]:
    """``(make a client, the fleet as shown, the key prefix)``."""
    try:
        import redis
        import redis.asyncio
    except ImportError as exc:  # pragma: no cover - where redis-py is not installed
        raise ConfigurationError(
            f"{owner}: fleet needs redis-py: pip install 'failover[redis]' ({exc})"
        ) from exc
    if isinstance(target, str):
        from ..stores.backends.redis.client import checked_prefix, make_client, split_url

        try:
            url, prefix = split_url(target)
            prefix = checked_prefix(DEFAULT_PREFIX if prefix is None else prefix, owner)
            make_client(url, timeout)  # checked now: a bad URL fails the engine, not the thread
        except ConfigurationError as exc:
            raise ConfigurationError(f"{owner}: fleet: {exc}") from None
        return (lambda: make_client(url, timeout)), masked_url(target), prefix
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
        return (lambda: redis.Redis(**kwargs)), shown, DEFAULT_PREFIX
    raise ConfigurationError(
        f"{owner}: fleet must be a Redis URL (redis://, rediss://, unix://) or a redis.Redis / "
        f"redis.asyncio.Redis client, got {target!r}"
    )
