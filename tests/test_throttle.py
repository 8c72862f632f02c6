"""The fail-safe throttle (``throttle=``, issue 31): after a failed call of a key was served
stale, that key is served stale without calling the upstream for a while; per key and tenant,
counted as a stale answer refused by the ``throttle`` guard, on the engine's clock."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover, Throttled
from failover.events import Events, Observer
from failover.throttle import Throttle

from .conftest import FakeClock
from .support_entries import unique
from .test_metrics import value


class Upstream:
    """Answers ``{"code": code}``, or raises while down; counts its calls per key."""

    def __init__(self) -> None:
        self.down = False
        self.calls: list[str] = []

    def __call__(self, code: str) -> dict[str, str]:
        self.calls.append(code)
        if self.down:
            raise ConnectionError("upstream down")
        return {"code": code}


def test_a_key_served_stale_is_served_stale_again_without_the_upstream_sync(
    real: Failover, clock: FakeClock
) -> None:
    up = Upstream()
    country = failover.failover(unique("throttled"), engine=real, throttle="30s")(up)
    country("FR")
    up.down = True
    first = country.referential("FR")
    assert (first.up_to_date, type(first.cause)) == (False, ConnectionError)
    clock.advance(29)
    again = country.referential("FR")
    assert (again.payload, again.up_to_date) == ({"code": "FR"}, False)
    assert isinstance(again.cause, Throttled)
    assert again.as_of == first.as_of
    assert up.calls == ["FR", "FR"]  # the throttled call did not reach the upstream
    clock.advance(1)  # the throttle is over: the upstream is asked again
    assert type(country.referential("FR").cause) is ConnectionError
    assert up.calls == ["FR", "FR", "FR"]


def test_a_key_served_stale_is_served_stale_again_without_the_upstream_async(
    real: Failover, clock: FakeClock
) -> None:
    up = Upstream()

    @failover.failover(unique("athrottled"), engine=real, throttle="30s")
    async def country(code: str) -> dict[str, str]:
        return up(code)

    async def scenario() -> None:
        await country("FR")
        up.down = True
        assert type((await country.referential("FR")).cause) is ConnectionError
        clock.advance(10)
        again = await country.referential("FR")
        assert isinstance(again.cause, Throttled)
        assert again.payload == {"code": "FR"}
        assert up.calls == ["FR", "FR"]
        clock.advance(20)
        assert type((await country.referential("FR")).cause) is ConnectionError
        real.close()  # on the loop: its async store clients close with it

    asyncio.run(scenario())


def test_the_throttle_is_per_key(engine: Failover) -> None:
    up = Upstream()
    country = failover.failover("per-key", engine=engine, throttle="1m")(up)
    country("FR")
    country("DE")
    up.down = True
    country("FR")  # FR is throttled from here
    country("FR")
    assert country.referential("DE").cause.__class__ is ConnectionError  # DE is not
    assert up.calls == ["FR", "DE", "FR", "DE"]


def test_the_throttle_is_per_tenant(tmp_path: Path, clock: FakeClock) -> None:
    engine = Failover(
        f"sqlite:///{tmp_path}/{{tenant}}.db",
        tenant_resolver=failover.current_tenant,
        clock=clock,
        metrics=False,
        async_writes=False,
    )
    up = Upstream()
    country = failover.failover("tenants", engine=engine, throttle="1m")(up)
    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            country("FR")
    up.down = True
    with failover.tenant("acme"):
        country("FR")
        assert isinstance(country.referential("FR").cause, Throttled)
    with failover.tenant("globex"):  # the same key of another tenant is not throttled
        assert type(country.referential("FR").cause) is ConnectionError
    assert up.calls == ["FR", "FR", "FR", "FR"]
    engine.close()


def test_a_throttled_answer_is_counted_stale_with_its_own_reason(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    seen: list[tuple[str, str]] = []

    class Facts(Observer):
        def refused(self, guard: str, cause: Exception) -> None:
            seen.append(("refused", guard))

        def recovered(self, seconds: float | None, cause: Exception, as_of: Any) -> None:
            seen.append(("recovered", type(cause).__name__))

    up = Upstream()
    country = failover.failover("counted", engine=engine, throttle="1m")(up)
    country("FR")
    up.down = True
    country("FR")
    country("FR")
    rt = country._failover_state.runtime()
    rt.events = Events([*rt.events.observers, Facts()])  # one more observer of the stream
    country("FR")
    assert seen == [("refused", "throttle"), ("recovered", "Throttled")]
    assert value(registry, "failover_refused_total", name="counted", guard="throttle") == 2
    health = engine.health().failovers["counted"]
    assert health.refused == {"throttle": 2}
    assert health.counts["recovered"] == 3  # each throttled answer is a stale answer
    assert health.status == "degraded"
    engine.close()


def test_the_throttle_ends_with_the_entry(engine: Failover, clock: FakeClock) -> None:
    up = Upstream()
    country = failover.failover("short", engine=engine, ttl="10s", throttle="1m")(up)
    country("FR")
    up.down = True
    clock.advance(5)
    country("FR")  # stale, throttled until the entry expires (10 s), not for a minute
    clock.advance(5)
    with pytest.raises(ConnectionError):  # expired: nothing to serve, the upstream is asked
        country("FR")
    assert up.calls == ["FR", "FR", "FR"]


def test_an_entry_gone_under_the_throttle_sends_the_call_to_the_upstream(
    engine: Failover,
) -> None:
    up = Upstream()
    country = failover.failover("gone", engine=engine, throttle="1m")(up)
    country("FR")
    up.down = True
    country("FR")
    entry = country.peek("FR")
    assert entry is not None
    engine.store.delete(entry.name, entry.key)  # behind the throttle's back
    with pytest.raises(ConnectionError):
        country("FR")
    assert up.calls == ["FR", "FR", "FR"]


def test_refresh_and_invalidate_end_the_throttle(engine: Failover) -> None:
    up = Upstream()
    country = failover.failover("ended", engine=engine, throttle="1h")(up)
    country("FR")
    up.down = True
    country("FR")
    assert isinstance(country.referential("FR").cause, Throttled)
    up.down = False
    assert country.refresh("FR") == {"code": "FR"}  # past the throttle, and lifts it
    up.down = True
    assert type(country.referential("FR").cause) is ConnectionError
    up.down = False
    country("FR")
    up.down = True
    country("FR")  # throttled again
    country.invalidate("FR")
    with pytest.raises(ConnectionError):  # nothing stored, nothing throttled
        country("FR")


def test_the_throttle_table_is_bounded(clock: FakeClock) -> None:
    throttle = Throttle(timedelta(minutes=1), max_keys=2)
    now = clock()
    for key in ("a", "b", "c"):
        throttle.mark(key, now, None)
    assert len(throttle) == 2
    assert not throttle.holds("a", now)  # marked longest ago: left first
    assert throttle.holds("b", now)
    assert throttle.holds("c", now)
    assert not throttle.holds("b", now + timedelta(minutes=1))
    assert len(throttle) == 1  # an ended throttle is dropped when seen


def test_without_throttle_every_call_asks_the_upstream(engine: Failover) -> None:
    up = Upstream()
    country = failover.failover("unthrottled", engine=engine)(up)
    country("FR")
    up.down = True
    country("FR")
    country("FR")
    assert up.calls == ["FR", "FR", "FR"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_starts_with_no_key_throttled(engine: Failover) -> None:
    up = Upstream()
    country = failover.failover("forked", engine=engine, throttle="1h")(up)
    country("FR")
    up.down = True
    country("FR")  # throttled in the parent
    assert isinstance(country.referential("FR").cause, Throttled)
    throttle = country._failover_state.runtime().throttle
    with throttle.lock:  # held at the fork, as by another thread
        pid = os.fork()
        if pid == 0:  # the child: a new lock, nothing throttled
            signal.alarm(10)  # a hang guard: a child stuck on the parent's lock dies
            ok = not len(throttle)
            ok = ok and type(country.referential("FR").cause) is ConnectionError
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
