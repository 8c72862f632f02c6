"""A hung *server* holds no caller of the control over entries past ``store_timeout``:
``.invalidate_all()``, ``.expire()``, ``engine.invalidate_tag()`` (and ``.invalidate()`` with no
queue to take the delete) run under the store deadline and its breaker like a read.

Real servers stopped for real, as in tests/test_store_hung.py (whose fixtures these are):
PostgreSQL and redis-server with ``SIGSTOP``, a SQLite file another process holds the write lock
of. Each operation runs on a thread of the test's own with a hang guard (a join of several
seconds, failing the test): without the deadline, a stopped PostgreSQL holds it for good. What
the caller got is asserted (the deadline's `StoreTimeout`, then the breaker's
`StoreUnavailable` without touching the store), with what the deadline layer counted, and that
the operation goes through again once the store answers. No assertion on time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

import failover
from failover import Failover
from failover.stores.layers.deadline import DeadlineStore, StoreTimeout, StoreUnavailable

from .conftest import FakeClock, Upstream
from .test_store_hung import (  # noqa: F401 - its fixtures hung_store, pg_server, redis_srv
    RESET,
    Hang,
    _deadline,
    _engine,
    _resumed,
    hung_store_fixture,
    pg_server,
    redis_srv,
)

GUARD = 15.0  # seconds a stopped store may hold the test's thread before the test fails

# operation -> (the store operation it makes, whether its failover queues writes)
OPERATIONS = {
    "invalidate_all": ("delete_all", True),
    "expire": ("expire", True),
    "invalidate_tag": ("delete_tagged", True),
    "invalidate": ("delete", False),  # a queued delete never waits: with no queue it does
}


def _outcome(work: Callable[[], object]) -> list[object]:
    """What ``work()`` returned or raised, from a thread of its own; empty when it was still
    held after `GUARD` seconds (it ends on its own once the store is resumed)."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(work())
        except Exception as exc:
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD)
    return box


def _control(engine: Failover, fn: Any, operation: str) -> Callable[[], object]:
    """The control operation ``operation`` on the failover ``fn`` (of key ``1``, tag ``x:1``)."""
    if operation == "invalidate_all":
        return fn.invalidate_all  # type: ignore[no-any-return]
    if operation == "expire":
        return lambda: fn.expire(1)
    if operation == "invalidate_tag":
        return lambda: engine.invalidate_tag("x:1")
    return lambda: fn.invalidate(1)


def _held(layer: DeadlineStore, hang: Hang, work: Callable[[], object]) -> list[list[object]]:
    """``work`` twice on the hung store: the deadline, then the breaker (if the first ended)."""
    with hang():
        first = _outcome(work)
        second = _outcome(work) if first else []
    assert first, "a control operation held its caller past the store deadline"
    return [first, second]


def _assert_bounded(layer: DeadlineStore, operation: str, got: list[list[object]]) -> None:
    first, second = got
    assert isinstance(first[0], StoreTimeout), first  # the deadline's, not the driver's
    assert isinstance(second[0], StoreUnavailable), second  # skipped: the breaker is open
    assert layer.errors[(operation, "timeout")] == 1
    assert layer.errors[(operation, "breaker_open")] == 1
    assert not layer.up


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_hung_store_holds_no_sync_caller_of_the_control_over_entries(
    hung_store: tuple[str, Any, Hang],
    name: str,
    clock: FakeClock,
) -> None:
    _, url, hang = hung_store
    operation, queued = OPERATIONS[name]
    engine = _engine(url, queued, clock)
    upstream = Upstream()
    try:

        @failover.failover("svc.ctl", engine=engine, tags=lambda x: [f"x:{x}"])
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(1) == 1
        assert engine.flush(10)
        layer = _deadline(engine)
        work = _control(engine, get, name)
        _assert_bounded(layer, operation, _held(layer, hang, work))
        _resumed(engine)
        clock.advance(RESET + 1)  # the breaker lets a trial through: the operation answers
        work()
        assert layer.up
    finally:
        engine.close()


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_hung_store_holds_no_async_caller_of_the_control_over_entries(
    hung_store: tuple[str, Any, Hang],
    name: str,
    clock: FakeClock,
) -> None:
    _, url, hang = hung_store
    operation, queued = OPERATIONS[name]
    engine = _engine(url, queued, clock)
    upstream = Upstream()

    @failover.failover("svc.actl", engine=engine, tags=lambda x: [f"x:{x}"])
    async def aget(x: int) -> int:
        return upstream(x)  # type: ignore[return-value]

    work = _control(engine, aget, name)

    async def first() -> int:
        try:
            return await aget(1)
        finally:
            await engine.store.aclose()  # type: ignore[attr-defined] # the loop's own clients

    async def on_the_loop() -> object:
        # The control methods of an async failover are synchronous: called on the loop, they
        # hold it no longer than the deadline (and make no client of the loop's).
        return work()

    def control() -> object:
        return asyncio.run(on_the_loop())

    try:
        assert asyncio.run(first()) == 1
        assert engine.flush(10)
        layer = _deadline(engine)
        _assert_bounded(layer, operation, _held(layer, hang, control))
        _resumed(engine)
        clock.advance(RESET + 1)
        control()
        assert layer.up
    finally:
        engine.close()
