"""A call of a failover with ``single_flight="fleet"``: one upstream call per key across the
fleet.

The calls of one key in this process share one flight first (`failover.flight.FlownCall`);
its leader then asks the fleet for the key's lease (`failover.fleet.leases`):

- it takes it: it calls the upstream and stores, as any leader; the lease is given back (and
  the others told) once the result is stored, or the call failed;
- another process holds it: it waits for that flight's landing, then answers with the entry
  that flight stored (reported live, not stored again), read from the store. The wait is
  bounded by its own budget (``timeout=``, else `FlightLeases.wait`); past it, or when the
  holder stored nothing (it failed, or died and its lease lapsed), it asks for the lease again
  and calls the upstream itself if it gets it: never a hang, never a lost call;
- the fleet does not answer: it calls the upstream itself (single flight per process), and the
  fleet's trouble is counted and logged once.

Waiting sends no Redis command: the landing message (pub/sub) or the holder's lease's time to
live wakes the call. The holder's write may still be queued (async writes) when its landing is
heard: the waiter then reads again with a short bounded backoff (`_AGAIN`) before it gives up
on that flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from ..context import CallContext
from ..flight import Flights, FlownCall
from ..handlers import Partial
from ..payload import ReferentialPayload
from .leases import FlightLeases, Taken, Waiter

__all__ = ["FleetFlights", "FleetFlownCall"]

log = logging.getLogger("failover.fleet")

_SLACK = 0.05  # seconds past a lease's time to live before asking again
_AGAIN = (0.0, 0.02, 0.05, 0.1, 0.2)  # seconds between reads of a landed flight's entry
_US = timedelta(microseconds=1)


class FleetFlights(Flights):
    """The flights of one failover in this process, and the fleet they share keys on."""

    def __init__(self, fleet: Any) -> None:
        super().__init__()
        self.fleet = fleet
        self.leases: FlightLeases = fleet.flights


class FleetFlownCall(FlownCall):
    """A call whose flight's leader asks the fleet before it calls the upstream."""

    __slots__ = ("fleet_as_of", "flight_ctx", "lease")

    fleet_as_of: datetime | None  # the entry another process's flight stored, as of then
    flight_ctx: CallContext  # the narrowed call's context (scatter/gather, some slices fresh)
    lease: str | None  # the key's lease, held by this call until its flight lands

    def narrowed(
        self, part: Partial, args: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """`FlownCall.narrowed`; the narrowed call's context kept, to read its slices."""
        try:
            values = self.binder.values(part.args, part.kwargs)
            ctx = CallContext(self.definition, self.binder, part.args, part.kwargs, values)
            ctx.now = self.now
            self.flight_ctx = ctx
        except Exception:  # its key cannot be had: it flies alone (`_narrowed_key`)
            pass
        return super().narrowed(part, args)

    # -- the leader ------------------------------------------------------------------------------

    def _plan(self) -> tuple[FlightLeases, str] | None:
        flights = cast(FleetFlights, self.rt.flights)
        leases = flights.leases
        if not flights.fleet.up or leases.closed:
            leases.count(self.definition.name, "local")
            return None
        key = leases.key(self.definition.name, self.flight_key)
        return None if key is None else (leases, key)

    def _budget(self, leases: FlightLeases) -> float:
        timeout = self.definition.timeout
        return leases.wait if timeout is None else float(timeout)

    def _as_of(self) -> float:
        now = self.now
        return time.time() if now is None else now.timestamp()

    def _local(self, leases: FlightLeases, exc: BaseException) -> None:
        cast(FleetFlights, self.rt.flights).fleet.trouble("flight", exc)
        leases.count(self.definition.name, "local")

    def lead(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Take the key's lease and call the upstream, or answer with the entry another
        process's flight stored."""
        plan = self._plan()
        if plan is None:
            return super().lead(fn, args, kwargs)
        leases, key = plan
        waiter = leases.waiter(key, None)
        deadline = time.monotonic() + self._budget(leases)
        seen: float | None = None  # the as_of of the latest flight waited for
        try:
            while True:
                if leases.closed:  # the engine closed while this call waited
                    return super().lead(fn, args, kwargs)
                try:
                    taken = leases.take(key, self._as_of())
                except Exception as exc:
                    self._local(leases, exc)
                    return super().lead(fn, args, kwargs)
                if taken.held:
                    self.lease = key
                    leases.count(self.definition.name, "led")
                    found = self._again(seen)
                    if found is not None:
                        return self._got(found)
                    return super().lead(fn, args, kwargs)
                seen = taken.as_of
                left = deadline - time.monotonic()
                if left <= 0:
                    leases.count(self.definition.name, "alone")
                    return super().lead(fn, args, kwargs)
                leases.count(self.definition.name, "waited")
                waiter.event.wait(min(taken.ttl + _SLACK, left))
                found = self._landed(waiter, taken, deadline)
                if found is not None:
                    return self._got(found)
                waiter.rearm()
        finally:
            leases.unwait(waiter)

    async def alead(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """`lead` for a task: the lease asked for on the loop (``redis.asyncio``), the wait
        on a future the bus's thread resolves, the store read as the call's own reads are."""
        plan = self._plan()
        if plan is None:
            return await super().alead(fn, args, kwargs)
        leases, key = plan
        waiter = leases.waiter(key, asyncio.get_running_loop())
        deadline = time.monotonic() + self._budget(leases)
        seen: float | None = None
        try:
            while True:
                if leases.closed:
                    return await super().alead(fn, args, kwargs)
                try:
                    taken = await leases.atake(key, self._as_of())
                except Exception as exc:
                    self._local(leases, exc)
                    return await super().alead(fn, args, kwargs)
                if taken.held:
                    self.lease = key
                    leases.count(self.definition.name, "led")
                    found = await self._read(self._again, seen)
                    if found is not None:
                        return self._got(found)
                    return await super().alead(fn, args, kwargs)
                seen = taken.as_of
                left = deadline - time.monotonic()
                if left <= 0:
                    leases.count(self.definition.name, "alone")
                    return await super().alead(fn, args, kwargs)
                leases.count(self.definition.name, "waited")
                future = waiter.future
                assert future is not None  # an async waiter
                try:
                    async with asyncio.timeout(min(taken.ttl + _SLACK, left)):
                        await future
                except TimeoutError:
                    pass
                found = await self._alanded(waiter, taken, deadline)
                if found is not None:
                    return self._got(found)
                waiter.rearm()
        finally:
            leases.unwait(waiter)

    # -- reading what another process's flight stored --------------------------------------------

    def _stored(self, as_of: float) -> ReferentialPayload[Any] | None:
        """The entry stored by the flight made at ``as_of`` (or later), if the store has it."""
        since = datetime.fromtimestamp(as_of, UTC) - _US
        ctx: CallContext = getattr(self, "flight_ctx", None) or self
        try:
            found = self.rt.handler.fresh(ctx, since)
        except Exception:
            log.debug(
                "failover %r: reading a flight's entry failed", self.definition.name, exc_info=True
            )
            return None
        return found if isinstance(found, ReferentialPayload) else None

    def _again(self, seen: float | None) -> ReferentialPayload[Any] | None:
        """Just given the lease: what the flight waited for may have landed meanwhile, and,
        with ``fresh_for``, another process's entry may be fresh already."""
        if seen is not None and (found := self._stored(seen)) is not None:
            return found
        rt = self.rt
        now = self.now
        window = rt.fresh_window  # None for a callable fresh_for: no fixed window to check
        if rt.fresh_for is not None and window is not None and now is not None:
            return self._stored((now - window).timestamp())
        return None

    def _landed(
        self, waiter: Waiter, taken: Taken, deadline: float
    ) -> ReferentialPayload[Any] | None:
        found = self._stored(taken.as_of)
        if found is not None or not waiter.ok:
            return found
        for pause in _AGAIN[1:]:  # landed and stored: its write may be queued still
            if time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            found = self._stored(taken.as_of)
            if found is not None:
                return found
        return None

    async def _alanded(
        self, waiter: Waiter, taken: Taken, deadline: float
    ) -> ReferentialPayload[Any] | None:
        found = await self._read(self._stored, taken.as_of)
        if found is not None or not waiter.ok:
            return found
        for pause in _AGAIN[1:]:
            if time.monotonic() + pause > deadline:
                break
            await asyncio.sleep(pause)
            found = await self._read(self._stored, taken.as_of)
            if found is not None:
                return found
        return None

    async def _read(
        self, read: Callable[[Any], ReferentialPayload[Any] | None], arg: Any
    ) -> ReferentialPayload[Any] | None:
        rt = self.rt
        return await rt.on_worker(read, arg) if rt.blocking else read(arg)

    def _got(self, found: ReferentialPayload[Any]) -> Any:
        self.fleet_as_of = found.as_of
        return found.payload

    # -- landing ---------------------------------------------------------------------------------

    def live(self, result: Any, late: bool = False) -> Any:
        """The holder stores its result, then gives the lease back; a call answered by another
        process's flight reports that entry as live, not stored again."""
        try:
            as_of = getattr(self, "fleet_as_of", None)
            if as_of is not None and self.leads:
                try:
                    return self.shared(result, as_of)
                finally:
                    self._land(result, now=as_of)
            return super().live(result, late)
        finally:
            self._give_back(True)

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            super().__exit__(kind, exc, tb)
        finally:
            if exc is not None:  # the others ask for the lease again at once
                self._give_back(False)

    def _give_back(self, ok: bool) -> None:
        key = getattr(self, "lease", None)
        if key is not None:
            self.lease = None
            cast(FleetFlights, self.rt.flights).leases.landed(key, ok)
