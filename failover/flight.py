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

On an engine routed by tenant a flight is one tenant's: its key is ``(tenant, key)``, the tenant
resolved on the caller's thread, so a tenant never gets another's result. Every way out of a
flight (answer, error, refusal by a guard, cancellation) lands it in `Flights.land`, the one
place a flight leaves the table; a forked child starts with no flight (`Flights.forked`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from asyncio import _get_running_loop as _running_loop  # C, no exception without a loop
from collections.abc import Callable
from datetime import datetime
from time import perf_counter
from types import TracebackType
from typing import Any, cast

from .call import Call
from .context import CallContext
from .errors import SoftTimeoutError
from .forks import AfterFork
from .handlers import Partial, key_of
from .stores.layers.copying import deep_copy

__all__ = ["Flights", "FlownCall"]


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
    """The calls of one failover in flight, by key (``(tenant, key)`` when routed by tenant)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Any, _Flight] = {}
        _FORKS.add(self)

    def forked(self) -> None:
        """In a forked child: the calls in flight at the fork are the parent's, and no thread of
        the child will land them (a later call of their key would wait for them for ever)."""
        self._lock = threading.Lock()
        self._flights = {}

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
        future, loop = flight.future, flight.loop
        if future is None or loop is None:
            return
        if _running_loop() is loop:
            _wake(future)
        else:  # the leader stored its result on a worker thread (`Runtime.off_loop`)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits on it
                loop.call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FlownCall(Call):
    """A call of a failover with single flight: its shell runs it as any call, and this says
    whether it leads its key's flight (entered, the upstream called, the result stored and
    handed to the followers) or follows it (no guards entered: its "upstream" is the leader's
    outcome, waited for at most its soft timeout, its result not stored again)."""

    __slots__ = ("flight", "flight_key", "heard", "leads")

    flight: _Flight
    flight_key: Any
    leads: bool

    def _join(self, loop: asyncio.AbstractEventLoop | None) -> None:
        flights = cast(Flights, self.rt.flights)  # set: single_flight is on
        key = getattr(self, "flight_key", None)  # set by `narrowed`, or by an earlier join
        if key is None:
            key = _key(self)
            rt = self.rt
            if rt.router is not None:  # routed by tenant: the tenant's own flight
                key = rt.flight_key(key)
            self.flight_key = key
        self.flight, self.leads = flights.join(key, loop)

    def narrowed(
        self, part: Partial, args: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """`Call.narrowed`: the call flies under the key of the call it makes (the slices not
        fresh), so that it shares only with calls of those slices, never with a call of all
        the slices (whose result it is not)."""
        key = _narrowed_key(self, part)
        rt = self.rt
        self.flight_key = key if rt.router is None else rt.flight_key(key)
        return super().narrowed(part, args)

    def __enter__(self) -> FlownCall:
        self._join(None)
        if self.leads:
            try:
                return cast(FlownCall, super().__enter__())
            except BaseException as exc:  # refused, or stopped waiting: no __exit__ lands it
                self._refused(exc)
                raise
        self.start = perf_counter()
        return self

    async def __aenter__(self) -> FlownCall:
        self._join(asyncio.get_running_loop())
        if self.leads:
            try:
                return cast(FlownCall, await super().__aenter__())
            except BaseException as exc:
                self._refused(exc)
                raise
        self.start = perf_counter()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.leads:
            return
        super().__exit__(kind, exc, tb)
        if exc is not None:  # followers recover from the same error (or, for a cancellation,
            self._land(error=exc)  # call for themselves)

    def run(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """The leader calls the upstream; a follower waits for it (its soft timeout at most)."""
        while not self.leads:
            if not self.flight.ended.wait(self.definition.timeout):
                raise _late(self)
            if self._outcome():
                return deep_copy(self.flight.result)
            self._join(None)  # the leader never got an answer: fly again
            if self.leads:
                try:
                    super().__enter__()
                except BaseException as exc:
                    self._refused(exc)
                    raise
        return self.lead(fn, args, kwargs)

    def lead(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """The leader's upstream call (`Call.run`); a fleet's flight asks the fleet first."""
        return super().run(fn, args, kwargs)

    async def arun(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """`run` for a task: a follower waits on the event loop."""
        while not self.leads:
            future = self.flight.future
            assert future is not None  # an async flight
            try:
                # Shielded: a follower giving up (its timeout, its cancellation) leaves the
                # flight be.
                async with asyncio.timeout(self.definition.timeout):
                    await asyncio.shield(future)
            except TimeoutError:
                raise _late(self) from None
            if self._outcome():
                return deep_copy(self.flight.result)
            self._join(asyncio.get_running_loop())
            if self.leads:
                try:
                    await super().__aenter__()
                except BaseException as exc:
                    self._refused(exc)
                    raise
        return await self.alead(fn, args, kwargs)

    async def alead(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """`lead` for a task."""
        return await super().arun(fn, args, kwargs)

    def _refused(self, exc: BaseException) -> None:
        """A leader (or a follower that came to lead) was refused by a guard, or stopped while
        it waited for one: its followers hear it, and it leaves the guards it never entered
        alone."""
        self._land(error=exc)
        self.leads = False

    def _outcome(self) -> bool:
        """After the wait: whether the leader answered (raising its error, for this call to
        recover from); ``False``: it was stopped before any answer."""
        error = self.flight.error
        if error is None:
            return True
        if isinstance(error, Exception):
            self.heard = error
            raise error
        return False

    def refused(self, guard: str, cause: Exception) -> None:
        """`Call.refused`, but a follower recovering from its leader's refusal reports none:
        the leader was refused, and reported it (one refusal, counted once)."""
        if getattr(self, "heard", None) is not cause:
            super().refused(guard, cause)

    def live(self, result: Any, late: bool = False) -> Any:
        """The leader stores its result and hands it to its followers; a follower reports
        the leader's (its own copy) as live, not stored again."""
        if not self.leads:
            return self.shared(result, self.flight.now)
        try:
            return super().live(result, late)
        finally:
            self._land(result, now=self.now)

    def _land(
        self, result: Any = None, error: BaseException | None = None, now: datetime | None = None
    ) -> None:
        flights = cast(Flights, self.rt.flights)
        flights.land(self.flight_key, self.flight, result, error, now)


def _key(call: Call) -> Any:
    try:
        return key_of(call)
    except Exception:  # no key, no sharing: this call flies alone (its store shows the error)
        return object()


def _narrowed_key(call: Call, part: Partial) -> Any:
    try:
        values = call.binder.values(part.args, part.kwargs)
        return key_of(CallContext(call.definition, call.binder, part.args, part.kwargs, values))
    except Exception:  # as `_key`: this call flies alone
        return object()


def _late(call: Call) -> SoftTimeoutError:
    return SoftTimeoutError(
        f"failover {call.definition.name!r}: the shared call of this key did not answer within "
        f"{call.definition.timeout:g}s (timeout=)"
    )


# The flights of every failover with single flight: emptied in a forked child.
_FORKS = AfterFork(Flights.forked)
