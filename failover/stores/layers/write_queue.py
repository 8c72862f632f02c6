"""The queue of `AsyncWriteStore`: the writes not yet written, and the worker that drains them.

See `failover.stores.layers.async_write` for how it stays correct (order per key, read-your-writes,
flush, lifetime, retries).
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from ...errors import StoreError
from ...forks import AfterFork
from ...logs import LogLimiter
from ...metrics import NULL_METRICS, Metrics
from ..base import FailoverStore, Payload, older
from .write_batches import DELETED, RETRY_FIRST, RETRY_MOST, Tombstone, Write
from .write_worker import Worker

__all__ = [
    "DELETED",
    "REJECTIONS",
    "RETRY_FIRST",
    "RETRY_MOST",
    "Tombstone",
    "Write",
    "WriteQueue",
]

# The queue logs as the store it serves: what users filter on, and what it always was.
log = logging.getLogger("failover.stores.layers.async_write")

REJECTIONS: Final = ("discard", "caller_runs", "abort")
"""What `AsyncWriteStore` does with writes that find the queue full."""

_EXIT_FLUSH_SECONDS = 30.0
"""How long interpreter exit waits for queued writes, all queues (tenants) together: a dead
database must not hang the exit."""
_exit_deadline: list[float] = []  # set by the first exit hook that runs


class WriteQueue(Worker):
    """The queue, the writes not yet written, and the worker that drains them (`Worker`, which
    writes its batches as `BatchWriter`)."""

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
        # The writes not yet taken by the worker, one per key: a newer write of a key takes the
        # place of the one still waiting (entries only move forward), so a hot key costs one
        # write per batch, not one per call, and cannot fill the queue.
        self.queue: OrderedDict[tuple[str, str], Write] = OrderedDict()
        self.pending: dict[tuple[str, str], Write] = {}
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
        # Told of the writes the store took (or refused for good) after each batch: a tiered
        # store says so to the other processes of its fleet (`TieredStore.cohere`).
        self.landed: Callable[[list[Write]], None] | None = None
        self.exit_hook = functools.partial(_flush_at_exit, weakref.ref(self))
        # A store that is down fails every batch: logged once, then once a minute (per
        # operation); the engine gives its clock (`AsyncWriteStore.clock`).
        self.logs = LogLimiter(log)
        # (name, result type) the store cannot encode: dropped at once, never encoded again.
        self.refused: set[tuple[str, type]] = set()
        # Runs the writes made on a caller's thread (set by the store deadline over the queue,
        # so that they wait no longer than the reads); ``None``: written directly.
        self.here: Callable[[Callable[[], None]], None] | None = None
        # Runs the worker's own writes: ``bounded(operation, fn, *args)`` (the store deadline
        # over the queue: a hung store holds the worker no longer than a caller); ``None``:
        # called directly.
        self.bounded: Callable[..., Any] | None = None
        # Writes the store could not take (out: refused, timed out), still pending (reads see
        # them), retried from `due` on with backoff until written, expired or pushed out.
        self.retry: deque[Write] = deque()
        self.due: datetime | None = None
        self.failures = 0  # attempts in a row that met the store out: the backoff's exponent
        self.hurried = 0  # retries a flush asked for now, whatever `due` says
        self.passes = 0  # times the worker ran out of work it could do now (a flush waits on it)
        self.here_running = 0  # writes being made on a caller's behalf (a flush waits for them)
        self.flushes = 0  # flushes begun: a write tried before the latest is tried once more
        self.taken_at = 0  # `flushes` when the worker took the batch it writes now
        self.given_up = 0  # writes given up at close, the store still out: logged once

    def submit_one(self, name: str, key: str, payload: Payload) -> None:
        """`submit` of one entry (a call's success), its common case in this frame: the worker
        running, no write waiting for the store, and a place in the queue (its key's, or a free
        one). Anything else goes through `submit`."""
        if self.refused and (name, type(payload.payload)) in self.refused:
            return
        ident = (name, key)
        with self.lock:
            queue = self.queue
            size = len(queue)
            if not self.stopped and self.worker is not None and not self.retry:
                write = (name, key, payload)
                queued = self.pending.get(ident)
                if (
                    queued is not None
                    and not isinstance(queued[2], Tombstone)
                    and older(payload, queued[2])
                ):  # entries only move forward: as `_forward`
                    self._superseded_one(payload)
                    return
                waiting = queue.get(ident)
                # As `submit`'s test for one write: its key's place, or a free one.
                if size < self.queue_size or (waiting is not None and size <= self.queue_size):
                    self.pending[ident] = write
                    self.queued += 1
                    queue[ident] = write
                    if waiting is not None:  # as `_enqueue`
                        self._superseded_one(waiting[2])
                        self.handled += 1
                    if self.idle:
                        self.has_work.notify()
                    return
        self.submit([(name, key, payload)])

    def submit(self, writes: list[Write]) -> None:
        if self.refused:  # only once the store refused to encode a type: else free
            writes = [w for w in writes if not self._refused(w)]
            if not writes:
                return
        behind: list[Write] = []
        with self.lock:
            if self.pending:  # entries only move forward: a newer queued write of a key stays
                writes, behind = self._forward(writes)
                if behind:
                    self._superseded(behind)
                    if not writes:
                        return
            if not self.stopped:
                queue = self.queue
                if self.retry and len(queue) + len(self.retry) + len(writes) > self.queue_size:
                    # The oldest writes waiting for the store give way to new ones (the bound).
                    self._push_out(len(queue) + len(self.retry) + len(writes) - self.queue_size)
                waiting = len(queue) + len(self.retry)
                # An empty queue takes a batch larger than queue_size, which could never fit.
                if (
                    not waiting
                    or waiting + len(writes) <= self.queue_size
                    or waiting + self._new_keys(writes) <= self.queue_size
                ):
                    if self.worker is not None or self._start_worker():
                        self._mark_pending(writes)
                        self.queued += len(writes)
                        self._enqueue(writes)
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
            if self.here is None:
                self.here_running += 1
        if self.here is None:
            self.count("queued", (w[2] for w in writes))
            parked = 0
            try:
                parked = self.write(writes)
            finally:
                self._handled(len(writes) - parked, here=True)
        else:
            self._write_here(writes, self.here)

    def _handled(self, count: int, here: bool = False) -> None:
        with self.lock:
            self.handled += count
            if here:
                self.here_running -= 1
            self.progress.notify_all()

    def _write_here(self, writes: list[Write], here: Callable[[Callable[[], None]], None]) -> None:
        """Write on the caller's behalf through ``here`` (the store deadline): the caller waits
        at most its deadline; a write given up then still ends on the deadline's worker, and
        one that never started (the store breaker is open) is forgotten, as if dropped."""
        started = threading.Event()  # claimed by the write, or by the caller that gave it up

        def write() -> None:
            with self.lock:
                if started.is_set():
                    return  # given up before it started
                started.set()
                self.here_running += 1
            self.count("queued", (w[2] for w in writes))
            parked = 0
            try:
                parked = self.write(writes)
            finally:
                self._handled(len(writes) - parked, here=True)

        try:
            here(write)
        except BaseException:
            with self.lock:
                never = not started.is_set()
                started.set()
                if never:
                    for w in writes:  # reads must not show what will never be written
                        if self.pending.get((w[0], w[1])) is w:
                            del self.pending[w[0], w[1]]
            if never:
                self._handled(len(writes))
            raise

    def _forward(self, writes: list[Write]) -> tuple[list[Write], list[Write]]:
        """``writes`` (``lock`` held) split into those to queue and those older than the
        queued write of their key (`older`), which would never replace it in the store."""
        pending = self.pending
        ahead: list[Write] = []
        behind: list[Write] = []
        for write in writes:
            queued = pending.get((write[0], write[1]))
            value = write[2]
            if (
                queued is not None
                and not isinstance(value, Tombstone)
                and not isinstance(queued[2], Tombstone)
                and older(value, queued[2])
            ):
                behind.append(write)
            else:
                ahead.append(write)
        return ahead, behind

    def _new_keys(self, writes: list[Write]) -> int:
        """How many of ``writes`` (``lock`` held) take a new place in the queue (the others
        replace the waiting write of their key)."""
        queue = self.queue
        return len({(w[0], w[1]) for w in writes if (w[0], w[1]) not in queue})

    def _enqueue(self, writes: list[Write]) -> None:
        """Queue ``writes`` (``lock`` held); one still waiting for the worker of the same key
        is replaced in place and counted superseded (handled: a flush does not wait for it)."""
        queue = self.queue
        replaced: list[Write] = []
        for write in writes:
            key = (write[0], write[1])
            waiting = queue.get(key)
            if waiting is not None:
                replaced.append(waiting)
            queue[key] = write
        if replaced:
            self._superseded(replaced)
            self.handled += len(replaced)

    def _superseded(self, writes: list[Write]) -> None:
        """Count ``writes``, refused for a newer queued write of their keys: handed to the
        queue, and superseded there (so that queued = written + failed + superseded)."""
        values = [w[2] for w in writes]
        self.count("queued", values)
        self.count("superseded", values)

    def _superseded_one(self, value: Payload | Tombstone) -> None:
        """`_superseded` of one write's ``value``, without a tally per name."""
        metrics = self.metrics
        if metrics is not NULL_METRICS and not isinstance(value, Tombstone):
            metrics.write_results(value.name, "queued", 1)
            metrics.write_results(value.name, "superseded", 1)

    def _mark_pending(self, writes: list[Write]) -> None:
        # Called with `lock` held: each write becomes the newest of its key.
        pending = self.pending
        for write in writes:
            pending[write[0], write[1]] = write

    def _reject(self, writes: list[Write]) -> list[Write]:
        """At a full queue (``lock`` held): raise for "abort"; for "discard", drop the stores
        and return the deletes, which the caller writes on its own thread."""
        if self.rejection == "abort":
            raise StoreError(
                f"AsyncWriteStore: the queue is full ({self.queue_size} writes waiting); "
                f"{len(writes)} write(s) refused (rejection='abort')"
            )
        deletes = [w for w in writes if isinstance(w[2], Tombstone)]
        dropped = len(writes) - len(deletes)
        if not dropped:
            return deletes
        self.count(
            "queued", (w[2] for w in writes)
        )  # handed to the queue, and lost there: counted failed
        self.count("failed", (w[2] for w in writes))
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
        _FORKS.add(self)
        return True

    def forked(self) -> None:
        """In a forked child (a preforking server's worker): the worker thread did not come
        along, and it may have held the locks at the fork. The writes queued then are the
        parent's, which writes them: the child forgets them (a copy written later could
        overwrite a newer value), and its next write starts a worker of its own."""
        self.lock = threading.Lock()
        self.has_work = threading.Condition(self.lock)
        self.progress = threading.Condition(self.lock)
        self.io_lock = threading.Lock()
        self.queue.clear()
        self.retry.clear()
        self.due, self.failures, self.hurried, self.passes, self.given_up = None, 0, 0, 0, 0
        self.here_running = 0
        self.flushes = self.taken_at = 0
        self.pending.clear()
        self.queued = self.handled = 0
        self.worker = None
        self.idle = self.dropping = self.worker_done = False
        atexit.unregister(self.exit_hook)  # the child's worker registers its own

    def flush(self, timeout: float | None) -> bool:
        """Wait until every write accepted before now was handled, or tried (the writes
        waiting for the store are tried now, whatever their backoff) and still waits for the
        store: ``False`` then, or when ``timeout`` came first."""
        with self.lock:
            target = self.queued
            self.flushes += 1
            if self.retry:
                self.hurried = len(self.retry)
                if self.idle:
                    self.has_work.notify()
            start = self.passes
            self.progress.wait_for(
                # Or all it could do now was tried: the worker is idle since, and no write
                # made on a caller's behalf is still running (it may yet be written).
                lambda: (
                    self.handled >= target
                    or self.worker_done
                    or (self.passes > start and self.idle and not self.here_running)
                ),
                timeout,
            )
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


# The queues that started a worker: reset in a forked child (`WriteQueue.forked`).
_FORKS = AfterFork(WriteQueue.forked)


def _flush_at_exit(ref: weakref.ref[WriteQueue]) -> None:
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
