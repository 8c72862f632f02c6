"""The async reads of a `failover.stores.layers.tiered.TieredStore`: the far store's own
reads awaited (the near one is process memory), hedged as the sync ones are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..base import FailoverStore, Payload, does_io, native_async
from .hedging import HedgingDeadline

__all__ = ["TieredAsync"]

log = logging.getLogger("failover.stores.layers.tiered")

T = TypeVar("T")


class TieredAsync:
    """`TieredStore`'s async side (`TieredStore` sets the state declared here)."""

    near: FailoverStore
    far: FailoverStore
    hedge_after: float
    _deletes: int
    _tasks: set[asyncio.Future[Any]]

    if TYPE_CHECKING:

        @property
        def _guard(self) -> HedgingDeadline | None: ...

        def _merged(
            self, near: dict[str, Payload], far: dict[str, Payload] | None, deletes: int
        ) -> dict[str, Payload]: ...

        def store_many(self, payloads: Sequence[Payload]) -> int | None: ...

    @property
    def native_async(self) -> bool:
        """Whether the far store has async methods (and the near one does no I/O)."""
        return native_async(self.far) and not does_io(self.near)

    async def _afrom_far(self, read: Awaitable[T], answered: bool, operation: str) -> T | None:
        """`_from_far`, awaited."""
        try:
            return await read
        except Exception:
            if not answered:
                raise
            log.debug(
                "failover: %s: the far store failed; answering from the near one",
                operation,
                exc_info=True,
            )
            return None

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, the far store's read awaited."""
        found = await self.afind_many(name, [key])
        return found.get(key)

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, the far store's read awaited."""
        keys = list(keys)
        deletes = self._deletes
        near = self.near.find_many(name, keys)
        far_store: Any = self.far
        if near and self._guard is not None:
            # An earlier far read still out: the far store is slow, near answers at once.
            far = (
                None
                if self._tasks and self._far_out()
                else await self._ahedged(far_store.afind_many(name, keys), near, deletes)
            )
        else:
            far = await self._afrom_far(far_store.afind_many(name, keys), bool(near), "find_many")
        return self._merged(near, far, deletes)

    def _far_out(self) -> bool:
        """Whether an earlier hedged far read is still running (the task of a loop closed
        meanwhile never ends: it is dropped, not waited for)."""
        for task in list(self._tasks):
            if not task.get_loop().is_closed():
                return True
            self._tasks.discard(task)
        return False

    async def _ahedged(
        self, read: Awaitable[dict[str, Payload]], near: dict[str, Payload], deletes: int
    ) -> dict[str, Payload] | None:
        """`_hedged`, awaited: the far read goes on as a task past ``hedge_after``, or when the
        caller is cancelled (under its deadline, which cancels it and opens the breaker), its
        answer kept in ``near``. The task is held while it runs, and never once it ended,
        however its caller left: a task kept would keep every later read off ``far``."""
        task = asyncio.ensure_future(read)
        self._tasks.add(task)  # held until done: a running task must not be collected
        task.add_done_callback(self._tasks.discard)
        done: set[asyncio.Future[dict[str, Payload]]] = set()

        def landed(t: asyncio.Future[dict[str, Payload]]) -> None:
            if not t.cancelled() and t.exception() is None:
                self._merged(near, t.result(), deletes)

        try:
            done, _ = await asyncio.wait((task,), timeout=self.hedge_after)
        finally:
            if not done:  # past hedge_after, or the caller was cancelled: kept for later
                task.add_done_callback(landed)
        if not done:
            return None
        try:
            return task.result()
        except Exception:
            log.debug("failover: the far store failed; answering from the near one", exc_info=True)
            return None

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """`store_many`: the near store at once, the far one queued: no waiting on I/O."""
        return self.store_many(payloads)

    async def aclose(self) -> None:
        """Close the far store's async clients of this loop."""
        if native_async(self.far):
            await self.far.aclose()
