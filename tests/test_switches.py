"""Forced refresh and switching failovers off (issue 31): ``.refresh(...)``,
``failover.refreshing()`` and ``failover.disabled()``; context variables that follow tasks and
never leak to a parent task; nothing checked per call before they are first used."""

from __future__ import annotations

import asyncio
import threading

import pytest

import failover
from failover import Failover

from .conftest import FakeClock, in_a_new_interpreter
from .support_entries import unique


class Upstream:
    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def __call__(self, code: str) -> dict[str, object]:
        self.calls += 1
        if self.down:
            raise ConnectionError("upstream down")
        return {"code": code, "n": self.calls}


def test_refresh_calls_the_upstream_within_fresh_for_and_stores_sync(
    real: Failover, clock: FakeClock
) -> None:
    up = Upstream()
    country = failover.failover(unique("refresh"), engine=real, fresh_for="1h")(up)
    assert country("FR") == {"code": "FR", "n": 1}
    clock.advance(60)
    assert country("FR") == {"code": "FR", "n": 1}  # fresh: from the store
    assert country.refresh("FR") == {"code": "FR", "n": 2}  # the upstream, now
    assert country("FR") == {"code": "FR", "n": 2}  # and stored
    found = country.peek("FR")
    assert found is not None
    assert found.as_of == clock()
    up.down = True
    with failover.refreshing():  # a refresh that fails still recovers
        out = country.referential("FR")
    assert (out.payload, out.up_to_date) == ({"code": "FR", "n": 2}, False)


def test_refresh_is_awaited_for_async_functions(real: Failover, clock: FakeClock) -> None:
    up = Upstream()

    @failover.failover(unique("arefresh"), engine=real, fresh_for="1h")
    async def country(code: str) -> dict[str, object]:
        return up(code)

    async def scenario() -> None:
        assert await country("FR") == {"code": "FR", "n": 1}
        assert await country("FR") == {"code": "FR", "n": 1}
        assert await country.refresh("FR") == {"code": "FR", "n": 2}
        assert await country("FR") == {"code": "FR", "n": 2}
        real.close()

    asyncio.run(scenario())


def test_refreshing_makes_every_failover_of_the_block_call_its_upstream(
    engine: Failover,
) -> None:
    up = Upstream()
    a = failover.failover("a", engine=engine, fresh_for="1h")(up)
    b = failover.failover("b", engine=engine, throttle="1h")(up)
    a("FR"), b("FR")
    with failover.refreshing():
        assert a("FR")["n"] == 3
        assert b("FR")["n"] == 4
    assert a("FR")["n"] == 3  # stored; fresh again outside the block
    up.down = True
    b("FR")  # served stale, and throttled from here
    assert isinstance(b.referential("FR").cause, failover.Throttled)
    with failover.refreshing():  # not throttled in the block
        assert b.referential("FR").cause.__class__ is ConnectionError
    assert up.calls == 6


def test_disabled_makes_every_failover_a_pass_through(engine: Failover) -> None:
    up = Upstream()
    a = failover.failover("a", engine=engine, fresh_for="1h")(up)
    a("FR")
    with failover.disabled():
        assert a("FR")["n"] == 2  # nothing read: the upstream answers
        assert a("DE")["n"] == 3
        up.down = True
        with pytest.raises(ConnectionError):  # its exceptions reach the caller
            a("FR")
    assert a.peek("DE") is None  # nothing stored in the block
    found = a.peek("FR")
    assert found is not None
    assert found.payload["n"] == 1


def test_disabled_async(engine: Failover) -> None:
    up = Upstream()

    @failover.failover("adisabled", engine=engine)
    async def country(code: str) -> dict[str, object]:
        return up(code)

    async def scenario() -> None:
        await country("FR")
        up.down = True
        with failover.disabled(), pytest.raises(ConnectionError):
            await country("FR")
        assert (await country.referential("FR")).up_to_date is False  # recovered again

    asyncio.run(scenario())


def test_the_blocks_follow_tasks_and_threads_and_never_leak_to_a_parent(
    engine: Failover,
) -> None:
    up = Upstream()

    @failover.failover("tasks", engine=engine, fresh_for="1h")
    async def country(code: str) -> dict[str, object]:
        return up(code)

    async def refreshed_child() -> dict[str, object]:
        with failover.refreshing():
            return await country("FR")

    async def scenario() -> None:
        await country("FR")
        assert (await asyncio.create_task(refreshed_child()))["n"] == 3
        assert (await country("FR"))["n"] == 3  # the child's block did not leak here
        with failover.refreshing():
            task = asyncio.create_task(country("FR"))  # made inside: follows the block
        assert (await task)["n"] == 4
        with failover.refreshing():  # a worker thread copies the context
            n = await asyncio.to_thread(lambda: sync_country("FR")["n"])
        assert n == 5

    sync_country = failover.failover("tasks-sync", engine=engine, fresh_for="1h")(up)
    sync_country("FR")  # stored: fresh outside a block
    asyncio.run(scenario())


def test_a_thread_outside_the_block_is_not_in_it(engine: Failover) -> None:
    up = Upstream()
    country = failover.failover("threads", engine=engine, fresh_for="1h")(up)
    country("FR")
    seen: list[object] = []
    with failover.disabled():
        worker = threading.Thread(target=lambda: seen.append(country("FR")["n"]))
        worker.start()
        worker.join(10)
    assert seen == [1]  # a thread started in the block does not copy its context


def test_nothing_is_checked_per_call_before_the_switches_are_used() -> None:
    """The switches are looked at only once used: before that, a failover without
    fresh_for or throttle takes the branch it took before them (`Runtime.before`)."""
    script = """
import failover
engine = failover.Failover(metrics=False)
f = failover.failover("plain", engine=engine)(lambda x: x)
f(1)
rt = f._failover_state.runtime()
print(rt.before)
with failover.refreshing():
    f(1)
late = failover.failover("late", engine=engine)(lambda x: x)
print(rt.before, late._failover_state.runtime().before)
"""
    assert in_a_new_interpreter(script) == ["False", "True", "True"]
