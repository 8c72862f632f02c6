"""Permits (issue 20): weights, named pools shared by failovers, waiting without limit or for a
duration, cancellation while waiting, threads and tasks on one pool."""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from werkzeug.test import Client

import failover
from failover import ConfigurationError, Failover, LocalPermits, PermitSource
from failover.dashboard import make_wsgi_app
from failover.execution import Bulkhead

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking, auntil, metric, until


def held_elsewhere(bulkhead: Bulkhead) -> Any:
    """Permits taken in a context of their own (not a nested call of the test's context)."""
    return contextvars.Context().run(bulkhead.enter)


# -- weights --------------------------------------------------------------------------------------


def test_a_weight_5_call_and_five_weight_1_calls_share_10_permits(engine: Failover) -> None:
    up = Blocking()
    engine.bulkhead_pool("exports", permits=10)

    @failover.failover("export-bulk", engine=engine, bulkhead="exports", weight=5)
    def bulk(x: str) -> object:
        return up(x)

    @failover.failover("export-one", engine=engine, bulkhead="exports", policy="never_throw")
    def one(x: str) -> object:
        return up(x)

    with ThreadPoolExecutor(6) as pool:
        heavy = pool.submit(bulk, "bulk")
        up.wait_entered()
        light = [pool.submit(one, f"o{i}") for i in range(5)]
        up.wait_entered(5)  # all six inside at once: 5 + 5 x 1 = 10 permits
        assert engine.bulkhead(one.definition).free == 0
        assert one("refused") is None  # an eleventh permit: none left
        assert bulk.definition.execution == "bulkhead('exports', weight 5)"
        up.release.set()
        assert heavy.result() == "bulk"
        assert [f.result() for f in light] == [f"o{i}" for i in range(5)]
    assert (up.calls, up.most) == (6, 6)
    assert engine.bulkhead(bulk.definition).free == 10


def test_a_heavy_call_waits_until_its_whole_weight_is_free() -> None:
    bulkhead = Bulkhead("heavy", 3, WAIT, weight=3)
    light = Bulkhead("light", acquire_timeout=WAIT, pool=bulkhead.pool)
    token = held_elsewhere(light)  # 1 of 3 taken: 2 free are not enough
    got = threading.Event()

    def heavy() -> None:
        t = bulkhead.enter()
        got.set()
        bulkhead.exit(t, None)

    thread = threading.Thread(target=heavy)
    thread.start()
    until(lambda: bulkhead.waiting == 1, "the heavy call to wait")
    assert not got.is_set()
    assert bulkhead.free == 2
    light.exit(token, None)
    thread.join(WAIT)
    assert got.is_set()
    assert bulkhead.free == 3


def test_a_fair_pool_serves_in_arrival_order_an_unfair_one_lets_light_calls_by() -> None:
    for fair, expected in ((True, ["heavy", "light"]), (False, ["light", "heavy"])):
        source = LocalPermits().bind("p", 2, fair)
        first = source.acquire(1, 0.0)
        assert first == 1
        order: list[str] = []

        def take(
            name: str, weight: int, src: LocalPermits = source, log: list[str] = order
        ) -> None:
            lease = src.acquire(weight, None)
            log.append(name)
            src.release(lease)

        heavy = threading.Thread(target=take, args=("heavy", 2))
        heavy.start()
        until(lambda src=source: src.waiting() == 1, "the heavy waiter")  # type: ignore[misc]
        light = threading.Thread(target=take, args=("light", 1))
        light.start()
        if fair:  # behind the heavy one, although one permit is free
            until(lambda src=source: src.waiting() == 2, "the light waiter")  # type: ignore[misc]
        else:  # takes the free permit at once, before the heavy one
            light.join(WAIT)
        source.release(first)
        heavy.join(WAIT)
        light.join(WAIT)
        assert order == expected, fair
        assert (source.in_use(), source.waiting()) == (0, 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_concurrency": 2, "weight": 3}, "'w': weight=3 is more than max_concurrency=2"),
        ({"max_concurrency": 2, "weight": 0}, "'w': weight= must be a positive int"),
        ({"max_concurrency": 2, "weight": True}, "'w': weight= must be a positive int"),
        ({"weight": 2}, "'w': weight= needs max_concurrency= or bulkhead="),
        ({"bulkhead": ""}, "'w': bulkhead= must be a pool's name"),
        ({"bulkhead": "p", "max_concurrency": 2}, "'w': bulkhead= and max_concurrency= both"),
        ({"max_concurrency": 2, "acquire_timeout": "soon"}, "'w': acquire_timeout 'soon'"),
        ({"acquire_timeout": None}, "'w': acquire_timeout= needs max_concurrency= or bulkhead="),
    ],
)
def test_bad_permit_settings_fail_at_decoration(
    engine: Failover, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        failover.failover("w", engine=engine, **options)(lambda: None)


def test_a_weight_above_a_declared_pool_fails_at_decoration(engine: Failover) -> None:
    engine.bulkhead_pool("small", permits=2)
    with pytest.raises(ConfigurationError, match=r"'too-heavy': weight=3 .* 2 permits of pool"):
        failover.failover("too-heavy", engine=engine, bulkhead="small", weight=3)(lambda: None)


def test_a_weight_above_a_pool_declared_later_fails_at_the_first_call(engine: Failover) -> None:
    @failover.failover("later-heavy", engine=engine, bulkhead="later", weight=3)
    def f() -> None:
        return None

    engine.bulkhead_pool("later", permits=2)
    with pytest.raises(ConfigurationError, match=r"'later-heavy': weight=3"):
        f()


# -- named pools ----------------------------------------------------------------------------------


def test_three_failovers_share_one_pool(engine: Failover) -> None:
    up = Blocking()
    engine.bulkhead_pool("reports", permits=2)
    fns = [
        failover.failover(f"report-{i}", engine=engine, bulkhead="reports", policy="never_throw")(
            up
        )
        for i in range(3)
    ]
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(fns[0], "a"), pool.submit(fns[1], "b")]
        up.wait_entered(2)
        assert fns[2]("c") is None  # the third failover finds the shared pool full
        assert fns[0]("d") is None
        up.release.set()
        assert [h.result() for h in held] == ["a", "b"]
    assert fns[2]("c") == "c"
    bulkheads = [engine.bulkhead(f.definition) for f in fns]
    assert len({id(b.pool) for b in bulkheads}) == 1
    assert engine.health().pools["reports"].rejected == {"report-2": 1, "report-0": 1}
    assert bulkheads[0].free == 2


def test_an_undeclared_pool_fails_at_the_first_call_naming_it(engine: Failover) -> None:
    @failover.failover("orphan", engine=engine, bulkhead="nowhere")
    def f() -> None:
        return None

    with pytest.raises(ConfigurationError, match=r"'orphan': bulkhead='nowhere' names no pool"):
        f()


def test_a_pool_declared_twice_must_say_the_same(engine: Failover) -> None:
    pool = engine.bulkhead_pool("twice", permits=4)
    assert engine.bulkhead_pool("twice", permits=4) is pool
    with pytest.raises(ConfigurationError, match=r"'twice'.*permits=4.*now permits=5"):
        engine.bulkhead_pool("twice", permits=5)
    with pytest.raises(ConfigurationError, match=r"'twice'.*fair=True.*now permits=4, fair=False"):
        engine.bulkhead_pool("twice", permits=4, fair=False)
    with pytest.raises(ConfigurationError, match=r"'twice'.*source="):
        engine.bulkhead_pool("twice", permits=4, source=LocalPermits())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", 1), "name must be a non-empty string"),
        (("p", 0), r"bulkhead_pool\('p'\): permits must be a positive int"),
        (("p", 2, "yes"), r"bulkhead_pool\('p'\): fair must be True or False"),
        (("p", 2, True, object()), r"bulkhead_pool\('p'\): source must be a PermitSource"),
    ],
)
def test_bad_pool_settings_fail_at_declaration(
    engine: Failover, args: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        engine.bulkhead_pool(*args)


def test_max_concurrency_alone_keeps_a_private_pool(engine: Failover) -> None:
    @failover.failover("private-a", engine=engine, max_concurrency=1)
    def a() -> int:
        return 1

    @failover.failover("private-b", engine=engine, max_concurrency=1)
    def b() -> int:
        return 2

    pa, pb = engine.bulkhead(a.definition).pool, engine.bulkhead(b.definition).pool
    assert pa is not pb
    assert pa.private
    assert pa.name == "private-a"
    assert isinstance(pa.source, PermitSource)


# -- nested calls: reentrance per pool -------------------------------------------------------------


def test_a_nested_call_into_another_failover_of_the_pool_takes_no_permit(
    engine: Failover,
) -> None:
    engine.bulkhead_pool("one", permits=1)
    engine.bulkhead_pool("other", permits=1)
    seen: dict[str, int] = {}

    @failover.failover("inner-same", engine=engine, bulkhead="one")
    def inner_same() -> str:
        seen["same"] = engine.bulkhead(inner_same.definition).free
        return "same"

    @failover.failover("inner-other", engine=engine, bulkhead="other")
    def inner_other() -> str:
        seen["other"] = engine.bulkhead(inner_other.definition).free
        return "other"

    @failover.failover("outer", engine=engine, bulkhead="one")
    def outer() -> tuple[str, str]:
        return inner_same(), inner_other()  # a pool of 1 would refuse a second permit

    assert outer() == ("same", "other")
    assert seen == {"same": 0, "other": 0}  # the outer ticket covers "one"; "other" was taken
    assert engine.bulkhead(outer.definition).free == 1
    assert engine.bulkhead(inner_other.definition).free == 1


async def test_a_nested_async_call_into_another_failover_of_the_pool(engine: Failover) -> None:
    engine.bulkhead_pool("anest", permits=1)

    @failover.failover("anest-inner", engine=engine, bulkhead="anest")
    async def inner() -> int:
        return 1

    @failover.failover("anest-outer", engine=engine, bulkhead="anest", weight=1)
    async def outer() -> int:
        return await inner() + 1

    assert await outer() == 2
    assert engine.bulkhead(outer.definition).free == 1


# -- waiting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0.0), (None, None), (1.5, 1.5), ("250ms", 0.25), (timedelta(seconds=2), 2.0)],
)
def test_acquire_timeout_takes_none_zero_and_durations(
    engine: Failover, value: Any, seconds: float | None
) -> None:
    f = failover.failover("waits", engine=engine, max_concurrency=1, acquire_timeout=value)(
        lambda: None
    )
    assert f.definition.acquire_timeout == seconds


def test_none_waits_without_limit_for_a_thread(engine: Failover) -> None:
    up = Blocking()

    @failover.failover("patient", engine=engine, max_concurrency=1, acquire_timeout=None)
    def f(x: str) -> object:
        return up(x)

    bulkhead = engine.bulkhead(f.definition)
    assert "wait" in f.definition.execution
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(f.referential, "a")
        up.wait_entered()
        second = pool.submit(f.referential, "b")
        until(lambda: bulkhead.waiting == 1, "the second call to wait")
        up.release.set()
        assert first.result().up_to_date
        assert second.result().up_to_date
    assert (bulkhead.free, bulkhead.waiting, up.calls) == (1, 0, 2)


async def test_none_waits_without_limit_for_a_task(engine: Failover) -> None:
    up = ABlocking()

    @failover.failover("apatient", engine=engine, max_concurrency=1, acquire_timeout=None)
    async def f(x: str) -> object:
        return await up(x)

    bulkhead = engine.bulkhead(f.definition)
    first = asyncio.create_task(f("a"))
    await up.wait_entered()
    second = asyncio.create_task(f("b"))
    await auntil(lambda: bulkhead.waiting == 1, "the second call to wait")
    up.release.set()
    assert await asyncio.gather(first, second) == ["a", "b"]
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)


def test_a_duration_is_waited_then_refused(engine: Failover) -> None:
    up = Blocking()

    @failover.failover(
        "short-wait", engine=engine, max_concurrency=1, acquire_timeout="10ms", policy="never_throw"
    )
    def f(x: str) -> object:
        return up(x)

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(f, "a")
        up.wait_entered()
        assert f("b") is None
        up.release.set()
        held.result()
    assert engine.bulkhead(f.definition).free == 1


async def test_a_task_cancelled_while_waiting_takes_nothing_and_the_next_is_served() -> None:
    heavy = Bulkhead("cancel", 2, None, weight=2)
    light = Bulkhead("cancel-light", acquire_timeout=None, pool=heavy.pool)
    token = held_elsewhere(light)  # 1 of 2 taken
    waiting_heavy = asyncio.create_task(contextvars.Context().run(heavy.aenter))
    await auntil(lambda: heavy.waiting == 1, "the heavy waiter")
    waiting_light = asyncio.create_task(contextvars.Context().run(light.aenter))
    await auntil(lambda: heavy.waiting == 2, "the light waiter, behind it (fair)")
    waiting_heavy.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting_heavy
    # The heavy waiter left: the light one fits in the free permit and is served at once.
    light_token = await asyncio.wait_for(waiting_light, WAIT)
    assert (heavy.free, heavy.waiting) == (0, 0)
    light.exit(light_token, None)
    light.exit(token, None)
    assert heavy.free == 2


# -- threads and tasks on one pool -----------------------------------------------------------------


def test_sync_threads_and_async_tasks_on_one_pool_never_exceed_it(engine: Failover) -> None:
    permits, threads, tasks, calls = 3, 6, 6, 30
    engine.bulkhead_pool("mixed", permits=permits)
    lock = threading.Lock()
    inside = [0, 0]  # permits in use now, most seen

    def enter(weight: int) -> None:
        with lock:
            inside[0] += weight
            inside[1] = max(inside[1], inside[0])

    def leave(weight: int) -> None:
        with lock:
            inside[0] -= weight

    @failover.failover("mixed-sync", engine=engine, bulkhead="mixed", acquire_timeout=None)
    def light(i: int) -> int:
        enter(1)
        leave(1)
        return i

    @failover.failover(
        "mixed-async", engine=engine, bulkhead="mixed", weight=2, acquire_timeout=None
    )
    async def heavy(i: int) -> int:
        enter(2)
        await asyncio.sleep(0)  # other tasks run while this one holds its permits
        leave(2)
        return i

    async def run_tasks() -> list[int]:
        async def worker() -> list[int]:
            return [await heavy(i) for i in range(calls)]

        results = await asyncio.gather(*(worker() for _ in range(tasks)))
        return [x for r in results for x in r]

    start = threading.Barrier(threads + 1)

    def thread_worker() -> list[int]:
        start.wait(WAIT)
        return [light(i) for i in range(calls)]

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(thread_worker) for _ in range(threads)]
        start.wait(WAIT)
        assert len(asyncio.run(run_tasks())) == tasks * calls
        assert sum(len(f.result()) for f in futures) == threads * calls
    assert inside[0] == 0
    assert inside[1] <= permits
    bulkhead = engine.bulkhead(light.definition)
    assert (bulkhead.free, bulkhead.waiting) == (permits, 0)


# -- metrics, health, dashboard --------------------------------------------------------------------


def test_pools_in_the_metrics_the_health_report_and_the_dashboard(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    engine.bulkhead_pool("exports", permits=3)
    up = Blocking()

    @failover.failover("exp-bulk", engine=engine, bulkhead="exports", weight=2)
    def bulk(x: str) -> object:
        return up(x)

    @failover.failover(
        "exp-wait", engine=engine, bulkhead="exports", weight=2, acquire_timeout=None
    )
    def patient(x: str) -> object:
        return up(x)

    @failover.failover("exp-one", engine=engine, bulkhead="exports", policy="never_throw")
    def one(x: str) -> object:
        return up(x)

    bulkhead = engine.bulkhead(one.definition)
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(bulk, "a")
        up.wait_entered()
        waiting = pool.submit(patient, "b")
        until(lambda: bulkhead.waiting == 1, "the heavy waiter")
        assert one("c") is None  # fair: a waiter is first, although a permit is free
        assert one("d") is None

        def sample(family: str, /, **labels: str) -> float | None:
            return metric(registry, family, **labels)

        assert sample("failover_bulkhead_permits", pool="exports") == 3
        assert sample("failover_bulkhead_permits_in_use", pool="exports") == 2
        assert sample("failover_bulkhead_waiting", pool="exports") == 1
        rejected = "failover_bulkhead_rejected_total"
        assert sample(rejected, name="exp-one", pool="exports") == 2

        report = engine.health().pools["exports"]
        assert (report.source, report.permits, report.in_use, report.waiting) == (
            "local",
            3,
            2,
            1,
        )
        assert report.rejected == {"exp-one": 2}
        assert engine.health().to_dict()["pools"]["exports"]["in_use"] == 2

        client = Client(make_wsgi_app(engine))
        page = client.get("/").get_data(as_text=True)
        row = re.search(r'<tr data-pool="exports">(.*?)</tr>', page)
        assert row is not None
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
        assert cells == ["exports", "local", "3", "2", "1", "exp-one: 2"]
        api = json.loads(client.get("/api/failovers").get_data(as_text=True))
        assert api["pools"][0]["name"] == "exports"
        up.release.set()
        assert (held.result(), waiting.result()) == ("a", "b")
    assert sample("failover_bulkhead_permits_in_use", pool="exports") == 0
    engine.close()
