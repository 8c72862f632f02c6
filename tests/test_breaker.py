"""Circuit breaker (``breaker=``): real pybreaker breakers, sync and async upstreams.

pybreaker decides open -> half-open on its own wall clock (``opened_at + reset_timeout``), so
the tests move ``opened_at`` into the past instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover
from failover.execution import BreakerGuard

from .conftest import FakeClock
from .execution_support import ABlocking, Blocking, metric

CLOSED, HALF_OPEN, OPEN = pybreaker.STATE_CLOSED, pybreaker.STATE_HALF_OPEN, pybreaker.STATE_OPEN
CircuitBreakerError = pybreaker.CircuitBreakerError


def expire(cb: pybreaker.CircuitBreaker) -> None:
    """Let the open breaker's reset timeout pass (on pybreaker's wall clock)."""
    cb._state_storage.opened_at = datetime.now(UTC) - timedelta(seconds=cb.reset_timeout + 1)


class Switch:
    """An upstream that answers ``value`` or raises ``error``, counting calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None

    def __call__(self, value: Any) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return value


class Causes(list[BaseException | None]):
    """An ``on_recovered`` hook that keeps each recovery's cause."""

    def __call__(self, ctx: failover.RecoverContext[Any], value: Any) -> Any:
        self.append(ctx.cause)
        return value


# -- open: the upstream is not called -------------------------------------------------------------


def test_open_breaker_serves_the_store_without_calling_the_upstream(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)
    up, causes = Switch(), Causes()

    @failover.failover("open-sync", engine=engine, breaker=cb, on_recovered=causes)
    def f(x: str) -> object:
        return up(x)

    assert f("a") == "a"
    up.error = ConnectionError("down")
    assert f("a") == "a"  # recovered; the first failure
    assert cb.current_state == CLOSED
    assert f("a") == "a"  # the second trips it
    assert cb.current_state == OPEN
    calls = up.calls
    env = f.referential("a")
    assert up.calls == calls  # not called while open
    assert env.payload == "a"
    assert env.up_to_date is False
    assert [type(c) for c in causes] == [ConnectionError, ConnectionError, CircuitBreakerError]


async def test_open_breaker_serves_the_store_without_awaiting_the_upstream(
    engine: Failover,
) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)
    up, causes = Switch(), Causes()

    @failover.failover("open-async", engine=engine, breaker=cb, on_recovered=causes)
    async def f(x: str) -> object:
        return up(x)

    assert await f("a") == "a"
    up.error = ConnectionError("down")
    await f("a")
    await f("a")
    assert cb.current_state == OPEN
    calls = up.calls
    env = await f.referential("a")
    assert up.calls == calls
    assert (env.payload, env.up_to_date) == ("a", False)
    assert isinstance(causes[-1], CircuitBreakerError)


def test_open_breaker_with_nothing_stored_rethrows_the_breakers_error(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Switch()

    @failover.failover("open-empty", engine=engine, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    up.error = ConnectionError("down")
    with pytest.raises(ConnectionError):
        f("a")
    with pytest.raises(CircuitBreakerError) as info:
        f("a")
    assert up.calls == 1
    assert "nothing recovered" in info.value.__notes__[0]


def test_breaker_error_recovers_whatever_exceptions_says(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Switch()

    @failover.failover("open-filter", engine=engine, breaker=cb, exceptions=(ConnectionError,))
    def f(x: str) -> object:
        return up(x)

    f("a")
    up.error = ConnectionError("down")
    f("a")
    assert cb.current_state == OPEN
    assert f.referential("a").up_to_date is False  # CircuitBreakerError is not a ConnectionError


# -- the call that trips it -----------------------------------------------------------------------


@pytest.mark.parametrize("fail_max", [1, 3])
def test_the_tripping_caller_sees_the_upstreams_own_exception(
    engine: Failover, fail_max: int
) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=fail_max, reset_timeout=60)
    errors = [ConnectionError(f"down {i}") for i in range(fail_max)]
    up = Switch()

    @failover.failover("trip", engine=engine, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    for error in errors:
        up.error = error
        with pytest.raises(ConnectionError) as info:
            f("a")
        assert info.value is error  # the last one trips the breaker: still the upstream's own
    assert cb.current_state == OPEN
    with pytest.raises(CircuitBreakerError):
        f("a")


async def test_the_tripping_async_caller_sees_the_upstreams_own_exception(
    engine: Failover,
) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    error = ConnectionError("down")

    @failover.failover("atrip", engine=engine, breaker=cb)
    async def f(x: str) -> object:
        raise error

    with pytest.raises(ConnectionError) as info:
        await f("a")
    assert info.value is error
    assert cb.current_state == OPEN


# -- pybreaker's two traps ------------------------------------------------------------------------


def test_pybreaker_call_holds_its_lock_while_the_function_runs_and_failover_does_not(
    engine: Failover,
) -> None:
    cb = pybreaker.CircuitBreaker()
    seen: list[bool] = []

    def probe() -> bool:
        return bool(cb._lock._is_owned())  # type: ignore[attr-defined]

    assert cb.call(probe) is True  # the trap: every call through cb.call is serialised

    @failover.failover("lock-free", engine=engine, breaker=cb)
    def f() -> None:
        seen.append(probe())

    f()
    assert seen == [False]


def test_eight_concurrent_sync_calls_through_one_breaker_overlap(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker()
    inside = threading.Barrier(8)

    @failover.failover("overlap-sync", engine=engine, breaker=cb)
    def slow(i: int) -> int:
        # Passes only when all eight are inside at once: a breaker that serialized calls
        # would break the barrier (BrokenBarrierError), whatever the machine's speed.
        inside.wait(10)
        return i

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(slow, range(8)))
    assert results == list(range(8))


async def test_eight_concurrent_async_calls_through_one_breaker_overlap(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker()

    entered = 0
    all_in = asyncio.Event()

    @failover.failover("overlap-async", engine=engine, breaker=cb)
    async def slow(i: int) -> int:
        # Returns only once all eight are inside at once (a serializing breaker times out).
        nonlocal entered
        entered += 1
        if entered == 8:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 10)
        return i

    results = await asyncio.gather(*(slow(i) for i in range(8)))
    assert results == list(range(8))


async def test_pybreaker_does_not_count_async_failures_and_failover_does(
    engine: Failover,
) -> None:
    trap = pybreaker.CircuitBreaker(fail_max=1)

    @trap
    async def bare() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await bare()
    assert (trap.fail_counter, trap.current_state) == (0, CLOSED)  # the trap

    cb = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=60)
    calls = 0

    @failover.failover("acount", engine=engine, breaker=cb, policy="never_throw")
    async def f() -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        raise ConnectionError("down")

    await f()
    await f()
    assert cb.fail_counter == 2
    await f()
    assert cb.current_state == OPEN
    await f()
    assert calls == 3


# -- half-open: exactly one trial -----------------------------------------------------------------


def test_half_open_lets_exactly_one_sync_trial_through(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Blocking()
    up.release.set()

    @failover.failover("half-sync", engine=engine, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    assert f("a") == "a"
    up.wait_entered()
    up.error = ConnectionError("down")
    assert f.referential("a").up_to_date is False  # trips it
    up.wait_entered()
    assert cb.current_state == OPEN
    expire(cb)
    up.error = None
    up.release.clear()
    with ThreadPoolExecutor(1) as pool:
        trial = pool.submit(f.referential, "a")
        up.wait_entered()
        assert cb.current_state == HALF_OPEN
        others = [f.referential("a") for _ in range(5)]  # served from the store at once
        assert all(not env.up_to_date for env in others)
        assert up.calls == 3
        up.release.set()
        assert trial.result().up_to_date is True
    assert cb.current_state == CLOSED
    assert f.referential("a").up_to_date is True


async def test_half_open_lets_exactly_one_async_trial_through(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = ABlocking()
    up.release.set()

    @failover.failover("half-async", engine=engine, breaker=cb)
    async def f(x: str) -> object:
        return await up(x)

    assert await f("a") == "a"
    up.error = ConnectionError("down")
    await f("a")
    await up.wait_entered(2)
    assert cb.current_state == OPEN
    expire(cb)
    up.error = None
    up.release.clear()
    trial = asyncio.create_task(f.referential("a"))
    await up.wait_entered()
    assert cb.current_state == HALF_OPEN
    others = await asyncio.gather(*(f.referential("a") for _ in range(5)))
    assert all(not env.up_to_date for env in others)
    assert up.calls == 3
    up.release.set()
    assert (await trial).up_to_date is True
    assert cb.current_state == CLOSED


def test_a_failed_trial_opens_the_breaker_again(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up, causes = Switch(), Causes()

    @failover.failover("trial-fails", engine=engine, breaker=cb, on_recovered=causes)
    def f(x: str) -> object:
        return up(x)

    f("a")
    up.error = ConnectionError("down")
    f("a")
    expire(cb)
    old = cb._state_storage.opened_at
    trial_error = up.error = ConnectionError("still down")
    assert f.referential("a").up_to_date is False
    assert causes[-1] is trial_error  # the trial's own exception, not pybreaker's
    assert cb.current_state == OPEN
    assert cb._state_storage.opened_at > old
    calls = up.calls
    f("a")
    assert up.calls == calls


def test_success_threshold_needs_that_many_trials_one_at_a_time(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60, success_threshold=2)
    up = Switch()

    @failover.failover("threshold", engine=engine, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    up.error = ConnectionError("down")
    with pytest.raises(ConnectionError):
        f("a")
    expire(cb)
    up.error = None
    assert f("a") == "a"
    assert cb.current_state == HALF_OPEN
    assert f("a") == "a"
    assert cb.current_state == CLOSED


def test_one_breaker_shared_by_two_failovers_admits_one_trial(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Blocking()
    up.release.set()

    @failover.failover("shared-1", engine=engine, breaker=cb)
    def one(x: str) -> object:
        return up(x)

    @failover.failover("shared-2", engine=engine, breaker=cb)
    def two(x: str) -> object:
        return up(x)

    one("a")
    two("a")
    up.wait_entered(2)
    up.error = ConnectionError("down")
    one("a")
    up.wait_entered()
    assert cb.current_state == OPEN
    expire(cb)
    up.error = None
    up.release.clear()
    with ThreadPoolExecutor(1) as pool:
        trial = pool.submit(one.referential, "a")
        up.wait_entered()
        assert two.referential("a").up_to_date is False  # the other failover waits its turn
        assert up.calls == 4
        up.release.set()
        assert trial.result().up_to_date is True


async def test_a_cancelled_trial_is_neither_success_nor_failure(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = ABlocking()
    up.error = ConnectionError("down")
    up.release.set()

    @failover.failover("cancel-trial", engine=engine, breaker=cb, policy="never_throw")
    async def f(x: str) -> object:
        return await up(x)

    await f("a")
    assert cb.current_state == OPEN
    expire(cb)
    up.release.clear()
    trial = asyncio.create_task(f("a"))
    await up.wait_entered(2)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert cb.current_state == HALF_OPEN  # not reopened by the cancellation
    assert cb.fail_counter == 1
    up.error = None
    up.release.set()
    assert await f("b") == "b"  # the next call is the trial
    assert cb.current_state == CLOSED


# -- what counts as a failure ---------------------------------------------------------------------


def test_excluded_exceptions_do_not_trip_it(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Switch()

    @failover.failover("excluded", engine=engine, breaker=cb, exclude=(ValueError,))
    def f(x: str) -> object:
        return up(x)

    up.error = ValueError("bad input")
    for _ in range(3):
        with pytest.raises(ValueError, match="bad input"):
            f("a")
    assert (cb.current_state, cb.fail_counter) == (CLOSED, 0)
    up.error = None
    assert f.referential("a").up_to_date is True


def test_exceptions_not_matched_by_exceptions_do_not_trip_it(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)
    up = Switch()

    @failover.failover("unmatched", engine=engine, breaker=cb, exceptions=(ConnectionError,))
    def f(x: str) -> object:
        return up(x)

    up.error = ConnectionError("down")
    with pytest.raises(ConnectionError):
        f("a")
    assert cb.fail_counter == 1
    up.error = KeyError("not found")  # a business answer: counts as a success
    with pytest.raises(KeyError):
        f("a")
    assert (cb.current_state, cb.fail_counter) == (CLOSED, 0)


def test_predicate_exceptions_decide_what_counts(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Switch()

    @failover.failover("predicate", engine=engine, breaker=cb, exceptions=lambda e: "5xx" in str(e))
    def f(x: str) -> object:
        return up(x)

    up.error = RuntimeError("4xx")
    with pytest.raises(RuntimeError):
        f("a")
    assert cb.current_state == CLOSED
    up.error = RuntimeError("5xx")
    with pytest.raises(RuntimeError):
        f("a")
    assert cb.current_state == OPEN


def test_the_breakers_own_exclude_applies(clock: FakeClock) -> None:
    eng = Failover(
        clock=clock, metrics=False, breaker_defaults={"fail_max": 1, "exclude": [KeyError]}
    )

    @failover.failover("own-exclude", engine=eng, breaker=True)
    def f() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        f()
    assert eng.breaker(f.definition).current_state == CLOSED
    eng.close()


def test_a_success_resets_the_failure_count(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)
    up = Switch()

    @failover.failover("reset", engine=engine, breaker=cb, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    up.error = ConnectionError("down")
    f("a")
    up.error = None
    f("a")
    up.error = ConnectionError("down")
    f("a")
    assert (cb.current_state, cb.fail_counter) == (CLOSED, 1)


# -- breaker=True, listeners, metrics, storage ----------------------------------------------------


def test_breaker_true_makes_one_breaker_per_name_from_the_engines_defaults(
    clock: FakeClock,
) -> None:
    eng = Failover(
        clock=clock, metrics=False, breaker_defaults={"fail_max": 2, "reset_timeout": 30}
    )

    @failover.failover("by-name", engine=eng, breaker=True, policy="never_throw")
    def f() -> None:
        raise ConnectionError("down")

    f()
    cb = eng.breaker(f.definition)
    assert (cb.name, cb.fail_max, cb.reset_timeout, cb.fail_counter) == ("by-name", 2, 30, 1)
    assert eng.breaker(f.definition) is cb
    f()
    assert cb.current_state == OPEN
    eng.close()


def test_a_raising_listener_never_breaks_the_call(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    class Rude(pybreaker.CircuitBreakerListener):
        def success(self, cb: Any) -> None:
            raise RuntimeError("listener: success")

        def failure(self, cb: Any, exc: BaseException) -> None:
            raise RuntimeError("listener: failure")

        def state_change(self, cb: Any, old: Any, new: Any) -> None:
            raise RuntimeError("listener: state")

    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60, listeners=[Rude()])
    up = Switch()

    @failover.failover("rude", engine=engine, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    with caplog.at_level(logging.WARNING, "failover.execution"):
        assert f.referential("a").up_to_date is True  # the live result is not lost
        up.error = ConnectionError("down")
        assert f.referential("a").up_to_date is False
    assert "circuit breaker" in caplog.text


class SuccessCount(pybreaker.CircuitBreakerListener):
    """Counts the successes the breaker tells it of."""

    def __init__(self) -> None:
        self.successes = 0

    def success(self, cb: pybreaker.CircuitBreaker) -> None:
        self.successes += 1


def test_a_listener_added_or_removed_between_calls_hears_what_it_should(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=60)

    @failover.failover("listened", engine=engine, breaker=cb)
    def f(x: str) -> str:
        return x

    f("a")  # the guard has looked at the listeners: none hears successes
    first, second = SuccessCount(), SuccessCount()
    cb.add_listener(first)
    f("a")
    cb.add_listener(second)
    f("a")
    cb.remove_listener(first)
    f("a")
    assert (first.successes, second.successes) == (2, 2)


async def test_an_async_call_tells_a_listener_added_meanwhile(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=60)

    @failover.failover("alistened", engine=engine, breaker=cb)
    async def f(x: str) -> str:
        return x

    await f("a")
    hears = SuccessCount()
    cb.add_listener(hears)
    await f("a")
    cb.remove_listener(hears)
    await f("a")
    assert hears.successes == 1


def test_circuit_state_gauge_follows_the_breaker(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    eng = Failover(clock=clock, metrics=registry)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Blocking()
    up.release.set()

    @failover.failover("gauge", engine=eng, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    def state() -> float | None:
        return metric(registry, "failover_circuit_state", name="gauge")

    f("a")
    assert state() == 0
    up.error = ConnectionError("down")
    f("a")
    assert state() == 2
    expire(cb)
    up.error = None
    up.release.clear()
    with ThreadPoolExecutor(1) as pool:
        trial = pool.submit(f, "a")
        up.wait_entered(3)
        assert state() == 1
        up.release.set()
        trial.result()
    assert state() == 0
    eng.close()


def test_circuit_state_gauge_set_when_the_failover_binds(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    eng = Failover(clock=clock, metrics=registry)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    cb.open()

    @failover.failover("gauge-bind", engine=eng, breaker=cb, policy="never_throw")
    def f() -> None: ...

    f()
    assert metric(registry, "failover_circuit_state", name="gauge-bind") == 2
    eng.close()


class CountingStorage(pybreaker.CircuitMemoryStorage):
    """A custom storage: pybreaker's memory storage, counting the state writes."""

    def __init__(self, name: str) -> None:
        super().__init__(CLOSED)
        self.label = name
        self.writes: list[str] = []

    @property
    def state(self) -> str:
        return str(super().state)

    @state.setter
    def state(self, state: str) -> None:
        self.writes.append(state)
        pybreaker.CircuitMemoryStorage.state.fset(self, state)  # type: ignore[attr-defined]


def test_a_breaker_with_a_custom_storage_works(engine: Failover) -> None:
    storage = CountingStorage("custom")
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60, state_storage=storage)
    up = Switch()

    @failover.failover("custom-storage", engine=engine, breaker=cb)
    def f(x: str) -> object:
        return up(x)

    f("a")
    up.error = ConnectionError("down")
    f("a")
    assert storage.state == OPEN
    expire(cb)
    up.error = None
    assert f.referential("a").up_to_date is True
    assert storage.writes == [OPEN, HALF_OPEN, CLOSED]


def test_breaker_defaults_state_storage_makes_one_storage_per_name(clock: FakeClock) -> None:
    made: list[CountingStorage] = []

    def storage(name: str) -> CountingStorage:
        made.append(CountingStorage(name))
        return made[-1]

    eng = Failover(
        clock=clock,
        metrics=False,
        breaker_defaults={"fail_max": 1, "state_storage": storage},
    )

    @failover.failover("stored-1", engine=eng, breaker=True, policy="never_throw")
    def one() -> None:
        raise ConnectionError("down")

    @failover.failover("stored-2", engine=eng, breaker=True, policy="never_throw")
    def two() -> None: ...

    one()
    two()
    assert [s.label for s in made] == ["stored-1", "stored-2"]
    assert made[0].writes == [OPEN]
    assert made[1].writes == []
    eng.close()


def test_state_shared_through_the_storage_protects_every_process(clock: FakeClock) -> None:
    """Two engines stand for two processes; one storage object stands for Redis."""
    registry = CollectorRegistry()
    shared = CountingStorage("shared")
    here = Failover(clock=clock, metrics=False)
    there = Failover(clock=clock, metrics=registry)
    up = Switch()

    def fetch(x: str) -> object:
        return up(x)

    cb_here = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60, state_storage=shared)
    cb_there = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60, state_storage=shared)
    f_here = failover.failover("svc", engine=here, breaker=cb_here, policy="never_throw")(fetch)
    f_there = failover.failover("svc", engine=there, breaker=cb_there, policy="never_throw")(fetch)
    f_there("a")
    assert metric(registry, "failover_circuit_state", name="svc") == 0
    up.error = ConnectionError("down")
    f_here("a")  # this process trips it
    calls = up.calls
    assert f_there("a") == "a"  # the other one serves its store without calling
    assert up.calls == calls
    assert metric(registry, "failover_circuit_state", name="svc") == 2  # and its gauge knows
    expire(cb_here)
    up.error = None
    f_here("a")  # closed by this process
    f_there("a")
    assert metric(registry, "failover_circuit_state", name="svc") == 0
    here.close()
    there.close()


def test_a_storage_factory_must_make_a_storage(clock: FakeClock) -> None:
    eng = Failover(clock=clock, metrics=False, breaker_defaults={"state_storage": lambda n: 42})

    @failover.failover("bad-storage", engine=eng, breaker=True)
    def f() -> None: ...

    with pytest.raises(failover.ConfigurationError, match=r"'bad-storage'.*state_storage"):
        f()
    eng.close()


# -- the guard on its own -------------------------------------------------------------------------


def test_the_guard_is_a_context_manager() -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    guard = BreakerGuard(cb, lambda exc: True)
    with guard.attempt():
        pass
    with pytest.raises(ConnectionError), guard.attempt():
        raise ConnectionError("down")
    assert cb.current_state == OPEN
    with pytest.raises(CircuitBreakerError), guard.attempt():
        pytest.fail("not admitted")
    assert repr(guard) == "BreakerGuard(None, state=open)"


async def test_the_guard_is_an_async_context_manager() -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    guard = BreakerGuard(cb, lambda exc: True)
    async with guard.attempt():
        await asyncio.sleep(0)
    with pytest.raises(ConnectionError):
        async with guard.attempt():
            raise ConnectionError("down")
    assert cb.current_state == OPEN
    expire(cb)
    async with guard.attempt():
        assert cb.current_state == HALF_OPEN
    assert cb.current_state == CLOSED


def test_a_breaker_closed_by_another_process_is_noticed_on_the_next_admission() -> None:
    # Stored closed, noticed open: the closed path does not admit it on its own, so that the
    # listeners hear the close (`admit_open`), and the call after it takes the closed path.
    heard: list[str] = []

    class Hears(pybreaker.CircuitBreakerListener):
        def state_change(self, cb: pybreaker.CircuitBreaker, old: Any, new: Any) -> None:
            heard.append(new.name)

    storage = pybreaker.CircuitMemoryStorage(CLOSED)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60, state_storage=storage)
    guard = BreakerGuard(cb, lambda exc: True)
    cb.open()
    cb.add_listener(Hears())
    storage.state = CLOSED  # closed by another process sharing the storage
    assert guard.admit() is None
    guard.exit(None, None)
    assert heard == [CLOSED]
    assert cb.current_state == CLOSED
    assert guard.admit() is None
    assert heard == [CLOSED]
