"""`ReadBatcher`: point reads that arrive together answered by one ``find_many``.

In an outage every call becomes a store read. Reads of one failover that arrive together (tasks
of one event loop in the same loop turn, or threads while another read of the same failover is
in flight) are gathered into one ``find_many`` (one ``MGET``, one ``SELECT ... IN``), and each
caller gets its own entry. A lone read goes at once: nothing waits for company that is not there.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ...tenant import pinned
from ..base import FailoverStore, Payload, native_async
from .copying import copied

__all__ = ["ReadBatcher", "pinned_call"]

T = TypeVar("T")
_Slot = tuple[str | None, str]  # (tenant, failover name)


class _Batch:
    """The keys of one ``find_many`` and what it found (or raised)."""

    __slots__ = ("count", "done", "error", "found", "fresh", "full", "keys", "waiters")

    def __init__(self) -> None:
        self.keys: list[str] = []
        # A task's key (a point read) or keys (a scatter/gather call's slices), and its future.
        self.waiters: list[tuple[str | list[str], asyncio.Future[Any]]] = []
        self.count = 0  # keys asked by the waiters
        self.found: dict[str, Payload] = {}
        self.fresh: dict[str, Payload] = {}  # the entries not handed to a caller yet
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.full = threading.Event()


class ReadBatcher:
    """Gathers concurrent point reads of one store into ``find_many`` calls.

    Args:
        store: the store chain read.
        window: how long (seconds) a thread's read waits for company when another read of the
            same failover is in flight (a lone read never waits).
        max_batch: the most keys in one ``find_many``; more make another batch.
    """

    def __init__(self, store: FailoverStore, window: float = 0.001, max_batch: int = 1_000) -> None:
        self.store = store
        self.window = window
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._threads: dict[_Slot, _Batch] = {}  # the batch threads may still join, per slot
        self._in_flight: dict[_Slot, int] = {}
        # The batch tasks may still join, per loop and slot (fired, hence removed, each turn).
        self._tasks: dict[tuple[asyncio.AbstractEventLoop, _Slot], _Batch] = {}

    def __repr__(self) -> str:
        return f"ReadBatcher({self.store!r})"

    # -- threads -----------------------------------------------------------------------------

    def find(self, name: str, key: str, tenant: str | None = None) -> Payload | None:
        """The entry of ``(name, key)`` (of ``tenant``'s store, when stores are per tenant)."""
        slot = (tenant, name)
        with self._lock:
            batch = self._threads.get(slot)
            leader = batch is None
            if batch is None:
                batch = self._threads[slot] = _Batch()
            batch.keys.append(key)
            if len(batch.keys) >= self.max_batch:
                del self._threads[slot]  # full: the next read starts another
                batch.full.set()
            busy = self._in_flight.get(slot, 0)
        if not leader:
            batch.done.wait()
        else:
            if busy:  # company is likely: reads queued behind the one in flight
                batch.full.wait(self.window)
            with self._lock:
                if self._threads.get(slot) is batch:
                    del self._threads[slot]
                self._in_flight[slot] = self._in_flight.get(slot, 0) + 1
            try:
                batch.found = self._find_many(tenant, name, batch.keys)
                batch.fresh = dict(batch.found)
            except BaseException as exc:
                batch.error = exc
            finally:
                with self._lock:
                    left = self._in_flight[slot] - 1
                    if left:
                        self._in_flight[slot] = left
                    else:
                        del self._in_flight[slot]
                batch.done.set()
        if batch.error is not None:
            raise batch.error
        return _own(batch, key)

    def _find_many(self, tenant: str | None, name: str, keys: list[str]) -> dict[str, Payload]:
        return pinned_call(tenant, _read, self.store, name, keys)

    # -- tasks -------------------------------------------------------------------------------

    async def afind(self, name: str, key: str, tenant: str | None = None) -> Payload | None:
        """`find` for a task: never blocks the event loop; the reads of one loop turn share
        one ``find_many`` (the store's own async one when it has it, else on a worker thread)."""
        found: Payload | None = await self._join(name, key, tenant, 1)
        return found

    async def afind_many(
        self, name: str, keys: list[str], tenant: str | None = None
    ) -> dict[str, Payload]:
        """The entries found among ``keys`` (a scatter/gather call's slices), read with the
        other reads of the loop turn, as `afind`."""
        found: dict[str, Payload] = await self._join(name, keys, tenant, len(keys))
        return found

    def _join(self, name: str, keys: str | list[str], tenant: str | None, count: int) -> Any:
        loop = asyncio.get_running_loop()
        slot = (loop, (tenant, name))
        batch = self._tasks.get(slot)
        if batch is None:
            batch = self._tasks[slot] = _Batch()
            # Fired after the tasks already runnable in this turn have had their go.
            loop.call_soon(self._fire, slot, batch)
        future: asyncio.Future[Any] = loop.create_future()
        batch.waiters.append((keys, future))
        batch.count += count
        if batch.count >= self.max_batch:
            self._close(slot, batch)
        return future

    def _close(self, slot: tuple[asyncio.AbstractEventLoop, _Slot], batch: _Batch) -> None:
        if self._tasks.get(slot) is batch:
            del self._tasks[slot]

    def _fire(self, slot: tuple[asyncio.AbstractEventLoop, _Slot], batch: _Batch) -> None:
        self._close(slot, batch)
        loop, (tenant, name) = slot
        keys = list(dict.fromkeys(k for asked, _ in batch.waiters for k in _listed(asked)))
        # The first waiter's context, the tenant pinned: the read is the tenant's wherever it runs.
        context = contextvars.copy_context()
        if tenant is not None:
            context.run(pinned.set, tenant)
        if context.run(native_async, self.store):
            task = loop.create_task(_aread(self.store, name, keys), context=context)
            task.add_done_callback(lambda done: _answer(batch, done))
            return
        work = loop.run_in_executor(None, context.run, self._find_many, tenant, name, keys)
        work.add_done_callback(lambda done: _answer(batch, done))


def pinned_call(tenant: str | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with ``tenant`` pinned (when stores are per tenant): the caller's tenant,
    whichever thread runs it."""
    if tenant is None:
        return fn(*args)
    token = pinned.set(tenant)
    try:
        return fn(*args)
    finally:
        pinned.reset(token)


def _read(store: FailoverStore, name: str, keys: list[str]) -> dict[str, Payload]:
    """The entries of ``keys``: a lone key by ``find``, so that a lone read is what it always
    was (an entry that cannot be decoded raises, where ``find_many`` skips it)."""
    wanted = list(dict.fromkeys(keys))
    if len(wanted) == 1:
        found = store.find(name, wanted[0])
        return {} if found is None else {wanted[0]: found}
    return store.find_many(name, wanted)


async def _aread(store: Any, name: str, keys: list[str]) -> dict[str, Payload]:
    """`_read` through the store's own async methods."""
    wanted = list(dict.fromkeys(keys))
    if len(wanted) == 1:
        found = await store.afind(name, wanted[0])
        return {} if found is None else {wanted[0]: found}
    result: dict[str, Payload] = await store.afind_many(name, wanted)
    return result


def _answer(batch: _Batch, done: asyncio.Future[dict[str, Payload]]) -> None:
    """Hand each waiting task its own entry, or the read's error."""
    error = None if done.cancelled() else done.exception()
    if done.cancelled():
        error = asyncio.CancelledError()
    if error is None:
        batch.found = done.result()
        batch.fresh = dict(batch.found)
    for asked, future in batch.waiters:
        if future.done():  # the waiter gave up (cancelled, timed out)
            continue
        if error is not None:
            future.set_exception(error)
        elif isinstance(asked, str):
            future.set_result(_own(batch, asked))
        else:
            owned = {k: _own(batch, k) for k in dict.fromkeys(asked)}
            future.set_result({k: p for k, p in owned.items() if p is not None})


def _listed(asked: str | list[str]) -> list[str]:
    return [asked] if isinstance(asked, str) else asked


def _own(batch: _Batch, key: str) -> Payload | None:
    """``key``'s entry for one caller: the first gets the object read, any other a copy (so
    that no two callers share a mutable value)."""
    first = batch.fresh.pop(key, None)  # atomic: one thread or task gets the original
    if first is not None:
        return first
    payload = batch.found.get(key)
    return None if payload is None else copied(payload)
