"""The fleet: where the processes of one service coordinate, through one Redis
(``Failover(fleet="redis://…")``).

Everything on it is owned by the library and held to a store's rules, with bounded socket
timeouts. Each tick (`SYNC_EVERY`) one daemon thread per process runs one pipelined round made
of the fleet's parts (the engine's breakers, `failover.execution.fleet_state`; the flights'
leases, `failover.fleet.leases`; the bus's outgoing messages, `failover.fleet.bus`), and it
runs one at once when a part asks (a transition to publish, a trial lease to take, a message
to send). Two things talk to Redis elsewhere: a single-flight call takes its key's lease on
its own thread, or on its event loop through ``redis.asyncio`` (never a blocking call on a
loop), within the socket timeout; and the bus's subscriber thread reads the fleet's channel
(`failover.fleet.backplane` keeps near copies coherent with it). While
Redis does not answer, every part keeps working in this process alone; the trouble is counted
as a store's (``failover_store_errors_total{store="fleet",operation="sync",reason=…}``) and
the change is told once to the engine's stream (`failover.events.Observer.fleet_state`), whose
observers show it (``failover_store_up{store="fleet"}`` 0, ``HealthReport.stores``) and log
it, once per outage (`failover.fleet.observers`); the next round that gets through re-syncs
(what this process decided meanwhile is published, what the others published is applied, the
near copies are dropped) and tells that it answers again. The fleet's flights, messages,
resyncs and cleanup turns are told to that stream too. A forked child
starts its threads, its connections and its lease token anew.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import pybreaker

from ..events import Events
from ..execution.fleet_state import FleetStorage, SharedBreakers
from ..forks import AfterFork
from .backplane import Backplane
from .bus import Bus
from .cleanup import CleanupTurns
from .clients import AsyncClients, target_of
from .leases import FlightLeases

__all__ = ["LABEL", "LEASE_TTL", "SYNC_EVERY", "Fleet", "make_fleet"]

log = logging.getLogger("failover.fleet")

LABEL = "fleet"  # the ``store`` label of its health
SYNC_EVERY = 0.5  # seconds between rounds: another process's trip is seen within about this
LEASE_TTL = 5.0  # seconds a half-open trial lease lives (a crashed holder frees it then)


class Part(Protocol):
    """What a part of the fleet gives a round (see `SharedBreakers.commands`)."""

    def commands(self, pipe: Any) -> Any: ...


class Fleet:
    """One process's side of the fleet: a Redis client of its own, a daemon thread, the parts.

    Args:
        target: a ``redis://``/``rediss://``/``unix://`` URL (``?prefix=`` sets the key prefix,
            default ``failover:fleet:``), a ``redis+sentinel://`` or ``redis+cluster://`` URL,
            or a `redis.Redis` / `redis.asyncio.Redis` / `redis.cluster.RedisCluster` client,
            whose connection settings are copied into a client of the fleet's own (with the
            fleet's socket timeouts).
        timeout: seconds before a connect, a read or a write gives up.
        owner: what error messages name.

    Raises:
        ConfigurationError: neither a Redis URL nor a Redis client.
    """

    def __init__(self, target: object, timeout: float = 0.5, owner: str = "Failover") -> None:
        self.timeout = timeout
        self.target = target_of(target, timeout, owner)
        self.shown = self.target.shown
        self._make = self.target.make
        self.client: Any = self._make()
        self._async = (
            None if self.target.make_async is None else AsyncClients(self.target.make_async)
        )
        self.up = True  # until a round fails: the parts then keep to this process
        self.errors: Counter[tuple[str, str]] = Counter()  # (operation, reason) -> count
        self.failed_rounds = 0  # operations failed since the fleet went out
        # Where the fleet tells its changes: the engine's stream (`observe`); none until then.
        self.events: Events = Events(())
        self._down: tuple[str, BaseException] | None = None  # what took it out, while out
        prefix = self.target.prefix
        self.breakers = SharedBreakers(self, prefix, LEASE_TTL, _notice)
        token = uuid.uuid4().hex
        self.flights = FlightLeases(self, prefix, token)
        self.bus = Bus(self, f"{prefix}bus", token)
        self.bus.handlers["f"] = self.flights.heard
        self.cleanups = CleanupTurns(self, f"{prefix}cleanup", token)
        self.backplane = Backplane(self.bus)
        self.bus.handlers["n"] = self.backplane.heard
        self.bus.resyncs.append(self.backplane.resync)
        # The bus last: what the others put on it in a round goes out in that round.
        self.parts: list[Part] = [self.breakers, self.flights, self.bus]
        self._trouble_lock = threading.Lock()
        self.synced = threading.Event()  # set after each round that got through
        self._wake = threading.Event()
        self._round = threading.Lock()  # one round at a time (the thread's, or `sync`'s)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start()
        self.bus.start()
        _FORKS.add(self)

    def __repr__(self) -> str:
        return f"Fleet({self.shown!r}, up={self.up})"

    def observe(self, events: Events) -> None:
        """Tell ``events`` (the engine's stream) the fleet's changes from now on: its state
        (`failover.events.Observer.fleet_state`; an outage already begun is told at once), its
        flights, messages, resyncs and cleanup turns."""
        with self._trouble_lock:
            self.events = events
            down = self._down
            if down is not None:
                events.fleet_state(False, down[0], down[1], self.failed_rounds)

    # -- the breakers' side --------------------------------------------------------------------

    def breaker_storage(self, name: str) -> FleetStorage:
        """The shared state of the engine's breaker ``name``."""
        return self.breakers.storage(name)

    def attach(self, breaker: pybreaker.CircuitBreaker, storage: FleetStorage) -> None:
        """``breaker`` uses ``storage``: a state another process published reaches its
        listeners from the thread."""
        self.breakers.attach(breaker, storage)
        self.wake()

    # -- the other parts' side -----------------------------------------------------------------

    def send(self, kind: str, items: Sequence[Any]) -> None:
        """Queue a message for the bus (`failover.fleet.bus.Bus.send`); never waits."""
        self.bus.send(kind, items)

    def async_client(self) -> Any:
        """The running loop's ``redis.asyncio`` client; ``None`` where the fleet has none (a
        cluster, a Sentinel set: async callers then use a worker thread)."""
        return None if self._async is None else self._async.get()

    def subscriber(self) -> Any:
        """A new subscription object (its own connection), for the bus's thread."""
        return self.client.pubsub()

    def trouble(self, operation: str, exc: BaseException) -> None:
        """``operation`` on the fleet's Redis failed (``exc``): counted as a failed round is,
        and told as one (once per outage); the parts keep to this process until a round gets
        through."""
        self._trouble(exc, operation)

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
        try:  # a cluster's client is made on first use: it may fail here
            pipe = self.client.pipeline(transaction=False)
        except Exception as exc:
            self._trouble(exc)
            return False
        rounds = [part.commands(pipe) for part in self.parts]
        try:
            if not pipe.command_stack:
                pipe.execute_command("PING")
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

    def _trouble(self, exc: BaseException, operation: str = "sync") -> None:
        with self._trouble_lock:  # from the threads and from callers (a lease asked for)
            self._troubled(exc, operation)

    def _troubled(self, exc: BaseException, operation: str) -> None:
        import redis

        reason = "timeout" if isinstance(exc, redis.TimeoutError | TimeoutError) else "error"
        self.errors[(operation, reason)] += 1
        self.failed_rounds += 1
        if self.up:  # told once per outage: its observers log it, count it, show it
            self.up = False
            self.failed_rounds = 1
            self._down = (operation, exc)
            self.events.fleet_state(False, operation, exc, 1)

    def _answered(self) -> None:
        if not self.up:
            with self._trouble_lock:
                if not self.up:
                    self.up = True
                    self._down = None
                    self.events.fleet_state(True, "sync", None, self.failed_rounds)
                    self.failed_rounds = 0
        self.synced.set()

    # -- fork, close -------------------------------------------------------------------

    def forked(self) -> None:
        """In a forked child: new locks, a new client (the parent's sockets are the parent's),
        a new lease token, and a thread of its own (the parent's did not come along)."""
        self._round = threading.Lock()
        self._wake = threading.Event()
        self.synced = threading.Event()
        self._trouble_lock = threading.Lock()
        _unlock(self.client)
        self.client = self._make()
        if self._async is not None:
            self._async.forked()
        self.breakers.forked()
        token = uuid.uuid4().hex
        self.flights.token = self.bus.token = self.cleanups.token = token
        self.flights.forked()
        if not self._closed:
            self._start()
        self.bus.forked()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread and close the client; return whether the thread ended in time (a
        round in progress ends within the socket timeout)."""
        self._closed = True
        self.flights.close()  # its waiters fly per process: nobody would wake them
        self._wake.set()
        thread = self._thread
        ended = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            ended = not thread.is_alive()
        if ended and timeout != 0 and self.bus.pending():
            # What this process wrote last is told to the others (one round, bounded by the
            # socket timeout): the engine stops its fleet after its store, so this includes
            # the writes the store's queue landed while it closed.
            with self._round:
                self._sync_once()
        ended = self.bus.stop(timeout) and ended
        _FORKS.discard(self)
        try:
            self.client.close()
        except Exception:
            log.debug("fleet %s: closing the client failed", self.shown, exc_info=True)
        return ended

    close = stop

    async def aclose(self) -> None:
        """Close the running loop's ``redis.asyncio`` client (`Failover.aclose` calls it on
        its loop); the thread and the other clients are `stop`'s."""
        if self._async is not None:
            try:
                await self._async.aclose()
            except Exception:
                log.debug("fleet %s: closing an async client failed", self.shown, exc_info=True)


def _unlock(client: Any) -> None:
    """Give the parent's client, dropped in a forked child, new locks: its connection pool's
    may have been held by the parent's fleet thread at the fork, and closing it (when it is
    collected) would wait for them for ever (redis-py's pool resets itself in a child under its
    lock)."""
    from ..stores.backends.redis.topology import LazyCluster

    if isinstance(client, LazyCluster) or type(client).__name__ == "RedisCluster":
        return  # no pool of the fleet thread's to unlock (a cluster's are per node)
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
