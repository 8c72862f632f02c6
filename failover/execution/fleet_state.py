"""A breaker's state shared by the processes of a fleet (`failover.fleet.Fleet`), read from memory.

`FleetStorage` is the `pybreaker.CircuitBreakerStorage` of a breaker made by an engine with
``fleet=``: the call path reads and counts in this process's memory, as pybreaker's own memory
storage does; a transition to ``open`` or ``closed`` is handed to the fleet's background thread
(never a round trip on the caller's thread), and what other processes published is applied
here by that thread. Failures are counted per process: what the fleet shares is the verdict (a
trip, a close), not each failure.

Half-open under a healthy fleet lets one trial through for the whole fleet: the process that
holds the breaker's trial lease (a short-lived Redis key, taken by the background thread when a
call asked for a trial) runs it; the others keep refusing until the verdict is published. While
the fleet is unreachable, the breaker keeps pybreaker's rules in this process alone.

`SharedBreakers` is the fleet's part that keeps these storages in step with Redis: one
pipelined round per tick (publications, lease releases and takes, one ``MGET`` of every state).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import pybreaker

__all__ = ["RENEW_FOR", "FleetStorage", "Round", "SharedBreakers"]

# Seconds a running trial's lease is renewed at most: a trial hung for longer (an upstream
# without a timeout) lets the lease lapse, and another process may try.
RENEW_FOR = 60.0
_OPEN = pybreaker.STATE_OPEN
_CLOSED = pybreaker.STATE_CLOSED
_SHARED = (_OPEN, _CLOSED)  # half-open is this process's trial, never published
# Gives the lease back only while it is still this process's (it may have expired and been
# taken by another process meanwhile).
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


# Takes the lease, or renews it when this process holds it already: an ask whose reply was lost
# (a round that timed out after Redis ran it) would otherwise leave the lease held by this
# process unknowingly, and every process refusing the trial until it lapsed.
_TAKE = (
    "local v = redis.call('GET', KEYS[1]) "
    "if v == false or v == ARGV[1] then "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end return 0"
)


class Link(Protocol):
    """What a storage needs of its fleet: whether it answers, and a way to wake its thread."""

    @property
    def up(self) -> bool: ...

    def wake(self) -> None: ...


class FleetStorage(pybreaker.CircuitBreakerStorage):
    """A breaker's state in this process's memory, published to and updated from the fleet.

    Args:
        name: the breaker's name (its keys in Redis).
        shared: the fleet's breakers part, which publishes and applies.
    """

    def __init__(self, name: str, shared: SharedBreakers) -> None:
        super().__init__("fleet")
        self.breaker_name = name
        self.shared = shared
        self.breaker: pybreaker.CircuitBreaker | None = None  # set by `SharedBreakers.attach`
        self._state = _CLOSED
        self._fails = 0
        self._successes = 0
        self._opened_at: datetime | None = None
        self.lease_until = 0.0  # monotonic: this process holds the fleet's trial until then
        self.wanted = False  # a call asked for the trial: the thread tries to take the lease
        # When this process's trial began (monotonic; 0.0: none runs): each round renews the
        # lease meanwhile, so that a trial slower than the lease's life is still the fleet's
        # only one; for `RENEW_FOR` seconds at most, so that a hung trial frees it in the end.
        self.trying = 0.0
        self.seen: str | None = None  # the id of the latest record applied or published here

    @property
    def state(self) -> str:
        """The state, in memory."""
        return self._state

    @state.setter
    def state(self, state: str) -> None:
        self._state = state
        if state in _SHARED:  # a verdict made here: published by the thread, not by the caller
            self.shared.publish(self)

    def increment_counter(self) -> None:
        """One more failure in a row (in this process)."""
        self._fails += 1

    def reset_counter(self) -> None:
        """No failure in a row."""
        self._fails = 0

    def increment_success_counter(self) -> None:
        """One more successful trial."""
        self._successes += 1

    def reset_success_counter(self) -> None:
        """No successful trial."""
        self._successes = 0

    @property
    def counter(self) -> int:
        """Failures in a row, in this process."""
        return self._fails

    @property
    def success_counter(self) -> int:
        """Successful trials in a row."""
        return self._successes

    @property
    def opened_at(self) -> datetime | None:
        """When the breaker last opened (in whichever process opened it)."""
        return self._opened_at

    @opened_at.setter
    def opened_at(self, when: datetime) -> None:
        self._opened_at = when

    def trial_allowed(self) -> bool:
        """Whether a call of this process may be the half-open trial: while the fleet answers,
        only when this process holds the lease (otherwise the thread is asked to take it);
        while it does not, always (pybreaker's rules, per process)."""
        if not self.shared.link.up or time.monotonic() < self.lease_until:
            return True
        self.wanted = True
        self.shared.link.wake()
        return False

    def apply(self, state: str, opened_at: datetime | None) -> None:
        """Take the state another process published (not published again)."""
        self._opened_at = opened_at
        self._state = state

    def forked(self) -> None:
        """In a forked child: the parent's lease is not the child's."""
        self.lease_until = 0.0
        self.wanted = False
        self.trying = 0.0


class SharedBreakers:
    """The breakers of one fleet: their publications, leases and the states read back.

    Args:
        link: the fleet (whether it answers; waking its thread).
        prefix: put before every key.
        lease_ttl: seconds a trial lease lives in Redis (a crashed holder frees it then).
        notice: ``breaker -> None``, run on the thread after a state was applied, so that the
            breaker's listeners (metrics, health) hear of it without a call.
    """

    def __init__(
        self,
        link: Link,
        prefix: str,
        lease_ttl: float,
        notice: Callable[[pybreaker.CircuitBreaker], None],
    ) -> None:
        self.link = link
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.notice = notice
        self.token = uuid.uuid4().hex  # this process's name on the leases it takes
        self.storages: dict[str, FleetStorage] = {}
        self._pending: dict[str, tuple[dict[str, Any], bool]] = {}
        self._lock = threading.Lock()  # held for dict steps only, never around I/O

    def storage(self, name: str) -> FleetStorage:
        """The storage of breaker ``name`` (one per name on this fleet)."""
        with self._lock:
            found = self.storages.get(name)
            if found is None:
                found = self.storages[name] = FleetStorage(name, self)
            return found

    def attach(self, breaker: pybreaker.CircuitBreaker, storage: FleetStorage) -> None:
        """``breaker`` is the one using ``storage``: its listeners hear applied states."""
        storage.breaker = breaker

    def publish(self, storage: FleetStorage) -> None:
        """Queue the storage's state for the thread (the newest per breaker), and give the trial
        lease back with it when this process held it (the trial's verdict)."""
        opened = storage.opened_at
        record: dict[str, Any] = {
            "state": storage.state,
            "opened_at": None if opened is None else opened.timestamp(),
            "id": uuid.uuid4().hex,
        }
        release = storage.lease_until > 0.0
        storage.lease_until = 0.0
        storage.seen = record["id"]
        with self._lock:
            previous = self._pending.get(storage.breaker_name)
            self._pending[storage.breaker_name] = (
                record,
                release or bool(previous and previous[1]),
            )
        self.link.wake()

    def forked(self) -> None:
        """In a forked child: a token of its own, no lease, a new lock."""
        self._lock = threading.Lock()
        self.token = uuid.uuid4().hex
        for storage in list(self.storages.values()):
            storage.forked()

    # -- one round, on the fleet's thread ------------------------------------------------------

    def key(self, name: str) -> str:
        """The key of breaker ``name``'s state."""
        return f"{self.prefix}breaker:{name}"

    def commands(self, pipe: Any) -> Round:
        """Put this round's commands on ``pipe`` (a redis-py pipeline): the queued states, the
        lease releases and takes, one ``MGET`` of every state."""
        with self._lock:
            pending, self._pending = self._pending, {}
            storages = list(self.storages.values())
        sent = 0
        for name, (record, release) in pending.items():
            pipe.set(self.key(name), json.dumps(record))
            sent += 1
            if release:
                pipe.execute_command("EVAL", _RELEASE, 1, self.key(name) + ":trial", self.token)
                sent += 1
        # Asked for by a refused call, or held by a trial still running (renewed).
        now = time.monotonic()
        wanted = [
            s
            for s in storages
            if (s.wanted and s.state != _CLOSED)
            or (s.trying and s.lease_until > 0.0 and now - s.trying < RENEW_FOR)
        ]
        ttl_ms = int(self.lease_ttl * 1000)
        renewals = {id(s) for s in wanted if not s.wanted}
        for s in wanted:
            s.wanted = False
            pipe.execute_command(
                "EVAL", _TAKE, 1, self.key(s.breaker_name) + ":trial", self.token, ttl_ms
            )
        if storages:
            pipe.execute_command("MGET", *[self.key(s.breaker_name) for s in storages])
        count = sent + len(wanted) + (1 if storages else 0)
        return Round(self, pending, storages, wanted, sent, count, renewals)

    def requeue(self, pending: dict[str, tuple[dict[str, Any], bool]]) -> None:
        """A round that failed: its states are queued again, unless a newer one was meanwhile."""
        with self._lock:
            for name, item in pending.items():
                self._pending.setdefault(name, item)

    def apply_states(
        self, storages: list[FleetStorage], raws: Sequence[Any], sent: set[str]
    ) -> None:
        for storage, raw in zip(storages, raws, strict=True):
            if storage.breaker_name in sent:
                continue  # just written by this process
            if raw is None:
                if storage.state == _OPEN:  # Redis lost it (restarted): tell the others again
                    self.publish(storage)
                continue
            record = json.loads(raw)
            if record.get("id") == storage.seen or record.get("state") not in _SHARED:
                continue
            storage.seen = record["id"]
            with self._lock:
                if storage.breaker_name in self._pending:
                    continue  # a newer verdict of this process is on its way
            opened = record.get("opened_at")
            storage.apply(
                record["state"], None if opened is None else datetime.fromtimestamp(opened, UTC)
            )
            if storage.breaker is not None:
                self.notice(storage.breaker)


class Round:
    """One round of `SharedBreakers` on the fleet's pipeline: ``count`` commands, whose replies
    `replies` reads (or `failed` when the round did not get through)."""

    def __init__(
        self,
        shared: SharedBreakers,
        pending: dict[str, tuple[dict[str, Any], bool]],
        storages: list[FleetStorage],
        wanted: list[FleetStorage],
        sent: int,
        count: int,
        renewals: set[int] | None = None,
    ) -> None:
        self.shared = shared
        self.renewals = renewals or set()  # ids of the storages whose running trial renews
        self.pending = pending
        self.storages = storages
        self.wanted = wanted
        self.sent = sent
        self.count = count
        self.asked = time.monotonic()

    def replies(self, answers: Sequence[Any]) -> None:
        """Read the replies: the leases taken, the states other processes published."""
        rest = list(answers[self.sent :])
        for storage in self.wanted:
            # A renewal answered after its trial ended is not believed: the verdict gives the
            # lease back, and this process must not think it still holds it.
            if rest.pop(0) and (storage.trying or id(storage) not in self.renewals):
                # Counted from before the ask: the lease ends here no later than in Redis.
                storage.lease_until = self.asked + self.shared.lease_ttl * 0.9
        if self.storages:
            self.shared.apply_states(self.storages, rest.pop(0), set(self.pending))

    def failed(self) -> None:
        """The round did not get through: its states are queued again, its lease asks lapse
        (the next refused call asks again)."""
        self.shared.requeue(self.pending)
