"""`DeadlineStore`: no store operation holds a caller longer than a deadline, and a store that
timed out is skipped for a while (the store breaker).

The deadline is `failover.stores.layers.bounded` (operations on a bounded pool of workers, or
as tasks of the caller's loop, waited for at most ``timeout`` seconds), the breaker
`failover.stores.layers.store_breaker` (``after`` operations in a row out, then skipped for
``open_for``, one trial at a time); this layer says which store operations go through them.
A forked child starts with no worker, no trial.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from ...forks import AfterFork
from ..base import (
    FailoverStore,
    Payload,
    as_async,
    delete_all,
    delete_many,
    delete_tagged,
    expire,
    keeps_tags,
    native_async,
    writes_async,
)
from ..browsing import BrowsingLayer
from ..control import no_tags
from ..health_rows import HealthRowsLayer, ProcessHealth, below
from ..layer import Layer
from .async_write import AsyncWriteStore
from .bounded import BoundedRunner, Elsewhere, ReadsHere, StoreTimeout, abandoned
from .store_breaker import StoreUnavailable

__all__ = ["DeadlineStore", "StoreTimeout", "StoreUnavailable", "abandoned"]


class DeadlineStore(BoundedRunner, HealthRowsLayer, BrowsingLayer, Layer):
    """Bounds the caller's wait on a store that does I/O, and skips a store that timed out.

    Reads (``find``, ``find_many``) and the control over entries (``delete_all``,
    ``delete_tagged``, ``expire``) always run under the deadline; writes and deletes only when
    they would otherwise block the caller: with no async-writes queue below, and the queue's
    own writes on a caller's thread (``rejection="caller_runs"`` at a full queue, or after its
    close). A queued write is already off the caller's thread and passes straight through,
    without a thread hop; the queue's worker writes under the deadline too, never refused by
    the breaker (a write it cannot make stays queued and is retried), its verdicts counted
    like a caller's. A store that bounds its reads itself (`ReadsHere`: a SQLite file) is read
    on the caller's thread, without a hop, unless it cannot bound a read at the time.

    Args:
        inner: the store (or the async-writes queue over it).
        timeout: the most seconds a caller waits for one operation.
        clock: the engine's clock, for the breaker's open time.
        open_for: how long the breaker skips the store once open; then one operation is let
            through as a trial, and its success closes the breaker.
        after: how many operations in a row must time out or be refused at the connection
            for the breaker to open (one slow read is not an outage).
        workers: threads running operations; when all are held (by a hung store), further
            operations fail at once, without opening the breaker (a busy healthy store is not
            a failing one).

    Attributes:
        errors: counts of ``(operation, reason)``, reason ``timeout``, ``error`` or
            ``breaker_open``.
    """

    def __init__(
        self,
        inner: FailoverStore,
        timeout: float,
        clock: Callable[[], datetime],
        open_for: float = 5.0,
        workers: int = 32,
        after: int = 3,
    ) -> None:
        super().__init__(timeout, clock, open_for, workers, after)
        self.inner = inner
        _FORKS.add(self)
        # Read once: a queued write passes straight through on the hot path.
        self._queued = writes_async(inner)
        if isinstance(inner, AsyncWriteStore):
            # The queue's writes on a caller's thread (caller_runs) wait no longer than reads.
            inner.bound_writes_here(functools.partial(self._run, "store_many"))
            # The worker's writes: bounded (a hung store holds it no longer), never skipped.
            inner.bound_queued_writes(functools.partial(self._run, admit=False))
        # A store that bounds its reads itself is read on the caller's thread, no hand-off
        # (the queue's pending writes laid over them as on a worker).
        below = inner.inner if isinstance(inner, AsyncWriteStore) else inner
        self._here = isinstance(below, ReadsHere) and below.reads_here(timeout)

    def __repr__(self) -> str:
        return f"DeadlineStore({self.inner!r}, timeout={self.timeout})"

    def settle(self) -> None:
        """Count what is owed before the store's state is read (nothing here; a hedging layer
        counts the operations it left running past their deadline)."""

    def browsed(self) -> FailoverStore:
        """The inner store: browsing is an operator's, not a caller's, wait."""
        return self.inner

    # -- the operations -----------------------------------------------------------------------

    def find(self, name: str, key: str) -> Payload | None:
        """The entry, within the deadline."""
        if self._here:
            try:
                return self._run_here("find", self.inner.find, name, key)
            except Elsewhere:
                pass
        return self._run("find", self.inner.find, name, key)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found, within the deadline."""
        keys = list(keys)
        if self._here:
            try:
                return self._run_here("find_many", self.inner.find_many, name, keys)
            except Elsewhere:
                pass
        return self._run("find_many", self.inner.find_many, name, keys)

    def store(self, payload: Payload) -> int | None:
        """Store, within the deadline unless the write is queued below."""
        if self._queued:
            return self.inner.store(payload)
        return self._run("store", self.inner.store, payload)

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """Store several, within the deadline unless the writes are queued below."""
        if self._queued:
            return self.inner.store_many(payloads)
        return self._run("store_many", self.inner.store_many, payloads)

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, awaited within the deadline."""
        return await self._arun("find", as_async(self.inner).afind(name, key))

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, awaited within the deadline."""
        return await self._arun("find_many", as_async(self.inner).afind_many(name, keys))

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """`store_many`, awaited (within the deadline unless the writes are queued below)."""
        inner = as_async(self.inner)
        if self._queued:
            return await inner.astore_many(payloads)
        return await self._arun("store_many", inner.astore_many(payloads))

    async def aclose(self) -> None:
        """Close the inner store's async clients of this loop."""
        if native_async(self.inner):
            await self.inner.aclose()

    def publish_health(self, row: ProcessHealth) -> None:
        """Publish the process's health row within the deadline (a hung store holds the
        publisher's thread no longer than a caller), without the breaker: a slow publish
        never makes the callers' reads skip the store."""
        self._run("publish_health", below(self).publish_health, row, guarded=False)

    def remove_health(self, process: str) -> None:
        """Remove the process's health row, within the deadline (without the breaker)."""
        self._run("remove_health", below(self).remove_health, process, guarded=False)

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name`` (maintenance and browsing: no deadline)."""
        return self.inner.find_all(name)

    def delete(self, name: str, key: str) -> None:
        """Remove the entry, within the deadline unless the delete is queued below."""
        if self._queued:
            self.inner.delete(name, key)
        else:
            self._run("delete", self.inner.delete, name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries, within the deadline unless the deletes are queued below."""
        if self._queued:
            delete_many(self.inner, name, keys)
        else:
            self._run("delete_many", delete_many, self.inner, name, list(keys))

    # The control over entries (``.invalidate_all()``, ``invalidate_tag``, ``.expire()``): always
    # within the deadline, a queue below or not (it orders them with its writes, then the store
    # takes them at once, on the caller's thread).

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``, within the deadline; how many there were."""
        return self._run("delete_all", delete_all, self.inner, name)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, within the deadline; how many there were.

        Raises:
            ConfigurationError: the store keeps no tags (the caller's, not the store's
                failure: neither counted nor seen by the breaker).
        """
        if not keeps_tags(self.inner):
            raise no_tags(self.inner)
        return self._run("delete_tagged", delete_tagged, self.inner, tag)

    def expire(self, name: str, key: str) -> bool:
        """End the fresh window of the entry, within the deadline; whether there was one."""
        return self._run("expire", expire, self.inner, name, key)

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries."""
        return self.inner.clean_by_expiry(now)

    def close(self) -> None:
        """Close the inner store; workers still held by a hung operation are not waited for.
        A trial under way ends here (its late end changes nothing). The inner store closes
        first: a queue below flushes through this layer's workers, which must still run."""
        try:
            self.inner.close()
        finally:
            with self._lock:
                pool, self._pool = self._pool, None
                self._trial = None
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)


_FORKS = AfterFork(operator.methodcaller("forked"))  # a subclass's own reset included
