"""Refresh ahead (``refresh_ahead=``): a call answered from the store near the end of the entry's
freshness refreshes it in the background, once per key.

The refresh is a call of its own, made through the failover's guards (its bulkhead permits, its
breaker) on the engine's background pool (sync upstreams) or as a task of the caller's event
loop (``async def`` ones), in a copy of the caller's context. Its result is stored as a live
result is; it is not counted as a call (no caller waited for it). A refresh that fails changes
nothing: the entry is served until its freshness ends, and the next call then calls the
upstream and fails over as usual.

A call of a key whose freshness has ended while a refresh of that key is in flight joins it
instead of calling the upstream too (`RefreshAhead.join`, `RefreshAhead.ajoin`): one upstream
call serves both, and the caller gets the refresh's result as live. It waits at most its own soft
timeout (``timeout=``; without one, as long as the refresh takes), then calls for itself; so does
it when the refresh fails.

On an engine routed by tenant, "once per key" is once per tenant and key: a tenant's refresh
never stands in for another's. A refresh leaves the table when its future or task ends, however
it ends (cancelled unstarted by the engine's close included); a forked child starts with none.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .call import Call, call_of
from .errors import refused_by
from .execution import Refreshes
from .forks import AfterFork
from .handlers import key_of
from .stores.layers.batching import pinned_call
from .stores.layers.copying import deep_copy

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["MISSED", "RefreshAhead"]

log = logging.getLogger("failover")

Answer = tuple[Any, datetime | None]
"""What a refresh got: its result and its time (``as_of``), for the calls that joined it."""

MISSED: Any = object()
"""What `RefreshAhead.join` returns when the call joined no refresh (it calls for itself)."""


class RefreshAhead:
    """The background refreshes of one failover on one engine, at most one per key (per tenant
    and key when routed by tenant).

    Args:
        runtime: the failover on its engine.
        refreshes: the engine's background pool and task keeper.
    """

    def __init__(self, runtime: Runtime, refreshes: Refreshes) -> None:
        self.runtime = runtime
        self.refreshes = refreshes
        self._lock = threading.Lock()
        # Each refresh in flight, by key: what it runs as (a pool future, a task; ``None`` while
        # it is being started), for calls past the fresh window to join.
        self._keys: dict[Any, Any] = {}
        _FORKS.add(self)

    def __len__(self) -> int:
        """Refreshes in flight."""
        return len(self._keys)

    def forked(self) -> None:
        """In a forked child: the refreshes in flight at the fork are the parent's, and the
        child would never refresh their keys again."""
        self._lock = threading.Lock()
        self._keys = {}

    def _key(self, call: Call) -> tuple[Any, str | None] | None:
        """The key ``call``'s refresh flies under (with its tenant when routed by tenant), and
        the tenant; ``None`` when there is none (a failing ``key=``, no tenant)."""
        try:
            key: Any = key_of(call)
        except Exception:  # the key= callable failed: no key to refresh under
            return None
        rt = self.runtime
        tenant = None
        if rt.router is not None:  # resolved here, on the caller's thread (pinned for the pool)
            tenant = rt.router.here()
            if tenant is None:  # no tenant, no store of its own to refresh
                return None
            key = (tenant, key)
        return key, tenant

    def start(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refresh ``call``'s entry in the background unless a refresh of its key runs."""
        keyed = self._key(call)
        if keyed is None:
            return
        key, tenant = keyed
        with self._lock:
            if key in self._keys:
                return
            self._keys[key] = None  # taken; what it runs as is set once it is started
        rt = self.runtime
        fn = rt.fn
        try:
            if rt.definition.is_async:  # the task copies the context: the tenant pinned in it
                coro = self._arefresh(fn, args, kwargs)
                ran: Any = pinned_call(tenant, self.refreshes.spawn, coro)
            else:
                ran = self.refreshes.submit(pinned_call, tenant, self._refresh, fn, args, kwargs)
        except RuntimeError:  # the engine is closed: nothing runs in the background any more
            self._done(key)
            return
        with self._lock:
            if key in self._keys:  # still in flight (an ended refresh has freed its key)
                self._keys[key] = ran
        # The key is free again when the refresh ends, however it ends: a task or a queued call
        # cancelled before it ran (the engine closed) included.
        ran.add_done_callback(lambda _: self._done(key))

    def _done(self, key: Any) -> None:
        with self._lock:
            self._keys.pop(key, None)

    # -- a call past the fresh window joins the refresh of its key ------------------------------

    def join(self, call: Call) -> Any:
        """Wait (at most ``call``'s soft timeout) for the refresh of its key in flight, if any:
        its result, handed to ``call`` as a live one (`Call.shared`). `MISSED`: no refresh in
        flight, it failed, or it took too long; the call then calls the upstream itself."""
        ran = self._in_flight(call)
        if not isinstance(ran, concurrent.futures.Future):
            return MISSED  # none (or not started yet)
        call.start = perf_counter()  # its time is its wait
        try:
            answer = ran.result(self.runtime.definition.timeout)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            return MISSED
        return _answered(call, answer)

    async def ajoin(self, call: Call) -> Any:
        """`join` for a task: waits on its event loop, for a refresh task of that loop."""
        ran = self._in_flight(call)
        if not isinstance(ran, asyncio.Task) or ran.get_loop() is not asyncio.get_running_loop():
            return MISSED  # none, or another loop's (not this loop's to wait for)
        call.start = perf_counter()
        try:
            # Shielded: a caller giving up (its timeout, its cancellation) leaves the refresh be.
            async with asyncio.timeout(self.runtime.definition.timeout):
                answer = await asyncio.shield(ran)
        except TimeoutError:
            return MISSED
        except asyncio.CancelledError:
            if not ran.cancelled():  # this caller was cancelled: it goes on cancelling
                raise
            return MISSED  # the engine closed and cancelled the refresh: the call tries itself
        return _answered(call, answer)

    def _in_flight(self, call: Call) -> Any:
        keyed = self._key(call)
        if keyed is None:
            return None
        with self._lock:
            return self._keys.get(keyed[0])

    @contextmanager
    def _refreshing(self) -> Iterator[None]:
        """One refresh: a guard's refusal of it reported (a refusal like a call's), its
        failure logged at debug."""
        try:
            yield
        except Exception as exc:
            guard = refused_by(exc)
            if guard is not None:
                self.runtime.events.refused(guard, exc)
            self._failed()

    # The two shells of a background call, as the decorator's: the guards, the upstream (within
    # the soft timeout), the result stored as a late one (not a call of its own). Each returns
    # its `Answer` for the calls that joined it (``None``: it failed).

    def _refresh(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Answer | None:
        with self._refreshing():
            call = call_of(self.runtime, args, kwargs, Call)
            with call:
                result = call.run(fn, args, kwargs)
            call.late(result)
            return result, call.now
        return None

    async def _arefresh(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Answer | None:
        with self._refreshing():
            call = call_of(self.runtime, args, kwargs, Call)
            async with call:
                result = await call.arun(fn, args, kwargs)
            await self.runtime.off_loop(call.late, result)
            return result, call.now
        return None

    def _failed(self) -> None:
        # Per call: debug only. The entry is still served while fresh; when freshness ends,
        # the next call meets the same trouble on its own path, logged and counted there.
        log.debug(
            "failover %r: refreshing ahead failed", self.runtime.definition.name, exc_info=True
        )


def _answered(call: Call, answer: Answer | None) -> Any:
    """Hand a refresh's ``answer`` to ``call`` (its own copy, as single flight's followers get),
    reported as live and not stored again; `MISSED` when the refresh failed."""
    if answer is None:  # the refresh failed (logged at debug): the call tries for itself
        return MISSED
    result, now = answer
    return call.shared(deep_copy(result), now)


# Emptied in a forked child (`RefreshAhead.forked`).
_FORKS = AfterFork(RefreshAhead.forked)
