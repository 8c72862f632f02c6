"""The one adapter over pybreaker's internals: every private attribute of pybreaker that
failover reads is read here, and nowhere else.

pybreaker offers no public accessor for a breaker's storage nor for the state it last noticed,
and its public ``listeners`` copies the list on each read (a success would pay for it on every
call). The names read here are checked against the installed pybreaker by
``tests/test_circuit.py``, and ``pyproject.toml`` pins the versions that test has passed on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pybreaker

from .base import run_through
from .fleet_state import FleetStorage

__all__ = ["Circuit", "ClosedPath"]

log = logging.getLogger("failover.execution")

_CLOSED = pybreaker.STATE_CLOSED
_CLOSED_STATE = pybreaker.CircuitClosedState  # pybreaker's closed state: ``name`` "closed"
_QUIET = pybreaker.CircuitBreakerListener.success  # the base listener's: does nothing


class Circuit:
    """One `pybreaker.CircuitBreaker` as the guard uses it.

    Args:
        breaker: the breaker; its storage (in memory, or shared across processes) is the truth.
    """

    __slots__ = ("breaker", "fleet", "heard", "hearing", "memory", "storage")

    def __init__(self, breaker: pybreaker.CircuitBreaker) -> None:
        self.breaker = breaker
        self.storage: Any = breaker._state_storage  # set once, in pybreaker's __init__
        # pybreaker's own memory storage: its counter is read without a property call.
        self.memory = type(self.storage) is pybreaker.CircuitMemoryStorage
        # Shared through the engine's fleet: its half-open trial is one for the whole fleet.
        self.fleet: FleetStorage | None = (
            self.storage if isinstance(self.storage, FleetStorage) else None
        )
        # The listeners as last looked at, and those of them that hear successes (pybreaker's
        # base listener's ``success`` does nothing: not called): a closed success compares
        # the list (in C) instead of looking at each listener's class.
        self.heard: list[pybreaker.CircuitBreakerListener] = []
        self.hearing: tuple[pybreaker.CircuitBreakerListener, ...] = ()

    def closed(self) -> bool:
        """Whether the breaker is closed in its storage and this process noticed it: every
        call's check, in one step. Plain attribute reads, no lock: each read is one atomic
        step under the GIL, and a transition made just after it is the race every breaker has
        (the call admitted as the breaker opens is counted all the same, as pybreaker's
        own ``call`` would)."""
        storage = self.storage
        state = storage._state if self.memory else storage.state
        # The noticed state's class, not its ``name``: a property, so a frame on every call.
        return bool(state == _CLOSED and type(self.breaker._state) is _CLOSED_STATE)

    def succeeded(self) -> None:
        """A success outside a trial: the count of consecutive failures back to zero (a
        shared storage's zero is not written again: a round trip), and the listeners that
        hear successes told (pybreaker's base listener's ``success`` does nothing: not
        called)."""
        storage = self.storage
        if (storage._fail_counter if self.memory else storage.counter) != 0:
            storage.reset_counter()
        cb = self.breaker
        if cb._listeners != self.heard:
            self.relisten()
        if self.hearing:
            for listener in self.hearing:
                listener.success(cb)

    def relisten(self) -> None:
        """The breaker's listeners changed: which of them hear successes (``hearing``)."""
        listeners = self.breaker._listeners
        self.heard = list(listeners)
        self.hearing = tuple(x for x in listeners if type(x).success is not _QUIET)

    def stored_state(self) -> str:
        """The state in the storage (shared by every process using it)."""
        return str(self.storage.state)

    def noticed_state(self) -> str:
        """The state this process last noticed (its listeners heard of it)."""
        return str(self.breaker._state.name)

    def failures(self) -> int:
        """The count of consecutive failures in the storage."""
        return int(self.storage._fail_counter if self.memory else self.storage.counter)

    def count_failure(self) -> None:
        """Count one failure in the storage (pybreaker's own ``_inc_counter``)."""
        self.storage.increment_counter()

    def trial_allowed(self) -> bool:
        """Whether a call of this process may be the half-open trial (always, unless the
        breaker's state is shared through a fleet that gives the trial to another process)."""
        return self.fleet is None or self.fleet.trial_allowed()

    def trial_running(self, running: bool) -> None:
        """A trial of this process began or ended: a fleet's lease is renewed while it runs."""
        if self.fleet is not None:
            self.fleet.trying = time.monotonic() if running else 0.0

    def forked(self) -> None:
        """In a forked child: a new lock for the breaker (another thread of the parent may
        have held pybreaker's, in a transition or a listener, at the fork: the child's next
        transition would wait for it for ever)."""
        self.breaker._lock = threading.RLock()

    def listeners(self) -> Sequence[pybreaker.CircuitBreakerListener]:
        """The breaker's listeners, uncopied."""
        return self.breaker._listeners

    def gauge_state(self) -> int:
        """The state for ``failover_circuit_state`` now (0 closed, 1 half-open, 2 open): open
        past ``reset_timeout`` reads half-open, since the next call is a trial; an idle
        failover's breaker would otherwise read open for ever."""
        state = self.stored_state()
        if state == pybreaker.STATE_CLOSED:
            return 0
        if state == pybreaker.STATE_HALF_OPEN:
            return 1
        opened: datetime | None = self.storage.opened_at
        if opened is None:
            return 2
        if opened.tzinfo is None:  # storages of older pybreakers keep naive UTC
            opened = opened.replace(tzinfo=UTC)
        reset = timedelta(seconds=self.breaker.reset_timeout)
        return 1 if datetime.now(UTC) >= opened + reset else 2


class ClosedPath:
    """The breaker guard's ``admit``, ``exit`` and ``run`` while the breaker is closed (every
    call but the few around a failure), here beside the reads of pybreaker they make:
    `Circuit.closed` and `Circuit.succeeded` inlined, so that a closed call on a thread costs
    the guard one frame. Any other call goes on to the guard's ``admit_open`` or
    ``exit_counted``."""

    __slots__ = ()

    _circuit: Circuit

    def admit(self) -> Any:
        """Admit the call (``None``) while closed, else ``admit_open``'s answer."""
        circuit = self._circuit
        storage = circuit.storage
        state = storage._state if circuit.memory else storage.state
        if state == _CLOSED and type(circuit.breaker._state) is _CLOSED_STATE:
            return None  # `Circuit.closed`: one step, no lock, no frame
        return self.admit_open()

    def exit(self, token: Any, exc: BaseException | None) -> None:
        """Count the call's end: a closed success here (`Circuit.succeeded`), anything else
        by ``exit_counted``."""
        if exc is not None or token is not None:
            self.exit_counted(token, exc)
            return
        try:
            self._circuit.succeeded()
        except Exception:  # a listener or the storage: never the call's outcome
            log.warning("circuit breaker %r failed", self._circuit.breaker.name, exc_info=True)

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call on this thread (`Guard.run`): while closed, `admit` and a closed
        success's `exit` inlined around it, one frame for the guard; otherwise through
        ``admit_open`` and `exit`."""
        circuit = self._circuit
        storage = circuit.storage
        state = storage._state if circuit.memory else storage.state
        if state != _CLOSED or type(circuit.breaker._state) is not _CLOSED_STATE:
            return run_through(self.admit_open, self.exit, fn, args, kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self.exit_counted(None, exc)
            raise
        try:  # `Circuit.succeeded`, inlined
            if (storage._fail_counter if circuit.memory else storage.counter) != 0:
                storage.reset_counter()
            cb = circuit.breaker
            if cb._listeners != circuit.heard:
                circuit.relisten()
            if circuit.hearing:
                for listener in circuit.hearing:
                    listener.success(cb)
        except Exception:  # a listener or the storage: never the call's outcome
            log.warning("circuit breaker %r failed", circuit.breaker.name, exc_info=True)
        return result

    def admit_open(self) -> Any:
        """The admission of a call while the breaker is not closed (the guard's)."""
        raise NotImplementedError

    def exit_counted(self, token: Any, exc: BaseException | None) -> None:
        """The end of a call that failed or was a trial (the guard's)."""
        raise NotImplementedError
