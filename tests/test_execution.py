"""The execution layer as a whole: the strategies combined in the documented order (bulkhead
outside breaker outside timeout), what ``.definition`` shows, the settings refused at
decoration, and a load test through a flapping upstream."""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pybreaker
import pytest

import failover
from failover import BulkheadFull, ConfigurationError, Failover
from failover.errors import SoftTimeoutError
from failover.execution import BreakerGuard, Bulkhead, Execution, Guard, Wait

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking, auntil

FAST = 0.02
OPEN = pybreaker.STATE_OPEN


class Causes(list[BaseException | None]):
    """An ``on_recovered`` hook that keeps each recovery's cause."""

    def __call__(self, ctx: failover.RecoverContext[Any], value: Any) -> Any:
        self.append(ctx.cause)
        return value


def execution_of(engine: Failover, fn: Any) -> Execution:
    execution = engine.runtime(fn._failover_state).execution
    assert execution is not None
    return execution


# -- each pair, in the documented order -----------------------------------------------------------


def test_bulkhead_outside_breaker_a_full_bulkhead_is_no_breaker_failure(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up, causes = Blocking(), Causes()
    up.release.set()

    @failover.failover("pair-bb", engine=engine, max_concurrency=1, breaker=cb, on_recovered=causes)
    def f(x: str) -> object:
        return up(x)

    f("a")
    up.wait_entered()
    up.release.clear()
    bulkhead = engine.bulkhead(f.definition)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(f, "a")
        up.wait_entered()
        for _ in range(3):
            assert f.referential("a").up_to_date is False
        assert [type(c) for c in causes] == [BulkheadFull] * 3
        assert (cb.current_state, cb.fail_counter) == (pybreaker.STATE_CLOSED, 0)
        up.release.set()
        held.result()
    up.error = ConnectionError("down")
    f("a")  # trips the breaker
    up.wait_entered()
    for _ in range(3):  # refused by the breaker, inside the bulkhead: each permit comes back
        assert f.referential("a").up_to_date is False
        assert bulkhead.free == 1
    assert isinstance(causes[-1], pybreaker.CircuitBreakerError)
    assert up.calls == 3


def test_bulkhead_outside_timeout_a_caller_that_gives_up_gives_its_permit_back(
    engine: Failover,
) -> None:
    up, causes = Blocking(), Causes()

    @failover.failover(
        "pair-bt",
        engine=engine,
        max_concurrency=1,
        timeout=FAST,
        policy="never_throw",
        on_recovered=causes,
    )
    def f(x: str) -> object:
        return up(x)

    assert f("a") is None
    assert isinstance(causes[-1], SoftTimeoutError)
    up.wait_entered()
    execution = execution_of(engine, f)
    assert execution.timeout is not None
    assert (engine.bulkhead(f.definition).free, execution.timeout.in_flight) == (1, 1)
    assert f("b") is None  # a permit was free: "b" started its own call, and timed out
    assert isinstance(causes[-1], SoftTimeoutError)
    up.wait_entered()
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    assert f.peek("a") is not None
    assert f.peek("b") is not None


def test_breaker_outside_timeout_a_soft_timeout_is_a_breaker_failure(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up, causes = Blocking(), Causes()

    @failover.failover(
        "pair-rt",
        engine=engine,
        breaker=cb,
        timeout=FAST,
        policy="never_throw",
        on_recovered=causes,
    )
    def f(x: str) -> object:
        return up(x)

    assert f("a") is None
    assert isinstance(causes[-1], SoftTimeoutError)  # the tripping call: the timeout itself
    assert cb.current_state == OPEN
    assert f("a") is None
    assert isinstance(causes[-1], pybreaker.CircuitBreakerError)
    up.wait_entered()
    assert up.calls == 1
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    assert f.peek("a") is not None  # the late result is stored, the breaker open or not


def test_breaker_outside_timeout_with_exceptions_that_exclude_timeouts(engine: Failover) -> None:
    """``exceptions=`` says what the upstream's failures are; a soft timeout always counts."""
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Blocking()

    @failover.failover(
        "pair-rt-filter",
        engine=engine,
        breaker=cb,
        timeout=FAST,
        exceptions=(ConnectionError,),
        policy="never_throw",
    )
    def f(x: str) -> object:
        return up(x)

    assert f("a") is None
    assert cb.current_state == OPEN
    up.release.set()
    assert engine.refreshes.wait(WAIT)


async def test_all_three_async_in_order(engine: Failover) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)
    up, causes = ABlocking(), Causes()
    up.release.set()

    @failover.failover(
        "all-three",
        engine=engine,
        max_concurrency=1,
        breaker=cb,
        timeout=FAST,
        policy="never_throw",
        on_recovered=causes,
    )
    async def f(x: str) -> object:
        return await up(x)

    assert await f("a") == "a"
    await up.wait_entered()
    up.release.clear()
    slow = asyncio.create_task(f("a"))  # holds the permit until it times out
    await up.wait_entered()
    assert await f("a") == "a"  # no permit: stale
    assert isinstance(causes[-1], BulkheadFull)
    assert await slow == "a"  # timed out: stale
    assert isinstance(causes[-1], SoftTimeoutError)
    assert cb.fail_counter == 1  # the timeout counted, the bulkhead's refusal did not
    assert await f("b") is None  # joins nothing ("b" is another key): times out, trips it
    await up.wait_entered()
    assert cb.current_state == OPEN
    assert await f("a") == "a"
    assert isinstance(causes[-1], pybreaker.CircuitBreakerError)
    assert engine.bulkhead(f.definition).free == 1
    up.release.set()
    await auntil(lambda: engine.refreshes.running == 0, "the late calls")
    assert up.calls == 3
    assert f.peek("b") is not None


# -- a guard that waits, in a chain ---------------------------------------------------------------


class Recorder(Guard):
    """A guard that admits every call and keeps how each one ended."""

    def __init__(self) -> None:
        self.ends: list[BaseException | None] = []

    def exit(self, token: Any, exc: BaseException | None) -> None:
        self.ends.append(exc)


def waiting_chain(name: str) -> tuple[Execution, Bulkhead, pybreaker.CircuitBreaker, Any]:
    """A bulkhead outside a breaker, whose only permit is held in another context: entering
    the chain must wait."""
    bulkhead = Bulkhead(name, 1, WAIT)
    breaker = pybreaker.CircuitBreaker(name=name, fail_max=1, reset_timeout=3600)
    ex = Execution((bulkhead, BreakerGuard(breaker, lambda exc: True)), None)
    held = contextvars.Context().run(bulkhead.enter)
    return ex, bulkhead, breaker, held


def test_a_refusal_after_a_wait_gives_the_permit_back() -> None:
    ex, bulkhead, breaker, held = waiting_chain("wait-then-open")
    wait = ex.admit()
    assert type(wait) is Wait
    breaker.open()  # while the call waits
    bulkhead.exit(held, None)
    with pytest.raises(pybreaker.CircuitBreakerError):
        wait.block()
    assert bulkhead.free == 1
    breaker.close()
    tokens = ex.admit()  # not a nested call: the refused one left no trace in this context
    assert bulkhead.free == 0
    ex.exit(tokens, None)
    assert bulkhead.free == 1


async def test_an_async_refusal_after_a_wait_gives_the_permit_back() -> None:
    ex, bulkhead, breaker, held = waiting_chain("await-then-open")
    wait = ex.admit()
    assert type(wait) is Wait
    breaker.open()
    bulkhead.exit(held, None)
    with pytest.raises(pybreaker.CircuitBreakerError):
        await wait.wait()
    assert bulkhead.free == 1


async def test_a_task_cancelled_while_waiting_leaves_the_guards_it_passed() -> None:
    bulkhead = Bulkhead("cancel-in-chain", 1, WAIT)
    outer = Recorder()
    ex = Execution((outer, bulkhead), None)
    held = contextvars.Context().run(bulkhead.enter)

    async def enter() -> Any:
        wait = ex.admit()
        assert type(wait) is Wait
        return await wait.wait()

    waiter = asyncio.create_task(enter())
    await auntil(lambda: bulkhead.waiting == 1, "the waiter")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert len(outer.ends) == 1
    assert isinstance(outer.ends[0], asyncio.CancelledError)
    bulkhead.exit(held, None)
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)


def test_a_chain_that_waits_then_passes_the_guards_inside() -> None:
    ex, bulkhead, breaker, held = waiting_chain("wait-then-pass")
    inner = Recorder()
    ex = Execution((*ex.guards, inner), None)
    wait = ex.admit()
    bulkhead.exit(held, None)
    tokens = wait.block()
    assert len(tokens) == 3
    assert bulkhead.free == 0
    ex.exit(tokens, None)
    assert (inner.ends, bulkhead.free, breaker.current_state) == ([None], 1, "closed")


def test_run_passes_every_guard_and_each_hears_the_end() -> None:
    outer, inner = Recorder(), Recorder()
    breaker = pybreaker.CircuitBreaker(name="run-chain", fail_max=1, reset_timeout=3600)
    ex = Execution((outer, BreakerGuard(breaker, lambda exc: True), inner), None)

    def down() -> None:
        raise ConnectionError("down")

    assert ex.run(lambda x: x * 2, (21,), {}) == 42
    with pytest.raises(ConnectionError):
        ex.run(down, (), {})
    assert breaker.current_state == "open"  # the failure reached the breaker
    with pytest.raises(pybreaker.CircuitBreakerError):
        ex.run(down, (), {})  # refused by the breaker: the inner guard is not passed
    refused = pybreaker.CircuitBreakerError
    assert [type(e) for e in outer.ends] == [type(None), ConnectionError, refused]
    assert [type(e) for e in inner.ends] == [type(None), ConnectionError]
    lone = Recorder()  # one guard that has no `run` of its own: admit, the call, exit
    assert Execution((lone,), None).run(dict, (), {"a": 1}) == {"a": 1}
    assert lone.ends == [None]


class Interrupted(BaseException):
    """What a cancellation or an interrupt is to a guard: not an `Exception`."""


def test_run_gives_everything_back_when_the_call_is_interrupted() -> None:
    """A `BaseException` through one frame's `run`: the bulkhead's permit goes back, the
    breaker counts neither a success nor a failure, and both are at rest afterwards."""
    bulkhead = Bulkhead("run-interrupted", 1)
    breaker = pybreaker.CircuitBreaker(name="run-interrupted", fail_max=1, reset_timeout=3600)
    guard = BreakerGuard(breaker, lambda exc: True)

    def interrupted() -> None:
        raise Interrupted

    for ex in (Execution((bulkhead,), None), Execution((guard,), None)):
        with pytest.raises(Interrupted):
            ex.run(interrupted, (), {})
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)
    assert (breaker.current_state, breaker.fail_counter) == ("closed", 0)
    assert Execution((bulkhead, guard), None).run(lambda: "after", (), {}) == "after"
    assert bulkhead.free == 1
    # An interrupted half-open trial gives no verdict: the next call is the trial, and closes it.
    breaker.open()
    opened = breaker._state_storage.opened_at
    breaker._state_storage.opened_at = opened - timedelta(seconds=3601)  # pybreaker's clock
    with pytest.raises(Interrupted):
        guard.run(interrupted, (), {})
    assert breaker.current_state == "half-open"
    assert guard.run(lambda: "trial", (), {}) == "trial"
    assert breaker.current_state == "closed"


# -- what the definition shows --------------------------------------------------------------------


def test_definition_and_repr_show_the_execution(engine: Failover) -> None:
    def fn() -> None: ...

    cases = [
        ({}, "basic"),
        ({"breaker": True}, "breaker(fail_max 5, reset 60s)"),  # pybreaker's defaults
        (
            {"breaker": pybreaker.CircuitBreaker(fail_max=2, reset_timeout=0.5)},
            "breaker(fail_max 2, reset 0.5s)",
        ),
        ({"breaker": False}, "basic"),
        ({"max_concurrency": 4}, "bulkhead(4)"),
        ({"max_concurrency": 4, "acquire_timeout": 0.5}, "bulkhead(4, wait 0.5s)"),
        ({"timeout": 2}, "timeout(2s)"),
        (
            {"timeout": 1.5, "breaker": True, "max_concurrency": 8},
            "bulkhead(8) > breaker(fail_max 5, reset 60s) > timeout(1.5s)",
        ),
    ]
    for i, (options, shown) in enumerate(cases):
        f = failover.failover(f"shown-{i}", engine=engine, **options)(fn)
        assert f.definition.execution == shown
        assert f"execution={shown!r}" in repr(f.definition)


def test_the_definition_shows_the_breaker_the_engine_makes(clock: FakeClock) -> None:
    engine = Failover(clock=clock, breaker_defaults={"fail_max": 3, "reset_timeout": "1m30s"})

    @failover.failover("tuned", engine=engine, breaker=True)
    def tuned() -> None: ...

    assert tuned.definition.execution == "breaker(fail_max 3, reset 90s)"
    made = engine.breaker(tuned.definition)
    assert (made.fail_max, made.reset_timeout) == (3, 90)
    engine.close()


def test_a_default_engine_failover_shows_the_defaults_configured_after_it() -> None:
    @failover.failover("configured-later", breaker=True)
    def later() -> None: ...

    assert later.definition.execution == "breaker(fail_max 5, reset 60s)"
    engine = failover.configure(breaker_defaults={"reset_timeout": 10})
    assert later.definition.execution == "breaker(fail_max 5, reset 10s)"
    assert engine.breaker(later.definition).reset_timeout == 10


def test_the_runtime_chain_is_built_once_in_order(engine: Failover) -> None:
    @failover.failover("chain", engine=engine, timeout=1, breaker=True, max_concurrency=2)
    def f() -> None: ...

    @failover.failover("plain", engine=engine)
    def g() -> None: ...

    f()
    g()
    execution = execution_of(engine, f)
    assert execution is execution_of(engine, f)
    assert repr(execution) == (
        "Execution(Bulkhead('chain', limit=2, free=2) > BreakerGuard('chain', state=closed) > "
        "SoftTimeout('chain', 1s))"
    )
    assert set(execution.refusals) == {
        BulkheadFull,
        pybreaker.CircuitBreakerError,
        SoftTimeoutError,
    }
    assert engine.runtime(g._failover_state).execution is None  # basic: the function itself


# -- refused at decoration / construction ---------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_concurrency": 0}, "max_concurrency= must be a positive int"),
        ({"max_concurrency": -1}, "max_concurrency= must be a positive int"),
        ({"max_concurrency": True}, "max_concurrency= must be a positive int"),
        ({"max_concurrency": 1.5}, "max_concurrency= must be a positive int"),
        ({"max_concurrency": "2"}, "max_concurrency= must be a positive int"),
        ({"timeout": -1}, "timeout= must be a finite number of seconds > 0"),
        ({"timeout": 0}, "timeout= must be a finite number of seconds > 0"),
        ({"timeout": math.nan}, "timeout= must be a finite number of seconds > 0"),
        ({"timeout": math.inf}, "timeout= must be a finite number of seconds > 0"),
        ({"timeout": True}, "timeout= must be a finite number of seconds > 0"),
        ({"acquire_timeout": -0.5}, "acquire_timeout= must be a finite number of seconds >= 0"),
        ({"acquire_timeout": math.nan}, "acquire_timeout= must be a finite number"),
        ({"acquire_timeout": 2}, "acquire_timeout= needs max_concurrency="),
        ({"breaker": "yes"}, "breaker= must be a pybreaker.CircuitBreaker"),
        ({"breaker": object()}, "breaker= must be a pybreaker.CircuitBreaker"),
        ({"breaker": 1}, "breaker= must be a pybreaker.CircuitBreaker"),
    ],
)
def test_bad_execution_settings_fail_at_decoration(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:

        @failover.failover("bad-exec", **options)
        def f() -> None: ...

    assert "'bad-exec'" in str(info.value)


@pytest.mark.parametrize(
    ("defaults", "match"),
    [
        ("fail_max=3", "breaker_defaults must be a dict"),
        ({"fail_maxx": 3}, "unknown setting 'fail_maxx'"),
        ({"fail_max": 0}, r"\['fail_max'\] must be an int >= 1"),
        ({"fail_max": "3"}, r"\['fail_max'\] must be an int >= 1"),
        ({"fail_max": True}, r"\['fail_max'\] must be an int >= 1"),
        ({"success_threshold": 0}, r"\['success_threshold'\] must be an int >= 1"),
        ({"reset_timeout": -1}, r"\['reset_timeout'\] must be a finite number"),
        ({"reset_timeout": "60"}, r"\['reset_timeout'\] '60' is not a duration"),
        ({"reset_timeout": "soon"}, r"\['reset_timeout'\] 'soon' is not a duration"),
        ({"reset_timeout": math.inf}, r"\['reset_timeout'\] must be a finite number"),
        ({"exclude": ["KeyError"]}, r"\['exclude'\] must be exception types"),
        ({"exclude": [KeyError("x")]}, r"\['exclude'\] must be exception types"),
        ({"exclude": [int]}, r"\['exclude'\] must be exception types"),
        ({"state_storage": "redis://"}, r"\['state_storage'\] must be a callable"),
    ],
)
def test_bad_breaker_defaults_fail_at_construction(defaults: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        Failover(metrics=False, breaker_defaults=defaults)
    assert str(info.value).startswith("Failover: breaker_defaults")


def test_good_breaker_defaults_are_taken(clock: FakeClock) -> None:
    eng = Failover(
        clock=clock,
        metrics=False,
        breaker_defaults={
            "fail_max": 3,
            "reset_timeout": 0.5,
            "success_threshold": 2,
            "exclude": [KeyError, lambda e: "business" in str(e)],
        },
    )

    @failover.failover("good-defaults", engine=eng, breaker=True)
    def f() -> None: ...

    f()
    cb = eng.breaker(f.definition)
    assert (cb.fail_max, cb.reset_timeout, cb.success_threshold) == (3, 0.5, 2)
    assert not cb.is_system_error(KeyError("x"))
    assert not cb.is_system_error(RuntimeError("a business error"))
    assert cb.is_system_error(RuntimeError("down"))
    eng.close()


@pytest.mark.parametrize("workers", [0, -1, True, "4", 2.0])
def test_bad_timeout_workers_fail_at_construction(workers: Any) -> None:
    with pytest.raises(ConfigurationError, match="timeout_workers"):
        Failover(metrics=False, timeout_workers=workers)


# -- load: 32 threads x 1,000 calls through a flapping upstream -----------------------------------


class Flapping:
    """Down and up by turns, ``stretch`` upstream calls each (counted, not timed: the same
    upstream on any machine); up first."""

    def __init__(self, stretch: int) -> None:
        self.stretch = stretch
        self.calls = 0
        self.lock = threading.Lock()

    def up(self) -> bool:
        with self.lock:
            n = self.calls
            self.calls += 1
        return (n // self.stretch) % 2 == 0


def test_load_through_breaker_and_bulkhead_against_a_flapping_upstream(clock: FakeClock) -> None:
    threads, calls, keys, permits = 32, 1_000, [f"k{i}" for i in range(10)], 8
    flapping = Flapping(stretch=50)
    count_lock = threading.Lock()

    def fetch(key: str) -> str:
        if not flapping.up():
            raise ConnectionError("flapping: down")
        time.sleep(0)  # a little work, so that calls overlap and the bulkhead matters
        return key

    causes: dict[type[BaseException], int] = {}

    def count(ctx: failover.RecoverContext[Any], value: Any) -> Any:
        with count_lock:
            kind = type(ctx.cause)
            causes[kind] = causes.get(kind, 0) + 1
        return value

    eng = Failover(clock=clock, metrics=False)
    cb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=0.01)
    f = failover.failover(
        "flapping",
        engine=eng,
        breaker=cb,
        max_concurrency=permits,
        acquire_timeout=0.002,
        policy=lambda ctx: "policy",
        on_recovered=count,
    )(fetch)
    for key in keys:
        assert f.referential(key).up_to_date  # the first 50 upstream calls are up
    flapping.calls = 0  # the load starts with an up stretch: its first upstream call is live
    outcomes = {"live": 0, "stale": 0, "policy": 0}
    escaped: list[BaseException] = []
    wrong: list[object] = []
    start = threading.Barrier(threads)

    def worker(n: int) -> dict[str, int]:
        mine = dict.fromkeys(outcomes, 0)
        start.wait(WAIT)
        for i in range(calls):
            key = keys[(n + i) % len(keys)]
            try:
                env = f.referential(key)
            except BaseException as exc:  # the test: nothing may escape
                escaped.append(exc)
                continue
            if env.payload == "policy":
                mine["policy"] += 1
            elif env.payload != key:
                wrong.append(env.payload)
            else:
                mine["live" if env.up_to_date else "stale"] += 1
        return mine

    with ThreadPoolExecutor(threads) as pool:
        for mine in pool.map(worker, range(threads)):
            for outcome, n in mine.items():
                outcomes[outcome] += n
    bulkhead = eng.bulkhead(f.definition)
    eng.close()
    # Only what holds under any thread interleaving and machine load: how many calls the
    # breaker or the bulkhead refused depends on scheduling (each cause is forced on its own in
    # test_breaker.py and test_bulkhead.py).
    assert escaped == []
    assert wrong == []
    assert sum(outcomes.values()) == threads * calls
    assert outcomes["policy"] == 0  # every key was stored first
    assert outcomes["live"] > 0
    assert sum(causes.values()) == outcomes["stale"]  # each stale answer recovered once
    assert set(causes) <= {ConnectionError, pybreaker.CircuitBreakerError, BulkheadFull}
    assert outcomes["live"] <= flapping.calls  # a live answer is an upstream call
    assert (bulkhead.free, bulkhead.waiting) == (permits, 0)


async def test_async_load_through_all_three_against_a_flapping_upstream(clock: FakeClock) -> None:
    tasks, calls, keys, permits = 32, 200, [f"k{i}" for i in range(10)], 4
    flapping = Flapping(stretch=50)

    async def fetch(key: str) -> str:
        await asyncio.sleep(0)
        if not flapping.up():
            raise ConnectionError("flapping: down")
        return key

    eng = Failover(clock=clock, metrics=False)
    f = failover.failover(
        "aflapping",
        engine=eng,
        breaker=pybreaker.CircuitBreaker(fail_max=5, reset_timeout=0.01),
        max_concurrency=permits,
        acquire_timeout=0.001,
        timeout=1,
        policy=lambda ctx: "policy",
    )(fetch)
    escaped: list[BaseException] = []
    outcomes = {"live": 0, "stale": 0, "policy": 0}

    async def worker(n: int) -> None:
        for i in range(calls):
            key = keys[(n + i) % len(keys)]
            try:
                env = await f.referential(key)
            except BaseException as exc:  # the test: nothing may escape
                escaped.append(exc)
                continue
            if env.payload == "policy":
                outcomes["policy"] += 1
            else:
                assert env.payload == key
                outcomes["live" if env.up_to_date else "stale"] += 1

    await asyncio.gather(*(worker(n) for n in range(tasks)))
    bulkhead = eng.bulkhead(f.definition)
    eng.close()
    assert escaped == []
    assert sum(outcomes.values()) == tasks * calls
    assert outcomes["live"] > 0  # the first upstream call is up
    assert (bulkhead.free, bulkhead.waiting) == (permits, 0)


@pytest.mark.parametrize("reset", ["30s", "1m30s", timedelta(seconds=30), 30])
def test_breaker_reset_timeout_takes_any_duration(reset: Any) -> None:
    eng = Failover(metrics=False, breaker_defaults={"reset_timeout": reset})

    @failover.failover("reset-duration", engine=eng, breaker=True)
    def f() -> None: ...

    f()
    expected = 90.0 if reset == "1m30s" else 30.0
    assert eng.breaker(f.definition).reset_timeout == expected
