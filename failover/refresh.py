"""Refresh ahead (``refresh_ahead=``): a call answered from the store near the end of the entry's
freshness refreshes it in the background, once per key.

The refresh is a call of its own, made through the failover's guards (its bulkhead permits, its
breaker) on the engine's background pool (sync upstreams) or as a task of the caller's event
loop (``async def`` ones), in a copy of the caller's context. Its result is stored as a live
result is; it is not counted as a call (no caller waited for it). A refresh that fails changes
nothing: the entry is served until its freshness ends, and the next call then calls the
upstream and fails over as usual.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .call import Call, call_of
from .execution import Refreshes
from .handlers import key_of
from .stores.batching import pinned_call

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["RefreshAhead"]

log = logging.getLogger("failover")


class RefreshAhead:
    """The background refreshes of one failover on one engine, at most one per key.

    Args:
        runtime: the failover on its engine.
        refreshes: the engine's background pool and task keeper.
    """

    def __init__(self, runtime: Runtime, refreshes: Refreshes) -> None:
        self.runtime = runtime
        self.refreshes = refreshes
        self._lock = threading.Lock()
        self._keys: set[str] = set()

    def __len__(self) -> int:
        """Refreshes in flight."""
        return len(self._keys)

    def start(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refresh ``call``'s entry in the background unless a refresh of its key runs."""
        try:
            key = key_of(call)
        except Exception:  # the key= callable failed: no key to refresh under
            return
        with self._lock:
            if key in self._keys:
                return
            self._keys.add(key)
        fn = self.runtime.fn
        try:
            if self.runtime.definition.is_async:
                self.refreshes.spawn(self._arefresh(key, fn, args, kwargs))
            else:  # on the pool: the tenant resolved here, on the caller's thread, and pinned
                tenant = self.runtime.tenant_here()
                self.refreshes.submit(pinned_call, tenant, self._refresh, key, fn, args, kwargs)
        except RuntimeError:  # the engine is closed: nothing runs in the background any more
            self._done(key)

    def _done(self, key: str) -> None:
        with self._lock:
            self._keys.discard(key)

    @contextmanager
    def _refreshing(self, key: str) -> Iterator[None]:
        """One refresh of ``key``: its failure logged at debug, the key free again after."""
        try:
            yield
        except Exception:
            self._failed()
        finally:
            self._done(key)

    # The two shells of a background call, as the decorator's: the guards, the upstream (within
    # the soft timeout), the result stored as a late one (not a call of its own).

    def _refresh(
        self, key: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        with self._refreshing(key):
            call = call_of(self.runtime, args, kwargs, Call)
            with call:
                result = call.run(fn, args, kwargs)
            call.late(result)

    async def _arefresh(
        self, key: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        with self._refreshing(key):
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
