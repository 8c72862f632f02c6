"""Single flight across the fleet (``single_flight="fleet"``): a short lease per key in the
fleet's Redis.

The process whose call takes a key's lease (``SET NX PX``, on the caller's own thread or, for
an ``async def`` failover, on its event loop through ``redis.asyncio``; bounded by the fleet's
socket timeout) calls the upstream and stores; the fleet's thread renews the lease every round
while that call runs (a holder killed stops renewing: the lease lapses within `FLIGHT_LEASE`),
and, once the result is stored, gives it back and tells the other processes on the bus
(kind ``"f"``). A call that finds the lease taken waits for that message, or at most for the
lease's time to live (then it asks again: a holder that died left it to lapse), within its own
budget. No Redis command is sent while it waits: the message wakes it (pub/sub), and the
lease's expiry bounds the wait when no message comes.

Each leader's step (it led, waited, flew per process or alone) is told to the engine's stream
(`failover.events.Observer.fleet_flight`), for the metrics and the logs.

Within a process, the calls of one key share one flight first (`failover.flight`): only its
leader asks the fleet. While the fleet's Redis does not answer, flights are per process
(counted in `FlightLeases.counts` and as the fleet's trouble, logged once).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["FLIGHT_LEASE", "FLIGHT_WAIT", "FlightLeases", "Taken", "Waiter"]

FLIGHT_LEASE = 3.0  # seconds a flight's lease lives without renewal (a dead holder's lapses)
FLIGHT_WAIT = 10.0  # seconds a call waits for another process's flight, without timeout=

# Takes the lease, or says who holds it and for how long.
_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, ARGV[1], 0} end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])}
"""
# Renews / gives back the lease only while it is still this process's.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0
"""


class Link(Protocol):
    """What the leases need of their fleet."""

    up: bool
    client: Any
    events: Any  # the engine's stream (`failover.events.Events`)

    def wake(self) -> None: ...

    def async_client(self) -> Any: ...

    def trouble(self, operation: str, exc: BaseException) -> None: ...

    def send(self, kind: str, items: Sequence[Any]) -> None: ...


class Taken:
    """The answer to a take: whether this call holds the lease (``held``), else the holder's
    call time (``as_of``, seconds since the epoch) and how long its lease lives (``ttl``)."""

    __slots__ = ("as_of", "held", "ttl")

    def __init__(self, held: bool, as_of: float, ttl: float) -> None:
        self.held = held
        self.as_of = as_of
        self.ttl = ttl


class Waiter:
    """A call waiting for another process's flight of one key: woken by its landing."""

    __slots__ = ("event", "future", "key", "loop", "ok")

    def __init__(self, key: str, loop: asyncio.AbstractEventLoop | None) -> None:
        self.key = key
        self.loop = loop
        self.event = threading.Event()
        self.future: asyncio.Future[None] | None = None if loop is None else loop.create_future()
        self.ok = False  # the holder said it stored a result

    def wake(self, ok: bool) -> None:
        """The flight landed (from the bus's thread)."""
        self.ok = self.ok or ok
        self.event.set()
        future, loop = self.future, self.loop
        if future is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits on it
                loop.call_soon_threadsafe(_done, future)

    def rearm(self) -> None:
        """Ready for the next wait (on the waiter's own thread or loop)."""
        self.event.clear()
        if self.loop is not None:
            self.future = self.loop.create_future()


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FlightLeases:
    """The flights' leases of one fleet, and the calls of this process waiting on others'.

    Args:
        link: the fleet.
        prefix: put before every key.
        token: this process's name on its leases.
    """

    def __init__(self, link: Link, prefix: str, token: str) -> None:
        self.link = link
        self.prefix = prefix
        self.token = token
        self.lease = FLIGHT_LEASE
        self.wait = FLIGHT_WAIT
        # led: took a lease; waited: waited for another process; local: flew per process
        # (the fleet did not answer, or closed); alone: a waiter's budget ran out and it
        # called itself. Each also told to the engine's stream (`count`).
        self.counts: Counter[str] = Counter()
        self.waited = threading.Event()  # set when a call starts waiting (tests and tools)
        self._held: dict[str, str] = {}  # key -> value: renewed each round until landed
        self._landed: list[tuple[str, str, bool]] = []  # (key, value, ok): to give back
        self._waiters: dict[str, set[Waiter]] = {}
        self._lock = threading.Lock()  # held for dict steps only, never around I/O
        self.closed = False  # the fleet stopped: flights are per process from then on

    def key(self, name: str, flight: Any) -> str | None:
        """The lease key of failover ``name``'s flight ``flight`` (``(tenant, key)`` when
        routed by tenant); ``None`` for a call that flies alone (no key)."""
        if isinstance(flight, str):
            parts: list[Any] = [name, None, flight]
        elif isinstance(flight, tuple) and len(flight) == 2 and isinstance(flight[1], str):
            parts = [name, str(flight[0]), flight[1]]
        else:
            return None
        digest = hashlib.blake2b(json.dumps(parts).encode(), digest_size=16).hexdigest()
        return f"{self.prefix}flight:{digest}"

    def forked(self) -> None:
        """In a forked child: the parent's leases and waiters are the parent's."""
        self._lock = threading.Lock()
        self._held, self._landed, self._waiters = {}, [], {}
        self.waited = threading.Event()

    # -- a call's side -------------------------------------------------------------------------

    def value(self, as_of: float) -> str:
        return f"{self.token}|{as_of!r}"

    def take(self, key: str, as_of: float) -> Taken:
        """Take ``key``'s lease for a call made at ``as_of``, on the caller's thread.

        Raises:
            Exception: the fleet's Redis did not answer (the caller flies per process).
        """
        value = self.value(as_of)
        return self._taken(key, value, self._ask(key, value))

    def _ask(self, key: str, value: str) -> Any:
        return self.link.client.eval(_TAKE, 1, key, value, int(self.lease * 1000))

    async def atake(self, key: str, as_of: float) -> Taken:
        """`take` on the event loop (``redis.asyncio``), or on a worker thread where the fleet
        has no async client (a cluster, a Sentinel set). A caller cancelled meanwhile does not
        wait for the answer; its ask goes on, and a lease it took all the same is given back
        once the answer comes (held, it would be renewed for ever: the key stuck)."""
        client = self.link.async_client()
        value = self.value(as_of)
        ask: Any = (
            asyncio.to_thread(self._ask, key, value)
            if client is None
            else client.eval(_TAKE, 1, key, value, int(self.lease * 1000))
        )
        task = asyncio.ensure_future(ask)
        try:
            reply = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(functools.partial(self._abandoned, key, value))
            raise
        return self._taken(key, value, reply)

    def _abandoned(self, key: str, value: str, task: asyncio.Future[Any]) -> None:
        """The answer to a cancelled caller's ask: a lease it took is given back (the others
        told, as after a failed flight)."""
        if task.cancelled() or task.exception() is not None:
            return
        reply = task.result()
        if isinstance(reply, list | tuple) and reply and int(reply[0]):
            with self._lock:
                self._landed.append((key, value, False))
            self.link.wake()

    def _taken(self, key: str, value: str, reply: Any) -> Taken:
        held, holder, ttl = int(reply[0]), reply[1], int(reply[2])
        if held:
            with self._lock:
                self._held[key] = value
            return Taken(True, 0.0, 0.0)
        if isinstance(holder, bytes):
            holder = holder.decode()
        as_of = 0.0
        with contextlib.suppress(ValueError):
            as_of = float(holder.rpartition("|")[2])
        # A negative TTL: the lease went meanwhile; ask again at once.
        return Taken(False, as_of, max(ttl, 0) / 1000)

    def landed(self, key: str, ok: bool) -> None:
        """The holder's flight ended (``ok``: its result is stored): the thread gives the lease
        back and tells the others; never waits."""
        with self._lock:
            value = self._held.pop(key, None)
            if value is None:
                return
            self._landed.append((key, value, ok))
        self.link.wake()

    def waiter(self, key: str, loop: asyncio.AbstractEventLoop | None) -> Waiter:
        """A waiter of ``key``, registered before the lease is asked for (a landing between the
        two is not missed)."""
        waiter = Waiter(key, loop)
        with self._lock:
            self._waiters.setdefault(key, set()).add(waiter)
        return waiter

    def close(self) -> None:
        """The fleet stops: every call waiting for another process's flight is woken (it then
        flies per process), and no lease is asked for any more."""
        self.closed = True
        with self._lock:
            waiters = [w for group in self._waiters.values() for w in group]
        for waiter in waiters:
            waiter.wake(False)

    def unwait(self, waiter: Waiter) -> None:
        with self._lock:
            found = self._waiters.get(waiter.key)
            if found is not None:
                found.discard(waiter)
                if not found:
                    del self._waiters[waiter.key]

    def count(self, name: str, result: str) -> None:
        """A flight of failover ``name`` ``led``, ``waited``, flew ``local`` or ``alone``
        (`failover.events.Observer.fleet_flight`): counted, and told to the engine's stream."""
        self.counts[result] += 1
        self.link.events.fleet_flight(name, result)
        if result == "waited":
            self.waited.set()

    # -- the bus's side ------------------------------------------------------------------------

    def heard(self, items: list[Any]) -> None:
        """Flights of other processes landed: their waiters here wake."""
        for item in items:
            if not isinstance(item, list) or len(item) != 2:
                continue
            with self._lock:
                waiters = list(self._waiters.get(item[0], ()))
            for waiter in waiters:
                waiter.wake(bool(item[1]))

    # -- the fleet thread's side: a part of its round ------------------------------------------

    def commands(self, pipe: Any) -> _Round:
        """Give back the landed leases (and tell the others), renew the held ones."""
        with self._lock:
            landed, self._landed = self._landed, []
            held = list(self._held.items())
        ttl = int(self.lease * 1000)
        for key, value, _ in landed:
            pipe.execute_command("EVAL", _RELEASE, 1, key, value)
        for key, value in held:
            pipe.execute_command("EVAL", _RENEW, 1, key, value, ttl)
        if landed:
            self.link.send("f", [[key, ok] for key, _, ok in landed])
        return _Round(len(landed) + len(held))


class _Round:
    def __init__(self, count: int) -> None:
        self.count = count

    def replies(self, answers: Sequence[Any]) -> None:
        """Given back and renewed (a lease lost meanwhile is the next holder's)."""

    def failed(self) -> None:
        """Not renewed: the lease lapses unless the next round gets through in time; a lease
        not given back lapses on its own."""
