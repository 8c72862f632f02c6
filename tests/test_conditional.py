"""Conditional refresh (issue 31): inside the upstream, ``failover.stale_entry()`` is the stored
envelope of the call's key; raising or returning ``failover.NotModified()`` keeps the stored
payload and renews its ``as_of`` and expiry, a live answer to the caller."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pybreaker
import pytest

import failover
from failover import Failover, InMemoryStore, NothingToRenew, NotModified, stale_entry

from .conftest import FakeClock, in_a_new_interpreter
from .support_entries import unique


class Server:
    """An HTTP-like upstream: a page with an ETag, answering 304 to a matching one."""

    def __init__(self) -> None:
        self.etag = "v1"
        self.seen: list[str | None] = []

    def get(self, url: str, if_none_match: str | None) -> dict[str, str] | None:
        self.seen.append(if_none_match)
        if if_none_match == self.etag:
            return None  # 304
        return {"url": url, "etag": self.etag, "body": f"body {self.etag}"}


def test_not_modified_renews_the_stored_entry_sync(real: Failover, clock: FakeClock) -> None:
    server = Server()

    @failover.failover(unique("page"), engine=real, ttl="1h")
    def page(url: str) -> dict[str, str]:
        old = failover.stale_entry()
        answer = server.get(url, old.payload["etag"] if old else None)
        if answer is None:
            raise failover.NotModified()
        return answer

    first = page.referential("/a")
    clock.advance(600)
    renewed = page.referential("/a")
    assert server.seen == [None, "v1"]  # the stored ETag went to the upstream
    assert renewed.payload == first.payload  # the stored payload, kept
    assert (renewed.up_to_date, renewed.as_of) == (True, clock())  # a live answer, renewed
    assert renewed.expire_on == clock() + timedelta(hours=1)
    stored = page.peek("/a")
    assert stored is not None
    assert stored.as_of == clock()
    assert stored.expire_on == clock() + timedelta(hours=1)
    server.etag = "v2"
    assert page("/a")["body"] == "body v2"  # modified: the new answer, stored


def test_not_modified_returned_renews_too_async(real: Failover, clock: FakeClock) -> None:
    server = Server()

    @failover.failover(unique("apage"), engine=real, ttl="1h")
    async def page(url: str) -> Any:
        old = stale_entry()
        answer = server.get(url, old.payload["etag"] if old else None)
        return NotModified() if answer is None else answer

    async def scenario() -> None:
        first = await page.referential("/a")
        clock.advance(60)
        renewed = await page.referential("/a")
        assert (renewed.payload, renewed.up_to_date, renewed.as_of) == (
            first.payload,
            True,
            clock(),
        )
        real.close()

    asyncio.run(scenario())
    assert server.seen == [None, "v1"]


def test_not_modified_with_nothing_stored_is_a_failure_recovered_as_one(
    engine: Failover,
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=10)

    @failover.failover("nothing", engine=engine, breaker=breaker)
    def page(url: str) -> dict[str, str]:
        raise NotModified()

    with pytest.raises(NothingToRenew) as caught:
        page("/a")
    assert "'nothing'" in str(caught.value)
    assert "nothing recovered (no stored entry)" in " ".join(caught.value.__notes__)
    assert breaker.fail_counter == 1  # the upstream's failure, to the breaker too

    @failover.failover("nothing-never", engine=engine, policy="never_throw")
    def quiet(url: str) -> dict[str, str] | None:
        raise NotModified()

    envelope = quiet.referential("/a")
    assert envelope.payload is None
    assert isinstance(envelope.cause, NothingToRenew)


def test_the_entry_is_read_only_when_the_upstream_asks(clock: FakeClock) -> None:
    class Counting(InMemoryStore):
        finds = 0

        def find(self, name: str, key: str) -> Any:
            Counting.finds += 1
            return super().find(name, key)

    engine = Failover(Counting(), clock=clock, metrics=False)
    asks = [False]

    @failover.failover("lazy", engine=engine)
    def page(url: str) -> str:
        if asks[0]:
            assert stale_entry() is stale_entry()  # read once per call
        return url

    page("/a")
    page("/a")
    assert Counting.finds == 0  # never asked: never read
    asks[0] = True
    page("/a")
    assert Counting.finds == 1
    engine.close()


def test_outside_an_upstream_there_is_no_stale_entry() -> None:
    assert stale_entry() is None


def test_nothing_is_set_per_call_until_conditional_refresh_is_named() -> None:
    """A process that never names stale_entry or NotModified sets no context variable per
    call; naming either (or decorating a function that does) turns it on."""
    script = """
import failover
from failover import switches
engine = failover.Failover(metrics=False)
plain = failover.failover("plain", engine=engine)(lambda x: x)
plain(1)
print(switches.STATE.armed == switches.CONDITIONAL)

@failover.failover("etag", engine=engine)
def etag(x):
    return failover.stale_entry()

print(switches.STATE.armed == switches.CONDITIONAL)
"""
    assert in_a_new_interpreter(script) == ["False", "True"]


def test_not_modified_through_the_soft_timeouts_worker_and_single_flight(
    engine: Failover, clock: FakeClock
) -> None:
    """The upstream runs on the soft timeout's worker thread: it knows its call there too; a
    renewal is a result like any other for the calls sharing the flight."""
    seen: list[object] = []

    @failover.failover("worker", engine=engine, timeout="5s", single_flight=True)
    def page(url: str) -> dict[str, str]:
        old = stale_entry()
        seen.append(None if old is None else old.payload)
        if old is not None:
            raise NotModified()
        return {"url": url}

    page("/a")
    clock.advance(30)
    renewed = page.referential("/a")
    assert seen == [None, {"url": "/a"}]
    assert (renewed.payload, renewed.up_to_date, renewed.as_of) == ({"url": "/a"}, True, clock())


def test_not_modified_for_scatter_gather_renews_every_slice(
    engine: Failover, clock: FakeClock
) -> None:
    @failover.failover("slices", engine=engine, splitter=failover.ListSplitter("code"))
    def countries(codes: str) -> list[dict[str, str]]:
        if stale_entry() is not None:
            raise NotModified()
        return [{"code": c} for c in codes.split(",")]

    countries("FR,DE")
    clock.advance(60)
    assert countries("FR,DE") == [{"code": "FR"}, {"code": "DE"}]
    for code in ("FR", "DE"):
        found = countries.peek(code)
        assert found is not None
        assert found.as_of == clock()  # each slice renewed
