"""Soft timeout (``timeout=``): the caller is served stale, the late result is stored."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.errors import SoftTimeoutError
from failover.execution import SoftTimeout

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking, auntil, until

FAST = 0.02  # a soft timeout the blocked upstreams always miss


class Causes(list[BaseException | None]):
    """An ``on_recovered`` hook that keeps each recovery's cause."""

    def __call__(self, ctx: failover.RecoverContext[Any], value: Any) -> Any:
        self.append(ctx.cause)
        return value


def timeout_of(engine: Failover, fn: Any) -> SoftTimeout:
    execution = engine.runtime(fn._failover_state).execution
    assert execution is not None
    assert execution.timeout is not None
    return execution.timeout


async def refreshed(engine: Failover) -> None:
    """Wait until the engine's background tasks (late calls and their stores) have ended."""
    await auntil(lambda: engine.refreshes.running == 0, "the background refreshes")


# -- slow: served stale, the late result stored ---------------------------------------------------


def test_a_slow_sync_upstream_is_served_stale_and_its_late_result_stored(
    engine: Failover,
) -> None:
    up, causes = Blocking(), Causes()
    version = {"v": 1}
    up.release.set()

    @failover.failover("to-sync", engine=engine, timeout=FAST, on_recovered=causes)
    def f(x: str) -> object:
        return up(version["v"])

    assert f.referential("a").up_to_date is True  # a fast answer is live, through the pool
    up.wait_entered()
    up.release.clear()
    version["v"] = 2
    env = f.referential("a")
    assert (env.payload, env.up_to_date) == (1, False)
    assert isinstance(causes[-1], SoftTimeoutError)
    assert isinstance(causes[-1], TimeoutError)
    assert "'to-sync'" in str(causes[-1])
    up.wait_entered()  # the upstream goes on in the background
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    found = f.peek("a")
    assert found is not None
    assert found.payload == 2  # the late result, stored
    assert timeout_of(engine, f).in_flight == 0


async def test_a_slow_async_upstream_is_served_stale_and_its_late_result_stored(
    engine: Failover,
) -> None:
    up, causes = ABlocking(), Causes()
    version = {"v": 1}
    up.release.set()

    @failover.failover("to-async", engine=engine, timeout=FAST, on_recovered=causes)
    async def f(x: str) -> object:
        return await up(version["v"])

    assert (await f.referential("a")).up_to_date is True
    await up.wait_entered()
    up.release.clear()
    version["v"] = 2
    env = await f.referential("a")
    assert (env.payload, env.up_to_date) == (1, False)
    assert isinstance(causes[-1], SoftTimeoutError)
    await up.wait_entered()
    up.release.set()
    await refreshed(engine)
    found = f.peek("a")
    assert found is not None
    assert found.payload == 2
    assert timeout_of(engine, f).in_flight == 0


def test_rethrow_with_nothing_stored_raises_the_timeout_error(engine: Failover) -> None:
    up = Blocking()

    @failover.failover("to-empty", engine=engine, timeout=FAST)
    def f(x: str) -> object:
        return up(x)

    with pytest.raises(TimeoutError) as info:
        f("a")
    assert isinstance(info.value, SoftTimeoutError)
    assert "nothing recovered" in info.value.__notes__[0]
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    found = f.peek("a")
    assert found is not None
    assert found.payload == "a"  # stored all the same, for the next outage


async def test_async_rethrow_with_nothing_stored_raises_the_timeout_error(
    engine: Failover,
) -> None:
    up = ABlocking()

    @failover.failover("to-aempty", engine=engine, timeout=FAST)
    async def f(x: str) -> object:
        return await up(x)

    with pytest.raises(TimeoutError) as info:
        await f("a")
    assert isinstance(info.value, SoftTimeoutError)
    up.release.set()
    await refreshed(engine)
    assert f.peek("a") is not None


@pytest.mark.parametrize(("policy", "expected"), [("never_throw", None), ("return_default", "")])
def test_the_policy_answers_a_timeout_with_nothing_stored(
    engine: Failover, policy: str, expected: object
) -> None:
    up = Blocking()

    @failover.failover("to-policy-" + policy, engine=engine, timeout=FAST, policy=policy)
    def f(x: str) -> str:
        return str(up(x))

    assert f("a") == expected
    up.release.set()
    assert engine.refreshes.wait(WAIT)


def test_soft_timeout_recovers_whatever_exceptions_says(engine: Failover) -> None:
    up = Blocking()
    up.release.set()

    @failover.failover("to-filter", engine=engine, timeout=FAST, exclude=(TimeoutError,))
    def f(x: str) -> object:
        return up(x)

    f("a")
    up.wait_entered()
    up.release.clear()
    assert f.referential("a").up_to_date is False
    up.release.set()
    assert engine.refreshes.wait(WAIT)


# -- fast answers and the upstream's own errors ---------------------------------------------------


def test_a_fast_failure_is_the_upstreams_own(engine: Failover) -> None:
    error = ConnectionError("down")

    @failover.failover("to-fails", engine=engine, timeout=WAIT)
    def f() -> None:
        raise error

    with pytest.raises(ConnectionError) as info:
        f()
    assert info.value is error


def test_the_upstreams_own_timeout_error_is_not_a_soft_timeout(engine: Failover) -> None:
    error = TimeoutError("the upstream's own")

    @failover.failover("to-own", engine=engine, timeout=WAIT)
    def f() -> None:
        raise error

    with pytest.raises(TimeoutError) as info:
        f()
    assert info.value is error


async def test_the_async_upstreams_own_timeout_error_is_not_a_soft_timeout(
    engine: Failover,
) -> None:
    error = TimeoutError("the upstream's own")

    @failover.failover("to-aown", engine=engine, timeout=WAIT)
    async def f() -> None:
        raise error

    with pytest.raises(TimeoutError) as info:
        await f()
    assert info.value is error


def test_a_fast_upstream_never_deadlocks(engine: Failover) -> None:
    """Many fast calls: some land before their caller even starts waiting."""

    @failover.failover("to-fast", engine=engine, timeout=WAIT)
    def f(i: int) -> int:
        return i

    assert [f(i % 7) for i in range(2_000)] == [i % 7 for i in range(2_000)]
    assert timeout_of(engine, f).in_flight == 0


# -- at most one call in flight per key -----------------------------------------------------------


def test_at_most_one_sync_call_in_flight_per_key(engine: Failover) -> None:
    up = Blocking()

    @failover.failover("to-single", engine=engine, timeout=FAST, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    for _ in range(5):
        assert f("a") is None  # each times out, none starts another call
    up.wait_entered()
    assert up.calls == 1
    assert f("b") is None  # another key: its own call
    up.wait_entered()
    assert (up.calls, timeout_of(engine, f).in_flight) == (2, 2)
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    assert timeout_of(engine, f).in_flight == 0
    assert f("a") == "a"  # landed: the next call is a new one
    assert up.calls == 3


async def test_at_most_one_async_call_in_flight_per_key(engine: Failover) -> None:
    up = ABlocking()

    @failover.failover("to-asingle", engine=engine, timeout=FAST, policy="never_throw")
    async def f(x: str) -> object:
        return await up(x)

    for _ in range(5):
        assert await f("a") is None
    assert up.calls == 1
    assert await f("b") is None
    assert (up.calls, timeout_of(engine, f).in_flight) == (2, 2)
    up.release.set()
    await refreshed(engine)
    assert timeout_of(engine, f).in_flight == 0
    assert f.peek("a") is not None
    assert f.peek("b") is not None


def test_concurrent_callers_of_one_key_share_the_call(engine: Failover) -> None:
    up = Blocking()

    @failover.failover("to-share", engine=engine, timeout=WAIT)
    def f(x: str) -> object:
        return up(x)

    with ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(f.referential, "a")]
        up.wait_entered()
        (flight,) = timeout_of(engine, f)._flights.values()
        calls += [pool.submit(f.referential, "a") for _ in range(3)]
        waiting = flight.future._condition._waiters  # type: ignore[attr-defined]
        until(lambda: len(waiting) == 4, "the callers to join the call in flight")
        up.release.set()
        assert all(c.result().up_to_date for c in calls)
    assert up.calls == 1
    assert timeout_of(engine, f).in_flight == 0


async def test_concurrent_async_callers_of_one_key_share_the_call(engine: Failover) -> None:
    up = ABlocking()

    @failover.failover("to-ashare", engine=engine, timeout=WAIT)
    async def f(x: str) -> object:
        return await up(x)

    calls = [asyncio.create_task(f.referential("a")) for _ in range(4)]
    await up.wait_entered()  # the tasks ran in order: the first started it, the others joined
    up.release.set()
    assert all(env.up_to_date for env in await asyncio.gather(*calls))
    assert up.calls == 1


async def test_a_cancelled_caller_leaves_the_call_running_and_its_result_stored(
    engine: Failover,
) -> None:
    up = ABlocking()

    @failover.failover("to-cancelled", engine=engine, timeout=WAIT)
    async def f(x: str) -> object:
        return await up(x)

    caller = asyncio.create_task(f("a"))
    await up.wait_entered()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert up.cancelled == 0
    up.release.set()
    await refreshed(engine)
    assert f.peek("a") is not None


# -- the late result in the caller's context ------------------------------------------------------


def test_a_late_result_is_stored_for_the_callers_tenant(clock: FakeClock) -> None:
    eng = Failover(tenant_resolver=failover.current_tenant, clock=clock, metrics=False)
    up = Blocking()

    @failover.failover("to-tenant", engine=eng, timeout=FAST, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    with failover.tenant("acme"):
        assert f("a") is None
    up.release.set()
    assert eng.refreshes.wait(WAIT)
    with failover.tenant("acme"):
        assert f.peek("a") is not None
    with failover.tenant("globex"):
        assert f.peek("a") is None
    eng.close()


async def test_a_late_async_result_is_stored_for_the_callers_tenant_off_the_loop(
    tmp_path: Path, clock: FakeClock
) -> None:
    eng = Failover(
        f"sqlite:///{tmp_path}/t_{{tenant}}.db", async_writes=False, clock=clock, metrics=False
    )
    up = ABlocking()
    loop_thread = threading.get_ident()
    writers: list[int] = []

    @failover.failover(
        "to-atenant",
        engine=eng,
        timeout=FAST,
        policy="never_throw",
        store_if=lambda v: writers.append(threading.get_ident()) or True,
    )
    async def f(x: str) -> object:
        return await up(x)

    with failover.tenant("acme"):
        assert await f("a") is None
    up.release.set()
    await refreshed(eng)
    with failover.tenant("acme"):
        assert f.peek("a") is not None
    with failover.tenant("globex"):
        assert f.peek("a") is None
    assert writers
    assert loop_thread not in writers  # the SQLite write never ran on the event loop
    eng.close()


# -- close ----------------------------------------------------------------------------------------


def test_close_waits_for_sync_refreshes_and_stores_them(clock: FakeClock) -> None:
    stored: list[str] = []

    class Recording(failover.InMemoryStore):
        def store(self, payload: Any) -> None:
            stored.append(payload.payload)
            super().store(payload)

    eng = Failover(Recording(), clock=clock, metrics=False)
    up = Blocking()

    @failover.failover("to-close", engine=eng, timeout=FAST, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    assert f("late") is None
    up.wait_entered()
    releaser = threading.Timer(0.05, up.release.set)  # ends while close waits for it
    releaser.start()
    eng.close(timeout=WAIT)
    releaser.join()
    assert stored == ["late"]
    assert eng.refreshes.running == 0


def test_close_gives_up_at_its_deadline(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    eng = Failover(clock=clock, metrics=False)
    up = Blocking()

    @failover.failover("to-deadline", engine=eng, timeout=FAST, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    assert f("a") is None
    up.wait_entered()
    with caplog.at_level(logging.WARNING, "failover"):
        eng.close(timeout=0.05)  # returns although the upstream is still blocked
    assert "still running" in caplog.text
    up.release.set()
    assert eng.refreshes.wait(WAIT)


def test_close_drops_queued_calls_and_their_callers_stop_waiting(clock: FakeClock) -> None:
    eng = Failover(clock=clock, metrics=False, timeout_workers=1)
    up = Blocking()

    @failover.failover("to-queued", engine=eng, timeout=WAIT, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(f, "a")
        up.wait_entered()
        queued = pool.submit(f, "b")  # the only worker is busy: "b" waits in the queue
        until(lambda: timeout_of(eng, f).in_flight == 2, "the second call to queue")
        releaser = threading.Timer(0.05, up.release.set)
        releaser.start()
        eng.close(timeout=WAIT)
        releaser.join()
        assert running.result() == "a"
        assert queued.result(WAIT) is None  # dropped: the caller recovered at once
    assert up.calls == 1


async def test_close_cancels_async_refreshes(clock: FakeClock) -> None:
    eng = Failover(clock=clock, metrics=False)
    up = ABlocking()

    @failover.failover("to-aclose", engine=eng, timeout=FAST, policy="never_throw")
    async def f(x: str) -> object:
        return await up(x)

    assert await f("a") is None
    eng.close()
    await auntil(lambda: up.cancelled == 1, "the cancellation")
    await refreshed(eng)
    assert timeout_of(eng, f).in_flight == 0


async def test_a_caller_waiting_when_close_cancels_the_call_recovers(clock: FakeClock) -> None:
    eng = Failover(clock=clock, metrics=False)
    up = ABlocking()
    causes = Causes()

    @failover.failover(
        "to-awaiting", engine=eng, timeout=WAIT, policy="never_throw", on_recovered=causes
    )
    async def f(x: str) -> object:
        return await up(x)

    caller = asyncio.create_task(f("a"))
    await up.wait_entered()
    eng.close()
    assert await caller is None  # not a CancelledError: the caller was not cancelled
    assert isinstance(causes[-1], SoftTimeoutError)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_after_close_the_upstream_is_called_in_place_and_its_result_kept(
    kind: str, clock: FakeClock
) -> None:
    """A closed engine has no pool for the soft timeout: a call after close (a request still
    served while the process shuts down, or one that got the engine `configure` replaced) calls
    the upstream itself rather than fail, and its result is stored, as any call's after close."""
    eng = Failover(clock=clock, metrics=False)
    seen: list[str] = []
    options: dict[str, Any] = {"engine": eng, "timeout": WAIT}

    if kind == "sync":

        @failover.failover("to-closed", **options)
        def f(x: str) -> str:
            seen.append(x)
            return x.upper()

        f("warm")  # the pool exists: close has something to shut
        eng.close()
        assert f("a") == "A"
    else:

        @failover.failover("to-aclosed", **options)
        async def g(x: str) -> str:
            seen.append(x)
            return x.upper()

        await g("warm")
        eng.close()
        assert await g("a") == "A"
        f = g
    assert seen == ["warm", "a"]
    stored = f.peek("a")
    assert stored is not None
    assert stored.payload == "A"
    assert timeout_of(eng, f).in_flight == 0


def test_close_with_nothing_in_the_background_returns_at_once(clock: FakeClock) -> None:
    eng = Failover(clock=clock, metrics=False)

    @failover.failover("to-idle", engine=eng, timeout=WAIT)
    def f() -> int:
        return 1

    assert f() == 1
    # With nothing in the background, close does not wait out its timeout (an hour here): it
    # returns while the test is still willing to wait, whatever the machine's load.
    closing = threading.Thread(target=eng.close, kwargs={"timeout": 3600})
    closing.start()
    closing.join(WAIT)
    assert not closing.is_alive()


async def test_an_abandoned_async_call_that_fails_is_not_logged_as_never_retrieved(
    engine: Failover,
) -> None:
    # Its callers went to recovery; its failure is as quiet as the sync pool's (before, asyncio
    # logged "Task exception was never retrieved" with a traceback for each one).
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))

    @failover.failover("to-late-fail", engine=engine, timeout=FAST, policy="never_throw")
    async def f(x: str) -> object:
        await release.wait()
        raise ConnectionError("late failure")  # a new one: nothing else keeps the task alive

    assert await f("a") is None  # the caller gave up: served by the policy
    tasks = set(engine.refreshes._tasks)
    release.set()
    await asyncio.wait(tasks)
    del tasks
    gc.collect()
    loop.set_exception_handler(None)
    assert reported == []
