"""`AsyncWriteStore`: writes leave the caller's path for a bounded queue and one worker thread.

How it stays correct:

- *Order per key.* Every write not yet written is recorded in ``pending`` under its
  ``(name, key)``, replacing any older one. A write reaches the inner store only if it is still
  the newest of its key when its turn comes, and every write to the inner store happens under
  ``io_lock``. So an older write never lands after a newer one, whether the newer one went
  through the queue or was written on the caller's thread (``rejection="caller_runs"``);
  superseded writes are skipped.
- *Read-your-writes.* Reads look at ``pending`` first (a payload, or a tombstone for a delete),
  then at the inner store. A write leaves ``pending`` only after it was written.
- *Flush.* Writes are counted when accepted (queued, or made on the caller's thread) and when
  handled (written, skipped or failed); a flush waits on a condition until the second count
  reaches the first. A write made on the caller's thread is counted too: reads see it at once,
  and it may be what a queued write of its key was skipped for.
- *Lifetime.* The worker thread holds the `_WriteQueue`, never the `AsyncWriteStore`, so a
  store dropped without `AsyncWriteStore.close` is still collected; its worker then writes
  what is left and ends. The interpreter-exit hook holds the queue weakly.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final

from ..errors import ConfigurationError, SerializationError, StoreError
from ..metrics import NULL_METRICS, Metrics
from .base import Capabilities, FailoverStore, Payload, delete_many, does_io
from .browsing import BrowsingLayer, Page, Summary, overlaid

__all__ = ["REJECTIONS", "AsyncWriteStore"]

log = logging.getLogger(__name__)

REJECTIONS: Final = ("discard", "caller_runs", "abort")
"""What `AsyncWriteStore` does with writes that find the queue full."""

_EXIT_FLUSH_SECONDS = 30.0
"""How long interpreter exit waits for queued writes, all queues (tenants) together: a dead
database must not hang the exit."""
_exit_deadline: list[float] = []  # set by the first exit hook that runs


class _Tombstone:
    """A delete not yet written, as reads see it: the entry is gone."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<deleted>"


_DELETED: Final = _Tombstone()

# One write: (name, key, payload or _DELETED). Each write is a new tuple, and its identity tells
# whether it is still the newest write of its key in `pending`.
_Write = tuple[str, str, Payload | _Tombstone]


class _WriteQueue:
    """The queue, the writes not yet written, and the worker that drains them."""

    def __init__(
        self,
        inner: FailoverStore,
        queue_size: int,
        batch_size: int,
        rejection: str,
        metrics: Metrics,
    ) -> None:
        self.inner = inner
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.rejection = rejection
        self.metrics = metrics
        self.queue: deque[_Write] = deque()
        self.pending: dict[tuple[str, str], _Write] = {}
        # One lock for the queue and `pending`; the worker waits on `has_work`, flushes on
        # `progress`, so that a write wakes the worker only, and only when it is idle.
        self.lock = threading.Lock()
        self.has_work = threading.Condition(self.lock)
        self.progress = threading.Condition(self.lock)
        self.io_lock = threading.Lock()
        self.queued = 0  # writes ever accepted: queued, or being made on a caller's thread
        self.handled = 0  # writes ever handled: written, skipped or failed
        self.worker: threading.Thread | None = None
        self.stopped = False  # closed or exiting: writes are made on the caller's thread
        self.dropping = False  # inside a burst of discarded writes (warned already)
        self.idle = False  # the worker waits for writes (only then is it worth a notify)
        self.worker_done = False  # the worker ended (stopped, or killed by a BaseException)
        self.exit_hook = functools.partial(_flush_at_exit, weakref.ref(self))

    def submit(self, writes: list[_Write]) -> None:
        with self.lock:
            if not self.stopped:
                queue = self.queue
                # An empty queue takes a batch larger than queue_size, which could never fit.
                if not queue or len(queue) + len(writes) <= self.queue_size:
                    if self.worker is not None or self._start_worker():
                        self._mark_pending(writes)
                        queue.extend(writes)
                        self.queued += len(writes)
                        if self.idle:
                            self.has_work.notify()
                        return
                    self.stopped = True  # interpreter shutdown: no new threads
                elif self.rejection != "caller_runs":
                    # A delete is an invalidate(): dropping it would serve what the user
                    # removed, so under "discard" deletes are written here instead.
                    kept = self._reject(writes)
                    if not kept:
                        return
                    writes = kept
            # Written right here: closed, exiting, or rejection="caller_runs" at a full queue.
            self._mark_pending(writes)
            self.queued += len(writes)
        try:
            self.write(writes)
        finally:
            with self.lock:
                self.handled += len(writes)
                self.progress.notify_all()

    def _mark_pending(self, writes: list[_Write]) -> None:
        # Called with `lock` held: each write becomes the newest of its key.
        pending = self.pending
        for write in writes:
            pending[write[0], write[1]] = write

    def _reject(self, writes: list[_Write]) -> list[_Write]:
        """At a full queue (``lock`` held): raise for "abort"; for "discard", drop the stores
        and return the deletes, which the caller writes on its own thread."""
        if self.rejection == "abort":
            raise StoreError(
                f"AsyncWriteStore: the queue is full ({self.queue_size} writes waiting); "
                f"{len(writes)} write(s) refused (rejection='abort')"
            )
        deletes = [w for w in writes if isinstance(w[2], _Tombstone)]
        dropped = len(writes) - len(deletes)
        if not dropped:
            return deletes
        self.metrics.async_dropped(dropped)
        self.metrics.async_queue(len(self.queue))
        if not self.dropping:
            self.dropping = True
            log.warning(
                "failover: the async-writes queue is full (%d writes waiting); discarding "
                "writes until it drains (rejection='discard')",
                self.queue_size,
            )
        return deletes

    def _start_worker(self) -> bool:
        # Called with `lock` held. The worker runs in a copy of this thread's context, so context
        # variables (a tenant, a request id) are what they were here, in its log records too.
        worker = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self.run,),
            name="failover-async-writes",
            daemon=True,
        )
        try:
            worker.start()
        except RuntimeError:  # interpreter shutdown
            return False
        self.worker = worker
        atexit.register(self.exit_hook)
        return True

    def run(self) -> None:
        """The worker: drain the queue until stopped; however it ends, waiters wake up."""
        try:
            self._drain()
        finally:
            with self.lock:
                self.worker_done = True
                self.stopped = True  # from now on, writes are made on the caller's thread
                lost = len(self.queue)
                self.progress.notify_all()
            if lost:
                log.error("failover: the async-writes worker ended with %d writes unwritten", lost)

    def _drain(self) -> None:
        queue, lock = self.queue, self.lock
        while True:
            with lock:
                while not queue and not self.stopped:
                    self.idle = True
                    self.has_work.wait()
                    self.idle = False
                if not queue:
                    return
                batch = [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]
            try:
                self.write(batch)
            except Exception:  # a bug of ours must not stop the writes that follow
                log.exception("failover: the async-writes worker failed on a batch")
            with lock:
                self.handled += len(batch)
                size = len(queue)
                if not size:
                    self.dropping = False  # the burst of discarded writes, if any, is over
                self.progress.notify_all()
            try:
                self.metrics.async_queue(size)
            except Exception:  # a custom metrics object must not end the worker: writes would stall
                log.debug("failover: updating the async-writes queue metric failed", exc_info=True)

    def write(self, writes: list[_Write]) -> None:
        """Write what is still the newest write of its key, then forget it as pending."""
        failed = 0
        with self.io_lock:
            with self.lock:
                pending = self.pending
                newest = [w for w in writes if pending.get((w[0], w[1])) is w]
            stores: list[Payload] = []
            deletes: list[_Write] = []
            for write in newest:
                if isinstance(write[2], _Tombstone):
                    deletes.append(write)
                else:
                    stores.append(write[2])
            if stores:
                try:
                    self.inner.store_many(stores)
                except SerializationError:
                    # A value the store cannot encode must not cost the rest of its batch: the
                    # store refused before writing, and encoding again one by one is cheap.
                    failed += self._store_each(stores)
                except Exception:
                    failed += len(stores)
                    log.warning(
                        "failover: writing %d queued entries failed", len(stores), exc_info=True
                    )
            by_name: dict[str, list[str]] = {}
            for name, key, _ in deletes:
                by_name.setdefault(name, []).append(key)
            for name, keys in by_name.items():  # one statement (round trip) per name
                try:
                    delete_many(self.inner, name, keys)
                except Exception:
                    failed += len(keys)
                    log.warning("failover: a queued delete of %r failed", name, exc_info=True)
            with self.lock:
                # A failed write is forgotten too: reads must not show what is not stored.
                for write in newest:
                    ident = (write[0], write[1])
                    if pending.get(ident) is write:
                        del pending[ident]
        if failed:
            self.metrics.async_failed(failed)

    def _store_each(self, payloads: list[Payload]) -> int:
        failed = 0
        for payload in payloads:
            try:
                self.inner.store(payload)
            except Exception:
                failed += 1
                log.warning(
                    "failover: writing the queued entry (%r, %r) failed",
                    payload.name,
                    payload.key,
                    exc_info=True,
                )
        return failed

    def flush(self, timeout: float | None) -> bool:
        with self.lock:
            target = self.queued
            self.progress.wait_for(lambda: self.handled >= target or self.worker_done, timeout)
            return self.handled >= target

    def stop_soon(self) -> None:
        """Let the worker write what is queued and end; later writes are made in place."""
        with self.lock:
            self.stopped = True
            self.has_work.notify()

    def stop(self, timeout: float | None) -> bool:
        """Flush, then stop the worker; ``False`` when the timeout came first."""
        flushed = self.flush(timeout)
        self.stop_soon()
        worker = self.worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
        atexit.unregister(self.exit_hook)
        return flushed


def _flush_at_exit(ref: weakref.ref[_WriteQueue]) -> None:
    queue = ref()
    if queue is None:
        return
    if not _exit_deadline:
        _exit_deadline.append(time.monotonic() + _EXIT_FLUSH_SECONDS)
    # Flush and join share what is left of the one deadline, whatever the number of queues.
    if not queue.stop(max(0.0, _exit_deadline[0] - time.monotonic()) / 2):
        log.error(
            "failover: %d queued writes were not written before the interpreter exited",
            len(queue.queue),
        )


class AsyncWriteStore(BrowsingLayer, Capabilities):
    """Writes go to a bounded queue that one daemon thread drains in batches (`store_many`).

    Reads see the writes still queued (read-your-writes within the process). Writes of one key
    land in the order they were made; a write superseded while queued is skipped. At interpreter
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
        self._q = _WriteQueue(
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

    @property
    def does_io(self) -> bool:
        """Whether the inner store does I/O (reads still do, on the caller's thread)."""
        return does_io(self.inner)

    def layers_below(self) -> tuple[FailoverStore]:
        """The inner store."""
        return (self.inner,)

    @property
    def queued(self) -> int:
        """How many writes wait in the queue now."""
        return len(self._q.queue)

    # -- writes -----------------------------------------------------------------------------------

    def store(self, payload: Payload) -> None:
        """Queue one entry.

        Raises:
            StoreError: the queue is full and ``rejection="abort"``.
        """
        self._q.submit([(payload.name, payload.key, payload)])

    def store_many(self, payloads: Sequence[Payload]) -> None:
        """Queue several entries; they are admitted, or rejected, together.

        Raises:
            StoreError: the queue is full and ``rejection="abort"``.
        """
        if payloads:
            self._q.submit([(p.name, p.key, p) for p in payloads])

    def delete(self, name: str, key: str) -> None:
        """Queue a delete; reads stop seeing the entry at once.

        Raises:
            StoreError: the queue is full and ``rejection="abort"``.
        """
        self._q.submit([(name, key, _DELETED)])

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Queue the deletes as one batch (admitted, or rejected, together)."""
        writes: list[_Write] = [(name, key, _DELETED) for key in dict.fromkeys(keys)]
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
        value = write[2]
        return None if isinstance(value, _Tombstone) else value

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``, writes still queued included."""
        keys = list(keys)
        q = self._q
        with q.lock:
            queued = {k: w[2] for k in keys if (w := q.pending.get((name, k))) is not None}
        found = self.inner.find_many(name, [k for k in keys if k not in queued])
        for key, value in queued.items():
            if not isinstance(value, _Tombstone):
                found[key] = value
        return found

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``, writes still queued included."""
        q = self._q
        # The queued writes are read before the inner store: a write leaves `pending` only once
        # written, so this order never misses one.
        with q.lock:
            queued = {k: w[2] for (n, k), w in q.pending.items() if n == name}
        found = {p.key: p for p in self.inner.find_all(name)}
        for key, value in queued.items():
            if isinstance(value, _Tombstone):
                found.pop(key, None)
            else:
                found[key] = value
        return list(found.values())

    # -- browsing (read-your-writes) ---------------------------------------------------------------

    def browsed(self) -> FailoverStore:
        """The inner store, with the queued writes laid over its pages."""
        return self.inner

    def _queued(self, name: str) -> dict[str, Payload | None]:
        with self._q.lock:
            writes = [(k, w[2]) for (n, k), w in self._q.pending.items() if n == name]
        return {k: None if isinstance(v, _Tombstone) else v for k, v in writes}

    def names(self) -> list[str]:
        """Every name that has entries, writes still queued included."""
        with self._q.lock:
            queued = {
                n for (n, _), w in self._q.pending.items() if not isinstance(w[2], _Tombstone)
            }
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
        """Wait until every write made before this call is written (or has failed).

        Writes being made on another caller's thread (``rejection="caller_runs"``, or after
        `close`) count too: reads see them already.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Returns:
            ``True`` when everything was written, ``False`` when the timeout came first.
        """
        if timeout is None:
            return self._q.flush(None) and super().flush(None)
        deadline = time.monotonic() + timeout
        flushed = self._q.flush(timeout)
        return super().flush(max(0.0, deadline - time.monotonic())) and flushed

    def close(self) -> None:
        """Flush the queue, stop the worker, then close the inner store.

        Writes made afterwards go straight to the inner store, on the caller's thread.
        """
        self._q.stop(None)
        self._finalizer.detach()
        self.inner.close()
