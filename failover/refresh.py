"""Refresh ahead (``refresh_ahead=``): a call answered from the store near the end of the entry's
freshness refreshes it in the background, once per key.

The refresh is a call of its own, made through the failover's guards (its bulkhead permits, its
breaker) on the engine's background pool (sync upstreams) or as a task of the caller's event
loop (``async def`` ones), in a copy of the caller's context. Its result is stored as a live
result is; it is not counted as a call (no caller waited for it). A refresh that fails changes
nothing: the entry is served until its freshness ends, and the next call then calls the
upstream and fails over as usual.

On an engine routed by tenant, "once per key" is once per tenant and key: a tenant's refresh
never stands in for another's. A refresh leaves the table when its future or task ends, however
it ends (cancelled unstarted by the engine's close included); a forked child starts with none.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .call import Call, call_of
from .execution import Refreshes
from .forks import AfterFork
from .handlers import key_of
from .stores.batching import pinned_call

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["RefreshAhead"]

log = logging.getLogger("failover")


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
        self._keys: set[Any] = set()
        _FORKS.add(self)

    def __len__(self) -> int:
        """Refreshes in flight."""
        return len(self._keys)

    def forked(self) -> None:
        """In a forked child: the refreshes in flight at the fork are the parent's, and the
        child would never refresh their keys again."""
        self._lock = threading.Lock()
        self._keys = set()

    def start(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refresh ``call``'s entry in the background unless a refresh of its key runs."""
        try:
            key: Any = key_of(call)
        except Exception:  # the key= callable failed: no key to refresh under
            return
        rt = self.runtime
        tenant = None
        if rt.router is not None:  # resolved here, on the caller's thread (pinned for the pool)
            tenant = rt.tenant_here()
            if tenant is None:  # no tenant, no store of its own to refresh
                return
            key = (tenant, key)
        with self._lock:
            if key in self._keys:
                return
            self._keys.add(key)
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
        # The key is free again when the refresh ends, however it ends: a task or a queued call
        # cancelled before it ran (the engine closed) included.
        ran.add_done_callback(lambda _: self._done(key))

    def _done(self, key: Any) -> None:
        with self._lock:
            self._keys.discard(key)

    @contextmanager
    def _refreshing(self) -> Iterator[None]:
        """One refresh: its failure logged at debug."""
        try:
            yield
        except Exception:
            self._failed()

    # The two shells of a background call, as the decorator's: the guards, the upstream (within
    # the soft timeout), the result stored as a late one (not a call of its own).

    def _refresh(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        with self._refreshing():
            call = call_of(self.runtime, args, kwargs, Call)
            with call:
                result = call.run(fn, args, kwargs)
            call.late(result)

    async def _arefresh(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        with self._refreshing():
            call = call_of(self.runtime, args, kwargs, Call)
            async with call:
                result = await call.arun(fn, args, kwargs)
            await self.runtime.off_loop(call.late, result)

    def _failed(self) -> None:
        # Per call: debug only. The entry is still served while fresh; when freshness ends,
        # the next call meets the same trouble on its own path, logged and counted there.
        log.debug(
            "failover %r: refreshing ahead failed", self.runtime.definition.name, exc_info=True
        )


# Emptied in a forked child (`RefreshAhead.forked`).
_FORKS = AfterFork(RefreshAhead.forked)
