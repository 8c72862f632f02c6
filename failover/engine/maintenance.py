"""An engine's upkeep: cleanups (by hand and scheduled), flushing queued writes, closing."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..cleanup import Cleanable, CleanupScheduler
from ..closeable import AsyncCloseable
from ..execution import Pools, Refreshes
from ..metrics import Metrics
from ..stores.base import FailoverStore, flush

__all__ = ["Background", "Maintenance"]

log = logging.getLogger("failover.engine")


class Background(Protocol):
    """A background task of the engine's (the health publisher), stopped by `Maintenance.close`
    before the store closes."""

    def stop(self, timeout: float | None = None) -> bool:
        """Stop; return whether it ended within ``timeout`` seconds."""
        ...


class Maintenance:
    """Cleanups, flushes and the closing of one engine's store, refreshes and pools."""

    def __init__(
        self,
        store: FailoverStore,
        clock: Callable[[], datetime],
        metrics: Metrics,
        refreshes: Refreshes,
        pools: Pools,
        fleet: Any = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.refreshes = refreshes
        self.pools = pools
        self.closed = False
        self._lock = threading.Lock()
        self._clean_lock = threading.Lock()  # one cleanup at a time: scheduled or by hand
        self._schedulers: list[CleanupScheduler] = []
        self.background: list[Background] = []
        # The engine's fleet, if any: one scheduled cleanup per period for the whole fleet;
        # stopped by close() after the store, so that the writes its queue lands while it
        # closes are still announced on the fleet's backplane.
        self.fleet = fleet

    def clean(self) -> int:
        """See `Failover.clean`."""
        with self._clean_lock:
            return self.store.clean_by_expiry(self.clock())

    def start_cleanup(self, engine: Cleanable, every: timedelta | float | str) -> CleanupScheduler:
        """See `Failover.start_cleanup`."""
        turn = None if self.fleet is None else self.fleet.cleanups.turn
        scheduler = CleanupScheduler(engine, every, metrics=self.metrics, turn=turn)
        with self._lock:  # started under the lock: a concurrent close() stops it or refuses it
            if self.closed:
                raise RuntimeError("Failover: cannot start a cleanup on a closed engine")
            self._schedulers.append(scheduler)
            return scheduler.start()

    def flush(self, timeout: float | None = None) -> bool:
        """See `Failover.flush`."""
        return flush(self.store, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """See `Failover.close`."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for scheduler in self._schedulers:
            scheduler.stop()
        for task in self.background:
            task.stop(timeout)
        if not self.refreshes.close(timeout):
            log.warning("Failover.close: background refreshes still running after %ss", timeout)
        # A cleanup run by hand on another thread ends first: its store is not closed under it.
        try:
            with self._clean_lock:
                self.store.close()
        finally:
            if self.fleet is not None:
                self.fleet.stop(timeout)
        self.pools.close()

    async def aclose(self, timeout: float = 5.0) -> None:
        """See `Failover.aclose`."""
        # Whatever the store declares (a tenant router closes what each tenant's store opened).
        if not self.closed and isinstance(self.store, AsyncCloseable):
            try:
                await self.store.aclose()
            except Exception:
                log.warning("Failover.aclose: closing the async store client failed", exc_info=True)
        if not self.closed and self.fleet is not None:
            await self.fleet.aclose()  # the fleet's async client of this loop, on it
        await asyncio.to_thread(self.close, timeout)
