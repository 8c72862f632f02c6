"""`AsyncWriteStore`: writes leave the caller's path for a bounded queue and one worker thread.

How it stays correct:

- *Order per key.* Every write not yet written is recorded in ``pending`` under its
  ``(name, key)``, replacing the one there unless that one is newer (its ``as_of`` later: a
  write of a call that started earlier is refused, counted ``superseded``). A write reaches the
  inner store only if it is still the newest of its key when its turn comes, and every write to
  the inner store happens under ``io_lock``. So an older write never lands after a newer one,
  whether the newer one went through the queue or was written on the caller's thread
  (``rejection="caller_runs"``); overtaken writes are skipped. The inner store compares too
  (entries only move forward across processes): what it keeps out is counted ``superseded``.
- *Read-your-writes.* Reads look at ``pending`` first (a payload, or a tombstone for a delete),
  then at the inner store. A write leaves ``pending`` only after it was written.
- *Flush.* Writes are counted when accepted (queued, or made on the caller's thread) and when
  handled (written, skipped or failed); a flush waits on a condition until the second count
  reaches the first. A write made on the caller's thread is counted too: reads see it at once,
  and it may be what a queued write of its key was skipped for.
- *Retries.* A write the store could not take because it was out (refused at the connection,
  timed out: `failover.stores.outages.out`) is not lost: it stays pending (reads still see it)
  and waits in ``retry``, tried again with a jittered exponential backoff on the engine's clock
  (`RETRY_FIRST` doubling up to `RETRY_MOST`) until the store takes it. It is given up, and
  counted ``failed``, only when its entry expires first, when new writes push it out of the
  bound (``queue_size`` covers both), or at close. Any other error fails the write at once, as
  does a value the store cannot encode (the caller's own). Under an engine, the worker's writes
  run under the store deadline, so a hung store holds the worker ``store_timeout`` at most,
  and their verdicts count toward the store breaker (`failover.stores.layers.deadline`).
- *Lifetime.* The worker thread holds the `WriteQueue`, never the `AsyncWriteStore`, so a
  store dropped without `AsyncWriteStore.close` is still collected; its worker then writes
  what is left and ends. The interpreter-exit hook holds the queue weakly.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from ...errors import ConfigurationError
from ...metrics import NULL_METRICS, Metrics
from ..base import (
    FailoverStore,
    Payload,
    as_async,
    native_async,
    reads_fresh,
)
from ..browsing import BrowsingLayer, Page, Summary, overlaid
from ..health_rows import HealthRowsLayer
from ..layer import Layer
from .copying import copied
from .queued_control import QueuedControl
from .write_queue import DELETED, REJECTIONS, RETRY_FIRST, RETRY_MOST, Tombstone, Write, WriteQueue

__all__ = ["REJECTIONS", "RETRY_FIRST", "RETRY_MOST", "AsyncWriteStore"]


class AsyncWriteStore(QueuedControl, HealthRowsLayer, BrowsingLayer, Layer):
    """Writes go to a bounded queue that one daemon thread drains in batches (`store_many`).

    Reads see the writes still queued (read-your-writes within the process). Of the writes of
    one key, the newest by ``as_of`` is kept (the later made, on a tie); a write overtaken while
    queued is skipped. Writes that meet the store out (refused, timed out) stay queued and are
    retried with backoff until it answers, their entry expires, or new writes push them out of
    ``queue_size``; only those given up are counted failed. At interpreter
    exit, queued writes are flushed (for at most 30 seconds): only a hard kill (``SIGKILL``, a
    power loss, ``os._exit``) loses what is queued. No thread starts before the first write; the
    worker runs in a copy of the context of the thread that made that write.

    Args:
        inner: the store written to.
        queue_size: the most writes waiting at once.
        batch_size: the most writes per `store_many` call of the worker.
        rejection: what happens to writes that find the queue full: ``"discard"`` drops them
            (counted, and logged once per burst of drops: a burst ends when the queue drains),
            ``"caller_runs"`` writes them on the caller's thread, after the batch being written,
            ``"abort"`` raises `StoreError` (the library logs a failed store; the live result
            still returns).
        metrics: receives the queue length, the discarded writes and the failed writes.

    Raises:
        ConfigurationError: a size that is not a positive int, or an unknown ``rejection``.
    """

    writes_async = True

    def __init__(
        self,
        inner: FailoverStore,
        queue_size: int = 10_000,
        batch_size: int = 500,
        rejection: str = "discard",
        metrics: Metrics | None = None,
    ) -> None:
        for setting, value in (("queue_size", queue_size), ("batch_size", batch_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(
                    f"AsyncWriteStore: {setting} must be an int > 0, got {value!r}"
                )
        if rejection not in REJECTIONS:
            raise ConfigurationError(
                f"AsyncWriteStore: rejection must be one of {', '.join(REJECTIONS)}; "
                f"got {rejection!r}"
            )
        self.inner = inner
        # Over a store whose reads are fresh, the queued writes are the only objects a read
        # could share with another: copied here, so that the whole layer reads fresh and a
        # copying layer in front copies writes only.
        self._fresh = reads_fresh(inner)
        self._q = WriteQueue(
            inner, queue_size, batch_size, rejection, NULL_METRICS if metrics is None else metrics
        )
        # Dropped without close(): the worker writes what is queued, then ends.
        self._finalizer = weakref.finalize(self, self._q.stop_soon)
        self._finalizer.atexit = False  # exit has its own hook, which waits for the writes

    def __repr__(self) -> str:
        q = self._q
        return (
            f"AsyncWriteStore({self.inner!r}, queue_size={q.queue_size}, "
            f"batch_size={q.batch_size}, rejection={q.rejection!r})"
        )

    @property
    def reads_fresh(self) -> bool:
        """Whether its reads hand back objects no one else holds: the inner store's do, and a
        queued write found is copied."""
        return self._fresh

    @property
    def queue_size(self) -> int:
        """The most writes waiting at once."""
        return self._q.queue_size

    @property
    def batch_size(self) -> int:
        """The most writes per `store_many` call of the worker."""
        return self._q.batch_size

    @property
    def rejection(self) -> str:
        """What happens to writes that find the queue full."""
        return self._q.rejection

    @property
    def metrics(self) -> Metrics:
        """Where the queue length, discarded and failed writes are reported."""
        return self._q.metrics

    @metrics.setter
    def metrics(self, metrics: Metrics) -> None:
        self._q.metrics = metrics

    def bound_writes_here(self, run: Callable[[Callable[[], None]], None]) -> None:
        """Make the writes done on a caller's thread (``rejection="caller_runs"`` at a full
        queue, or after `close`) through ``run``, which bounds the caller's wait (the store
        deadline over this queue); it may raise, the write then given up."""
        self._q.here = run

    def bound_queued_writes(self, run: Callable[..., Any]) -> None:
        """Make the worker's writes through ``run(operation, fn, *args)``, which bounds its
        wait on a hung store (the store deadline over this queue) and counts the verdict
        toward the store breaker; a write it times out is retried, as one refused."""
        self._q.bounded = run

    @property
    def clock(self) -> Callable[[], datetime]:
        """The clock of the queue's log limits (the wall clock until an engine gives its own)."""
        return self._q.logs.clock

    @clock.setter
    def clock(self, clock: Callable[[], datetime]) -> None:
        self._q.logs.clock = clock

    @property
    def queued(self) -> int:
        """How many writes wait in the queue now (those waiting for the store included)."""
        q = self._q
        return len(q.queue) + len(q.retry)

    @property
    def retrying(self) -> int:
        """How many writes the store was out for wait to be tried again."""
        return len(self._q.retry)

    # -- writes -----------------------------------------------------------------------------------

    def on_landed(self, landed: Callable[[list[Write]], None]) -> None:
        """Have ``landed`` told, on the writing thread, of the writes each batch made (or gave
        up for good): ``(name, key, payload or a tombstone)`` each."""
        self._q.landed = landed

    def store(self, payload: Payload) -> int:
        """Queue one entry; 0: the queue counts what becomes of it (``superseded`` included).

        Raises:
            StoreError: the queue is full and ``rejection="abort"``.
        """
        self._q.submit_one(payload.name, payload.key, payload)
        return 0

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Queue several entries; they are admitted, or rejected, together. 0, as `store`.

        Raises:
            StoreError: the queue is full and ``rejection="abort"``.
        """
        if payloads:
            self._q.submit([(p.name, p.key, p) for p in payloads])
        return 0

    def delete(self, name: str, key: str) -> None:
        """Queue a delete; reads stop seeing the entry at once.

        Raises:
            StoreError: the queue is full and ``rejection="abort"``.
        """
        self._q.submit([(name, key, DELETED)])

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Queue the deletes as one batch (admitted, or rejected, together)."""
        writes: list[Write] = [(name, key, DELETED) for key in dict.fromkeys(keys)]
        if writes:
            self._q.submit(writes)

    def clean_by_expiry(self, now: datetime) -> int:
        """Flush the queue, then remove expired entries; returns the true count."""
        self._q.flush(None)
        return self.inner.clean_by_expiry(now)

    # -- reads ------------------------------------------------------------------------------------

    def find(self, name: str, key: str) -> Payload | None:
        """The entry of a write still queued, else the inner store's entry."""
        write = self._q.pending.get((name, key))  # one dict read: atomic, no lock needed
        if write is None:
            return self.inner.find(name, key)
        return self._hit(write[2])

    def _hit(self, value: Any) -> Payload | None:
        """What a read hands back of a queued write: ``None`` for a delete; a copy when the
        layer reads fresh (every reader gets its own)."""
        if isinstance(value, Tombstone):
            return None
        return copied(value) if self._fresh else value

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``, writes still queued included."""
        queued, rest = self._pending(name, keys)
        return _laid_over(self.inner.find_many(name, rest), queued, self._fresh)

    def _pending(self, name: str, keys: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
        """The queued writes of ``keys``, and the keys to read from the inner store."""
        keys = list(keys)
        q = self._q
        with q.lock:
            queued = {k: w[2] for k in keys if (w := q.pending.get((name, k))) is not None}
        return queued, [k for k in keys if k not in queued]

    # -- async: the inner store's own, with read-your-writes as above -------------------------

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, the inner store's read awaited."""
        write = self._q.pending.get((name, key))
        if write is None:
            found = await as_async(self.inner).afind(name, key)
            return found
        return self._hit(write[2])

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, the inner store's read awaited."""
        queued, rest = self._pending(name, keys)
        found = await as_async(self.inner).afind_many(name, rest) if rest else {}
        return _laid_over(found, queued, self._fresh)

    async def astore_many(self, payloads: Sequence[Payload]) -> int:
        """`store_many`: queued, never waiting on I/O."""
        return self.store_many(payloads)

    async def aclose(self) -> None:
        """Close the inner store's async clients of this loop."""
        if native_async(self.inner):
            await self.inner.aclose()

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``, writes still queued included."""
        q = self._q
        # The queued writes are read before the inner store: a write leaves `pending` only once
        # written, so this order never misses one.
        with q.lock:
            queued = {k: w[2] for (n, k), w in q.pending.items() if n == name}
        found = {p.key: p for p in self.inner.find_all(name)}
        return list(_laid_over(found, queued, self._fresh).values())

    # -- browsing (read-your-writes) ---------------------------------------------------------------

    def browsed(self) -> FailoverStore:
        """The inner store, with the queued writes laid over its pages."""
        return self.inner

    def _queued(self, name: str) -> dict[str, Payload | None]:
        with self._q.lock:
            writes = [(k, w[2]) for (n, k), w in self._q.pending.items() if n == name]
        return {k: None if isinstance(v, Tombstone) else v for k, v in writes}

    def names(self) -> list[str]:
        """Every name that has entries, writes still queued included."""
        with self._q.lock:
            queued = {n for (n, _), w in self._q.pending.items() if not isinstance(w[2], Tombstone)}
        return sorted(queued.union(self._browser().names()))

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """A page of the inner store with the writes still queued laid over it."""
        return overlaid(self._browser(), name, self._queued(name), after, limit)

    def count(self, name: str) -> int:
        """The inner store's count, with the writes still queued counted in (the worker waits
        meanwhile: a write made between the two reads would be counted twice, or not at all)."""
        with self._q.io_lock:
            queued = self._queued(name)
            there = self.inner.find_many(name, queued) if queued else {}
            counted = self._browser().count(name)
        added = sum(v is not None and k not in there for k, v in queued.items())
        return counted + added - sum(v is None and k in there for k, v in queued.items())

    def summary(self, name: str, now: datetime) -> Summary:
        """The inner store's summary, once the writes queued before it are written."""
        self._q.flush(None)
        return self._browser().summary(name, now)

    # -- flush and close --------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write made before this call is written (or has failed), or was
        tried once more since this call and still waits for the store (then ``False``: it
        stays queued, retried). A store that is out does not hold a flush longer than one
        try (under an engine, its ``store_timeout``).

        Writes being made on another caller's thread (``rejection="caller_runs"``, or after
        `close`) count too: reads see them already.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Returns:
            ``True`` when everything was handled, ``False`` when the timeout came first or
            writes still wait for the store.
        """
        if timeout is None:
            return self._q.flush(None) and super().flush(None)
        deadline = time.monotonic() + timeout
        flushed = self._q.flush(timeout)
        return super().flush(max(0.0, deadline - time.monotonic())) and flushed

    def close(self) -> None:
        """Flush the queue, stop the worker, then close the inner store.

        The writes still waiting for the store get one last try; those it does not take are
        given up, counted failed and logged once (a dead store does not hold a close: under an
        engine each try is bounded by its ``store_timeout``). Writes made afterwards go
        straight to the inner store, on the caller's thread.
        """
        self._q.stop(None)
        self._finalizer.detach()
        self.inner.close()


def _laid_over(found: dict[str, Payload], queued: dict[str, Any], copy: bool) -> dict[str, Payload]:
    """``found`` with the queued writes laid over it (a queued delete hides an entry), each
    copied when ``copy``."""
    for key, value in queued.items():
        if isinstance(value, Tombstone):
            found.pop(key, None)
        else:
            found[key] = copied(value) if copy else value
    return found
