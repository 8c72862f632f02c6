"""Single flight (``single_flight=True``): concurrent calls with the same key share one upstream
call and one store write.

The first call of a key (the leader) runs as any call does: execution layer, upstream, store or
recovery. Calls of the same key that come while it is in flight (followers: threads of the
process for a sync failover, tasks of the same event loop for an async one) wait for it, each at
most its own soft timeout (``timeout=``; without one, as long as the leader). The leader's result
reaches each follower as its own copy, enriched as live and not stored again; the leader's
exception reaches each follower's own recovery (a follower whose wait outlasts its timeout
recovers with a `SoftTimeoutError`). A leader stopped by something other than an ``Exception``
(a cancellation) leaves its followers to call for themselves.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import datetime
from time import perf_counter
from typing import Any, cast

from .call import Call
from .errors import SoftTimeoutError
from .handlers import key_of
from .stores.copying import deep_copy

__all__ = ["Flights", "aflown", "flown"]


class _Flight:
    """One upstream call in flight, and how it ended."""

    __slots__ = ("ended", "error", "followers", "future", "loop", "now", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop  # None: a sync call
        self.ended = threading.Event()
        self.future: asyncio.Future[None] | None = None if loop is None else loop.create_future()
        self.result: Any = None
        self.error: BaseException | None = None
        self.now: datetime | None = None
        self.followers = 0  # the calls that joined it


class Flights:
    """The calls of one failover in flight, by key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Any, _Flight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def join(self, key: Any, loop: asyncio.AbstractEventLoop | None) -> tuple[_Flight, bool]:
        """The flight of ``key`` to wait for, and whether this call leads it (starts it)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and flight.loop is loop:
                flight.followers += 1
                return flight, False
            flight = self._flights[key] = _Flight(loop)
            return flight, True

    def land(
        self,
        key: Any,
        flight: _Flight,
        result: Any = None,
        error: BaseException | None = None,
        now: datetime | None = None,
    ) -> None:
        """The leader's call ended: its followers are woken with its outcome."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.result, flight.error, flight.now = result, error, now
        flight.ended.set()
        if flight.future is not None and not flight.future.done():
            flight.future.set_result(None)  # the leader is a task of the flight's loop


def _key(call: Call) -> Any:
    try:
        return key_of(call)
    except Exception:  # no key, no sharing: this call flies alone (its store shows the error)
        return object()


def _late(call: Call) -> SoftTimeoutError:
    return SoftTimeoutError(
        f"failover {call.definition.name!r}: the shared call of this key did not answer within "
        f"{call.definition.timeout:g}s (timeout=)"
    )


def _out(out: Any, cause: Exception, envelope: bool) -> Any:
    if out is None:
        raise cause
    return out if envelope else out.payload


def flown(
    call: Call,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    envelope: bool,
) -> Any:
    """A sync call with single flight: what the caller gets (the value or its envelope)."""
    rt = call.rt
    flights = cast(Flights, rt.flights)  # set: single_flight is on
    key = _key(call)
    flight, leader = flights.join(key, None)
    call.start = perf_counter()
    if leader:
        try:
            with call:
                result = call.run(fn, args, kwargs)
        except BaseException as exc:
            flights.land(key, flight, error=exc)
            if not isinstance(exc, Exception):
                raise
            return _out(call.failed(exc), exc, envelope)
        try:
            value = call.live(result)
        finally:
            flights.land(key, flight, result, now=call.now)
        return call.envelope(value) if envelope else value
    if not flight.ended.wait(rt.definition.timeout):
        late = _late(call)
        return _out(call.failed(late), late, envelope)
    error = flight.error
    if error is not None and not isinstance(error, Exception):
        return flown(call, fn, args, kwargs, envelope)  # the leader never got an answer
    if error is not None:
        return _out(call.failed(error), error, envelope)
    value = call.shared(deep_copy(flight.result), flight.now)
    return call.envelope(value) if envelope else value


async def aflown(
    call: Call,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    envelope: bool,
) -> Any:
    """`flown` for an ``async def`` failover: followers are tasks of the leader's loop."""
    rt = call.rt
    flights = cast(Flights, rt.flights)  # set: single_flight is on
    key = _key(call)
    flight, leader = flights.join(key, asyncio.get_running_loop())
    call.start = perf_counter()
    if leader:
        try:
            async with call:
                result = await call.arun(fn, args, kwargs)
        except BaseException as exc:
            flights.land(key, flight, error=exc)
            if not isinstance(exc, Exception):
                raise
            return _out(await call.afailed(exc), exc, envelope)
        try:
            value = call.live(result) if not rt.may_offload else await call.live_off_loop(result)
        finally:
            flights.land(key, flight, result, now=call.now)
        return call.envelope(value) if envelope else value
    assert flight.future is not None  # an async flight
    try:
        # Shielded: a follower giving up (its timeout, its cancellation) leaves the flight be.
        async with asyncio.timeout(rt.definition.timeout):
            await asyncio.shield(flight.future)
    except TimeoutError:
        late = _late(call)
        return _out(await call.afailed(late), late, envelope)
    error = flight.error
    if error is not None and not isinstance(error, Exception):
        return await aflown(call, fn, args, kwargs, envelope)  # the leader never answered
    if error is not None:
        return _out(await call.afailed(error), error, envelope)
    value = call.shared(deep_copy(flight.result), flight.now)
    return call.envelope(value) if envelope else value
