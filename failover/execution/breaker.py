"""Circuit breaker: a `pybreaker.CircuitBreaker` consulted around each call, without its lock.

pybreaker keeps the state (in memory, or shared across processes by a `CircuitBreakerStorage`
such as `pybreaker.CircuitRedisStorage`), the counters, the listeners and the transitions
(`open`, `half_open`, `close`). This guard decides around each call, where pybreaker falls short:

- `CircuitBreaker.call` holds the breaker's lock while the function runs, so calls through one
  breaker would run one at a time; here the guarded call runs outside any lock.
- its decorator does not count failures of ``async def`` functions; here the guard sees the
  end of the awaited call.
- in half-open, exactly one trial call (per process, per breaker, even when several failovers
  share the breaker) reaches the upstream; the concurrent others are refused and served from
  the store. A breaker shared through the engine's fleet (`failover.fleet`) has one trial for
  the whole fleet: only the process holding the fleet's trial lease runs it.
- the call that trips the breaker raises the upstream's own exception, not pybreaker's error.
- exceptions the failover does not recover (``exclude=``, or not matched by ``exceptions=``) are
  not failures of the upstream: they count as successes, as pybreaker's own ``exclude`` does.
- a cancelled or interrupted call (a `BaseException` that is not an `Exception`) is neither a
  success nor a failure: the upstream did not answer, nor fail.
- a listener or a storage that raises is logged, never turned into the call's outcome.

The trial ends in one place, `BreakerGuard.exit`, whichever way it went: a success (closes the
breaker, or counts towards ``success_threshold``), a failure (opens it again), an exception that
does not count or a cancellation (no verdict: the next call is the trial). A forked child starts
with no trial in flight: the parent's, run by a thread the child does not have, never ends there.
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pybreaker

from ..errors import SoftTimeoutError
from ..forks import AfterFork
from .base import Guard, Kind
from .circuit import Circuit, ClosedPath
from .error_rate import shown_error_rate

__all__ = ["BREAKER", "BreakerGuard", "StateListener", "state_code"]

log = logging.getLogger("failover.execution")

_OPEN = pybreaker.STATE_OPEN
_CLOSED = pybreaker.STATE_CLOSED
_TRIAL = object()  # the token of the half-open trial call
_CODES = {_CLOSED: 0, pybreaker.STATE_HALF_OPEN: 1, _OPEN: 2}


def state_code(state: str) -> int:
    """The ``failover_circuit_state`` value of a pybreaker state name (0 closed, 1 half-open,
    2 open)."""
    return _CODES.get(state, 0)


class _Gate:
    """What the guards of one breaker share in this process: the trial in flight."""

    __slots__ = ("lock", "trial")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.trial = False


_gates: weakref.WeakKeyDictionary[pybreaker.CircuitBreaker, _Gate] = weakref.WeakKeyDictionary()


def _gate(breaker: pybreaker.CircuitBreaker) -> _Gate:
    gate = _gates.get(breaker)
    if gate is None:
        # setdefault is one step (the breaker's hash is its id): two guards made at once get
        # one gate, and no module lock is left for a fork to catch held.
        gate = _gates.setdefault(breaker, _Gate())
    return gate


class BreakerGuard(ClosedPath, Guard):
    """Refuses calls with `pybreaker.CircuitBreakerError` while ``breaker`` is open.

    Args:
        breaker: the pybreaker breaker (its own settings, listeners and storage apply).
        counts: ``exc -> bool``: whether an exception is a failure of the upstream (the
            failover's ``exceptions=``/``exclude=``; refusals of inner guards always count).
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = (pybreaker.CircuitBreakerError,)

    def __init__(self, breaker: pybreaker.CircuitBreaker, counts: Callable[[Exception], bool]):
        self.breaker = breaker
        self.counts = counts
        self._gate = _gate(breaker)
        self._circuit = Circuit(breaker)
        _FORKS.add(self)

    def __repr__(self) -> str:
        return f"BreakerGuard({self.breaker.name!r}, state={self.breaker.current_state})"

    def admit_open(self) -> Any:
        """Admit the call, or refuse it while open (or while another trial is in flight); it
        never waits. While closed, `ClosedPath.admit` admits it without coming here."""
        circuit = self._circuit
        cb = self.breaker
        state = circuit.stored_state()
        if state == _CLOSED:
            if circuit.noticed_state() != _CLOSED:
                _noticed(cb)  # closed by another process: the listeners hear it here
            return None
        if circuit.noticed_state() != state:
            _noticed(cb)  # opened by another process
        if state == _OPEN and _still_open(circuit):  # the common refusal: no lock
            raise _refusal(f"circuit breaker {cb.name!r}: open, the upstream is not called")
        gate = self._gate
        with gate.lock:
            if gate.trial:
                raise _refusal(f"circuit breaker {cb.name!r}: half-open, a trial call is in flight")
            state = cb.current_state
            if state == _CLOSED:
                return None
            if state == _OPEN and _still_open(circuit):
                raise _refusal(f"circuit breaker {cb.name!r}: open, the upstream is not called")
            if not circuit.trial_allowed():  # a fleet's trial runs in one process only
                raise _refusal(
                    f"circuit breaker {cb.name!r}: half-open, the fleet's trial is another "
                    "process's"
                )
            if state == _OPEN:
                _quietly(cb.half_open)
            gate.trial = True
            circuit.trial_running(True)
            return _TRIAL

    def exit_counted(self, token: Any, exc: BaseException | None) -> None:
        """Count the call's end: a success of a trial, or a failure that may open the
        breaker. A closed success is `ClosedPath.exit`'s."""
        trial = token is _TRIAL
        if trial:  # before the verdict: no round renews a lease the verdict gives back
            self._circuit.trial_running(False)
        try:
            if exc is None:
                self._success(trial)
            elif isinstance(exc, Exception):
                if self.counts(exc) and self.breaker.is_system_error(exc):
                    self._failure(exc, trial)
                else:
                    self._success(trial)
        except Exception:  # a listener or the storage: never the call's outcome
            log.warning("circuit breaker %r failed", self.breaker.name, exc_info=True)
        finally:
            if trial:
                self._gate.trial = False

    def forked(self) -> None:
        """In a forked child: no trial in flight (the parent's never ends here), and new locks
        (the parent's threads may have held them at the fork). Each guard of a breaker resets
        their shared gate: the same reset, made again."""
        gate = self._gate
        gate.lock = threading.Lock()
        gate.trial = False
        self._circuit.forked()

    def _success(self, trial: bool) -> None:
        cb, circuit = self.breaker, self._circuit
        storage = circuit.storage
        if trial:
            storage.increment_success_counter()
            if storage.success_counter >= cb.success_threshold:
                cb.close()
            for listener in circuit.listeners():
                listener.success(cb)
        else:
            circuit.succeeded()

    def _failure(self, exc: Exception, trial: bool) -> None:
        cb, circuit = self.breaker, self._circuit
        circuit.count_failure()
        for listener in circuit.listeners():
            listener.failure(cb, exc)
        if trial:
            cb.open()
        elif cb.fail_counter >= cb.fail_max:
            with self._gate.lock:  # concurrent failures open it once
                if cb.current_state == _CLOSED:
                    cb.open()


def _refusal(message: str) -> pybreaker.CircuitBreakerError:
    """pybreaker's own error, named as the breaker's refusal (`failover.errors.refused_by`)."""
    error = pybreaker.CircuitBreakerError(message)
    error.guard = "breaker"  # type: ignore[attr-defined]  # pybreaker's class is not ours: the name goes on the instance
    return error


def _still_open(circuit: Circuit) -> bool:
    """Whether the open breaker's reset timeout has not passed yet (pybreaker's own rule, on
    the time its storage recorded, which other processes share)."""
    opened_at = circuit.storage.opened_at
    if opened_at is None:
        return False
    return bool(datetime.now(UTC) < opened_at + timedelta(seconds=circuit.breaker.reset_timeout))


def _noticed(cb: pybreaker.CircuitBreaker) -> None:
    """Let pybreaker notice a state changed by another process (its listeners hear it)."""
    _quietly(lambda: cb.state)


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:  # a listener that raises: logged, the transition is made all the same
        log.warning("circuit breaker listener failed", exc_info=True)


_FORKS = AfterFork(BreakerGuard.forked)


class StateListener(pybreaker.CircuitBreakerListener):
    """Reports each state change of a breaker as ``report(name, code)``."""

    def __init__(self, name: str, report: Callable[[str, int], None]) -> None:
        self.name = name
        self.report = report

    def state_change(self, cb: pybreaker.CircuitBreaker, old_state: Any, new_state: Any) -> None:
        """Report the new state."""
        try:
            self.report(self.name, state_code(new_state.name))
        except Exception:  # metrics never break a call
            log.warning("failover %r: reporting the breaker state failed", self.name, exc_info=True)


_PYBREAKER = {  # pybreaker's own defaults (fail_max 5, reset_timeout 60 s), read from it
    name: p.default
    for name, p in inspect.signature(pybreaker.CircuitBreaker).parameters.items()
    if name in ("fail_max", "reset_timeout")
}


def _shown(d: Any) -> str:
    """Its own settings, or for ``breaker=True`` the engine's ``breaker_defaults`` over
    pybreaker's."""
    if isinstance(d.breaker, pybreaker.CircuitBreaker):
        fail_max, reset = d.breaker.fail_max, d.breaker.reset_timeout
    else:
        merged = {**_PYBREAKER, **d.breaker_defaults()}
        reset = merged["reset_timeout"]
        if "error_rate" in merged:  # failures in a row too, only when fail_max is given
            rule = shown_error_rate(merged["error_rate"], merged["min_calls"], merged["period"])
            run = f", fail_max {merged['fail_max']}" if "fail_max" in d.breaker_defaults() else ""
            return f"breaker({rule}{run}, reset {reset:g}s)"
        fail_max = merged["fail_max"]
    return f"breaker(fail_max {fail_max}, reset {reset:g}s)"


def _make(d: Any, wiring: Any) -> BreakerGuard:
    # The soft timeout is inside the breaker: its cuts are failures of the upstream.
    inner = (SoftTimeoutError,) if d.timeout is not None else ()

    def counts(exc: Exception) -> bool:
        return bool(d.accepts(exc)) or isinstance(exc, inner)

    return BreakerGuard(wiring.breaker(d), counts)


BREAKER = Kind("breaker", wanted=lambda d: d.breaker is not None, shown=_shown, make=_make)
"""The circuit breaker in the guards' order: ``breaker=``."""
