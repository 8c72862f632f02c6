"""A call past the fresh window joins the refresh ahead of its key in flight (issue 29): one
upstream call serves both, the caller gets the refresh's result as live, and the slow refresh
never lands an older result over a newer one (FusionCache's
``NormalFactoryExecutionWaitsForInFlightEagerRefresh``). Bounded by the caller's own soft timeout;
a failed refresh leaves the caller to call for itself. Sync and async, on a fake clock; the
refresh held by an event, the caller seen waiting through the refresh table (no sleeps)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import failover
from failover import Failover
from failover.refresh import RefreshAhead

from .conftest import FakeClock
from .execution_support import WAIT


class Watched(RefreshAhead):
    """The failover's refreshes (the real ones), telling the test when a call found the
    refresh of its key in flight (it is about to wait for it)."""

    def __init__(self, ahead: RefreshAhead) -> None:
        super().__init__(ahead.runtime, ahead.refreshes)
        self.joining = threading.Event()

    def _in_flight(self, call: Any) -> Any:
        ran = super()._in_flight(call)
        if ran is not None:
            self.joining.set()
        return ran


def watched(fn: Any) -> Watched:
    rt = fn._failover_state.runtime()
    rt.ahead = Watched(rt.ahead)
    return rt.ahead  # type: ignore[no-any-return]


class Upstream:
    """Answers its call count; the refresh (the second call) is held until released, then
    fails if ``failing``."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.failing = False

    def answer(self) -> dict[str, int]:
        self.calls += 1
        n = self.calls
        if n == 2:  # the refresh ahead
            self.entered.set()
            assert self.release.wait(WAIT)
            if self.failing:  # the refresh fails
                raise ConnectionError("upstream down")
        return {"n": n}


def test_a_call_past_the_window_joins_the_refresh_in_flight(clock: FakeClock) -> None:
    up = Upstream()
    with Failover(clock=clock, metrics=False) as engine:

        @failover.failover("rates", fresh_for="2s", refresh_ahead=0.2, engine=engine)
        def rates() -> dict[str, int]:
            return up.answer()

        assert rates() == {"n": 1}
        ahead = watched(rates)
        clock.advance(0.5)  # past refresh_ahead: answered fresh, refreshed behind
        assert rates() == {"n": 1}
        assert up.entered.wait(WAIT)
        clock.advance(2.0)  # past the fresh window, the refresh still in flight
        got: list[Any] = []
        late = threading.Thread(target=lambda: got.append(rates.referential()))
        late.start()
        assert ahead.joining.wait(WAIT)
        up.release.set()
        late.join(WAIT)
        assert not late.is_alive()
        assert got[0].payload == {"n": 2}  # the refresh's result, as live
        assert got[0].up_to_date is True
        assert up.calls == 2  # one upstream call served both
        assert engine.refreshes.wait(WAIT)
        assert len(ahead) == 0
        assert rates.peek().payload == {"n": 2}  # and it is what is stored


def test_a_task_past_the_window_joins_the_refresh_task_in_flight(clock: FakeClock) -> None:
    up = Upstream()
    with Failover(clock=clock, metrics=False) as engine:

        @failover.failover("arates", fresh_for="2s", refresh_ahead=0.2, engine=engine)
        async def rates() -> dict[str, int]:
            up.calls += 1
            n = up.calls
            if n == 2:
                entered.set()
                await held.wait()
            return {"n": n}

        async def scenario() -> None:
            assert await rates() == {"n": 1}
            ahead = watched(rates)
            clock.advance(0.5)
            assert await rates() == {"n": 1}
            await asyncio.wait_for(entered.wait(), WAIT)
            clock.advance(2.0)
            late = asyncio.create_task(rates.referential())
            await asyncio.wait_for(asyncio.to_thread(ahead.joining.wait, WAIT), WAIT)
            held.set()
            got = await asyncio.wait_for(late, WAIT)
            assert got.payload == {"n": 2}
            assert got.up_to_date is True
            assert up.calls == 2
            assert len(ahead) == 0

        held, entered = asyncio.Event(), asyncio.Event()
        asyncio.run(scenario())


def test_a_caller_waits_no_longer_than_its_timeout(clock: FakeClock) -> None:
    up = Upstream()
    with Failover(clock=clock, metrics=False) as engine:

        @failover.failover("slow", fresh_for="2s", refresh_ahead=0.2, timeout="50ms", engine=engine)
        def rates() -> dict[str, int]:
            return up.answer()

        rates()
        ahead = watched(rates)
        clock.advance(0.5)
        rates()
        assert up.entered.wait(WAIT)
        clock.advance(2.0)
        # The refresh is held past this call's timeout: the call stops waiting and goes its own
        # way, which meets the same upstream call in flight (the soft timeout's shared calls)
        # and is served the stored entry, stale, as any call slower than its timeout is.
        got = rates.referential()
        assert ahead.joining.is_set()
        assert got.payload == {"n": 1}
        assert got.up_to_date is False
        assert isinstance(got.cause, TimeoutError)
        assert up.calls == 2
        up.release.set()
        assert engine.refreshes.wait(WAIT)


def test_a_failed_refresh_leaves_the_caller_to_call_for_itself(clock: FakeClock) -> None:
    up = Upstream()
    with Failover(clock=clock, metrics=False) as engine:

        @failover.failover("f", fresh_for="2s", refresh_ahead=0.2, engine=engine)
        def rates() -> dict[str, int]:
            return up.answer()

        rates()
        ahead = watched(rates)
        clock.advance(0.5)
        rates()  # answered fresh; its refresh is held, then fails
        assert up.entered.wait(WAIT)
        clock.advance(2.0)
        got: list[Any] = []
        late = threading.Thread(target=lambda: got.append(rates.referential()))
        late.start()
        assert ahead.joining.wait(WAIT)
        up.failing = True
        up.release.set()
        late.join(WAIT)
        assert not late.is_alive()
        assert got[0].payload == {"n": 3}  # it called for itself once the refresh failed
        assert got[0].up_to_date is True
