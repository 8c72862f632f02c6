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
from typing import Any, Protocol, cast

from .context import CallContext
from .definition import FailoverDefinition
from .errors import SoftTimeoutError
from .execution import Execution
from .handlers import key_of
from .payload import ReferentialPayload
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


class Runtime(Protocol):
    """What single flight needs of a failover's runtime (`failover.core.Runtime`): a
    Protocol, so this module, which the runtime imports, imports nothing back."""

    definition: FailoverDefinition
    flights: Flights | None
    execution: Execution | None

    def failed(
        self, ctx: CallContext, cause: Exception, seconds: float = 0.0
    ) -> ReferentialPayload[Any] | None:
        """Recover and resolve a failed call: an envelope, or ``None`` to re-raise ``cause``."""
        ...

    async def afailed(
        self, ctx: CallContext, cause: Exception, seconds: float
    ) -> ReferentialPayload[Any] | None:
        """`failed` for an async caller."""
        ...

    def succeeded(self, ctx: CallContext, result: Any, seconds: float | None = None) -> Any:
        """Store a live result; the value the caller gets."""
        ...

    async def asucceeded(self, ctx: CallContext, result: Any, seconds: float) -> Any:
        """`succeeded` for an async caller."""
        ...

    def shared(self, ctx: CallContext, result: Any, now: datetime | None, seconds: float) -> Any:
        """A follower's copy of the leader's result, enriched as live and not stored."""
        ...

    def live_envelope(self, ctx: CallContext, value: Any) -> ReferentialPayload[Any]:
        """The envelope of a live value."""
        ...


def _key(ctx: CallContext) -> Any:
    try:
        return key_of(ctx)
    except Exception:  # no key, no sharing: this call flies alone (its store shows the error)
        return object()


def _late(rt: Runtime) -> SoftTimeoutError:
    return SoftTimeoutError(
        f"failover {rt.definition.name!r}: the shared call of this key did not answer within "
        f"{rt.definition.timeout:g}s (timeout=)"
    )


def _out(out: Any, cause: Exception, envelope: bool) -> Any:
    if out is None:
        raise cause
    return out if envelope else out.payload


def flown(
    rt: Runtime,
    ctx: CallContext,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    envelope: bool,
) -> Any:
    """A sync call with single flight: what the caller gets (the value or its envelope)."""
    flights = cast(Flights, rt.flights)  # set: single_flight is on
    key = _key(ctx)
    flight, leader = flights.join(key, None)
    start = perf_counter()
    if leader:
        ex = rt.execution
        try:
            result = fn(*args, **kwargs) if ex is None else ex.call(ctx, fn, args, kwargs)
        except BaseException as exc:
            flights.land(key, flight, error=exc)
            if not isinstance(exc, Exception):
                raise
            return _out(rt.failed(ctx, exc, perf_counter() - start), exc, envelope)
        try:
            value = rt.succeeded(ctx, result, perf_counter() - start)
        finally:
            flights.land(key, flight, result, now=ctx.now)
        return rt.live_envelope(ctx, value) if envelope else value
    if not flight.ended.wait(rt.definition.timeout):
        late = _late(rt)
        return _out(rt.failed(ctx, late, perf_counter() - start), late, envelope)
    error = flight.error
    if error is not None and not isinstance(error, Exception):
        return flown(rt, ctx, fn, args, kwargs, envelope)  # the leader never got an answer
    if error is not None:
        return _out(rt.failed(ctx, error, perf_counter() - start), error, envelope)
    value = rt.shared(ctx, deep_copy(flight.result), flight.now, perf_counter() - start)
    return rt.live_envelope(ctx, value) if envelope else value


async def aflown(
    rt: Runtime,
    ctx: CallContext,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    envelope: bool,
) -> Any:
    """`flown` for an ``async def`` failover: followers are tasks of the leader's loop."""
    flights = cast(Flights, rt.flights)  # set: single_flight is on
    key = _key(ctx)
    flight, leader = flights.join(key, asyncio.get_running_loop())
    start = perf_counter()
    if leader:
        ex = rt.execution
        try:
            if ex is None:
                result = await fn(*args, **kwargs)
            else:
                result = await ex.acall(ctx, fn, args, kwargs)
        except BaseException as exc:
            flights.land(key, flight, error=exc)
            if not isinstance(exc, Exception):
                raise
            return _out(await rt.afailed(ctx, exc, perf_counter() - start), exc, envelope)
        try:
            value = await rt.asucceeded(ctx, result, perf_counter() - start)
        finally:
            flights.land(key, flight, result, now=ctx.now)
        return rt.live_envelope(ctx, value) if envelope else value
    assert flight.future is not None  # an async flight
    try:
        # Shielded: a follower giving up (its timeout, its cancellation) leaves the flight be.
        async with asyncio.timeout(rt.definition.timeout):
            await asyncio.shield(flight.future)
    except TimeoutError:
        late = _late(rt)
        return _out(await rt.afailed(ctx, late, perf_counter() - start), late, envelope)
    error = flight.error
    if error is not None and not isinstance(error, Exception):
        return await aflown(rt, ctx, fn, args, kwargs, envelope)  # the leader never answered
    if error is not None:
        return _out(await rt.afailed(ctx, error, perf_counter() - start), error, envelope)
    value = rt.shared(ctx, deep_copy(flight.result), flight.now, perf_counter() - start)
    return rt.live_envelope(ctx, value) if envelope else value
