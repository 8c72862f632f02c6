"""The queue of `AsyncWriteStore`: the writes not yet written, and the worker that drains them.

See `failover.stores.layers.async_write` for how it stays correct (order per key, read-your-writes,
flush, lifetime, retries).
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import random
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from ...errors import SerializationError, StoreError
from ...forks import AfterFork
from ...logs import LogLimiter
from ...metrics import NULL_METRICS, Metrics
from ..base import FailoverStore, Payload, delete_many, older
from ..outages import out

__all__ = ["DELETED", "REJECTIONS", "Tombstone", "Write", "WriteQueue"]

# The queue logs as the store it serves: what users filter on, and what it always was.
log = logging.getLogger("failover.stores.layers.async_write")

REJECTIONS: Final = ("discard", "caller_runs", "abort")
"""What `AsyncWriteStore` does with writes that find the queue full."""

_EXIT_FLUSH_SECONDS = 30.0
"""How long interpreter exit waits for queued writes, all queues (tenants) together: a dead
database must not hang the exit."""
_exit_deadline: list[float] = []  # set by the first exit hook that runs

RETRY_FIRST = 0.25
"""Seconds (on the engine's clock) before the first retry of writes the store did not take."""
RETRY_MOST = 5.0
"""The longest wait between two retries (the backoff doubles up to it, jittered)."""

T = TypeVar("T")


class Tombstone:
    """A delete not yet written, as reads see it: the entry is gone."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<deleted>"


DELETED: Final = Tombstone()

# One write: (name, key, payload or DELETED). Each write is a new tuple, and its identity tells
# whether it is still the newest write of its key in `pending`.
Write = tuple[str, str, Payload | Tombstone]


class WriteQueue:
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
        self.queue: deque[Write] = deque()
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
                if not waiting or waiting + len(writes) <= self.queue_size:
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

    def _superseded(self, writes: list[Write]) -> None:
        """Count ``writes``, refused for a newer queued write of their keys: handed to the
        queue, and superseded there (so that queued = written + failed + superseded)."""
        values = [w[2] for w in writes]
        self.count("queued", values)
        self.count("superseded", values)

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

    def run(self) -> None:
        """The worker: drain the queue until stopped; however it ends, waiters wake up."""
        try:
            self._drain()
        finally:
            with self.lock:
                self.worker_done = True
                self.stopped = True  # from now on, writes are made on the caller's thread
                lost = len(self.queue) + len(self.retry)
                given_up, self.given_up = self.given_up, 0
                self.progress.notify_all()
            if given_up:
                log.error(
                    "failover: %d queued writes were given up at close: the store did not "
                    "answer (counted failed)",
                    given_up,
                )
            if lost:
                log.error("failover: the async-writes worker ended with %d writes unwritten", lost)

    def _push_out(self, count: int) -> None:
        """Give up the ``count`` oldest writes waiting for the store to answer (``lock`` held):
        counted failed, and no longer seen by reads."""
        given = [self.retry.popleft() for _ in range(min(count, len(self.retry)))]
        self.hurried = max(0, self.hurried - len(given))
        pending = self.pending
        overtaken = [w for w in given if pending.get((w[0], w[1])) is not w]
        if overtaken:  # not lost: a newer write of its key is queued (counted written)
            self.count("written", (w[2] for w in overtaken))
            given = [w for w in given if pending.get((w[0], w[1])) is w]
        self._forget(given)
        self.handled += len(given) + len(overtaken)
        self.progress.notify_all()
        if not given:
            return
        self.count("failed", (w[2] for w in given))
        self.metrics.async_failed(len(given))
        self.logs.report(
            "pushed_out",
            "failover: %d queued writes given up: the store is out and the queue is full "
            "(queue_size=%d)",
            len(given),
            self.queue_size,
        )

    def _forget(self, writes: list[Write]) -> None:
        """``writes`` leave `pending` unless a newer write of their key took their place."""
        pending = self.pending
        for write in writes:
            if pending.get((write[0], write[1])) is write:
                del pending[write[0], write[1]]

    def _due(self) -> bool:
        due = self.due
        return due is not None and self.logs.clock() >= due

    def _wait(self) -> float | None:
        """How long the idle worker waits before it looks at its retries again (``None``:
        until woken). Read on the engine's clock; a clock that does not move is looked at
        again at most every `RETRY_MOST` seconds."""
        if not self.retry or self.due is None:
            return None
        left = (self.due - self.logs.clock()).total_seconds()
        return min(max(left, 0.01), RETRY_MOST)

    def _drain(self) -> None:
        queue, retry, lock = self.queue, self.retry, self.lock
        while True:
            with lock:
                while True:
                    if retry and (self.stopped or self.hurried or self._due()):
                        # At close (stopped) they get one last try, then are given up.
                        n = min(self.batch_size, len(retry))
                        batch = [retry.popleft() for _ in range(n)]
                        self.hurried = max(0, self.hurried - n)
                        fresh = False
                        self.taken_at = self.flushes
                        break
                    if queue:
                        batch = [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]
                        fresh = True
                        self.taken_at = self.flushes
                        break
                    if self.stopped:
                        return
                    self.passes += 1
                    self.progress.notify_all()
                    self.idle = True
                    self.has_work.wait(self._wait())
                    self.idle = False
            # Counted queued here, off the callers' threads (once: a retry is not counted
            # again): once the queue is drained, queued = written + failed + superseded.
            if fresh:
                self.count("queued", (w[2] for w in batch))
            parked = 0
            try:
                parked = self.write(batch, retried=not fresh)
            except Exception:  # a bug of ours must not stop the writes that follow
                log.exception("failover: the async-writes worker failed on a batch")
            with lock:
                self.handled += len(batch) - parked
                size = len(queue) + len(retry)
                if not size:
                    self.dropping = False  # the burst of discarded writes, if any, is over
                self.progress.notify_all()
            try:
                self.metrics.async_queue(size)
            except Exception:  # a custom metrics object must not end the worker: writes would stall
                log.debug("failover: updating the async-writes queue metric failed", exc_info=True)

    def _call(self, operation: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the store: the worker's own under the store deadline, if any (a
        write on a caller's thread is bounded by it already)."""
        bounded = self.bounded
        if bounded is not None and threading.current_thread() is self.worker:
            result: T = bounded(operation, fn, *args)
            return result
        return fn(*args)

    def write(self, writes: list[Write], retried: bool = False) -> int:
        """Write what is still the newest write of its key, then forget it as pending; the
        writes the store could not take (out) stay pending and wait in `retry` (none once
        stopped: they are given up). Returns how many were put there.

        Args:
            writes: the writes to make.
            retried: they waited for the store already: those whose entry expired meanwhile
                are given up (counted failed), not written.
        """
        failed = 0
        again: list[Write] = []  # the store was out: retried later
        with self.io_lock:
            with self.lock:
                pending = self.pending
                newest = [w for w in writes if pending.get((w[0], w[1])) is w]
            if len(newest) < len(writes):  # overtaken: written, by the newer write of its key
                kept = {id(w) for w in newest}
                self.count("written", (w[2] for w in writes if id(w) not in kept))
            if retried:
                newest, expired = self._unexpired(newest)
                failed += len(expired)
            stores: list[Payload] = []
            deletes: list[Write] = []
            by_payload: dict[int, Write] = {}
            for write in newest:
                if isinstance(write[2], Tombstone):
                    deletes.append(write)
                else:
                    stores.append(write[2])
                    by_payload[id(write[2])] = write
            if stores:
                lost: list[Payload] = []
                later: list[Payload] = []
                superseded: Counter[str] = Counter()
                try:
                    superseded = self._by_name(
                        stores, self._call("store_many", self.inner.store_many, stores)
                    )
                except SerializationError:
                    # A value the store cannot encode must not cost the rest of its batch: the
                    # store refused before writing, and encoding again one by one is cheap.
                    lost, later = self._store_each(stores, superseded)
                except Exception as exc:
                    if out(exc):
                        later = stores
                    else:
                        lost = stores
                    self.logs.report(
                        "store_many",
                        "failover: writing %d queued entries failed%s",
                        len(stores),
                        "" if lost else " (the store is out: they stay queued, retried)",
                        exc_info=True,
                    )
                again.extend(by_payload[id(p)] for p in later)
                failed += len(lost)
                self.count("failed", lost)
                if len(lost) + len(later) < len(stores):
                    gone = {id(p) for p in lost} | {id(p) for p in later}
                    self._count_written(
                        Counter(p.name for p in stores if id(p) not in gone), superseded
                    )
            failed += self._delete(deletes, again)
            again = self._overtaken(again)
            parked = self._park(newest, again)
            if self.landed is not None:
                self._landed(newest, again)
        failed += len(again) - parked
        if failed:
            self.metrics.async_failed(failed)
        return parked

    def _landed(self, newest: list[Write], again: list[Write]) -> None:
        waiting = {id(w) for w in again}
        done = [w for w in newest if id(w) not in waiting]
        landed = self.landed
        if done and landed is not None:
            try:
                landed(done)
            except Exception:  # the listener's trouble must not stop the worker
                log.warning("failover: telling of landed writes failed", exc_info=True)

    def _delete(self, deletes: list[Write], again: list[Write]) -> int:
        """Make the queued ``deletes``, one statement (round trip) per name; those the store
        was out for are added to ``again``. Returns how many failed."""
        failed = 0
        by_name: dict[str, list[Write]] = {}
        for write in deletes:
            by_name.setdefault(write[0], []).append(write)
        for name, some in by_name.items():
            keys = [w[1] for w in some]
            try:
                self._call("delete_many", delete_many, self.inner, name, keys)
            except Exception as exc:
                if out(exc):
                    again.extend(some)
                else:
                    failed += len(keys)
                self.logs.report(
                    "delete_many", "failover: a queued delete of %r failed", name, exc_info=True
                )
        return failed

    def _unexpired(self, writes: list[Write]) -> tuple[list[Write], list[Write]]:
        """``writes`` split into those to try and those whose entry expired while they waited:
        given up (counted failed, forgotten as pending)."""
        now = self.logs.clock()
        expired = [
            w
            for w in writes
            if not isinstance(w[2], Tombstone)
            and w[2].expire_on is not None
            and w[2].expire_on <= now
        ]
        if not expired:
            return writes, []
        with self.lock:
            self._forget(expired)
        self.count("failed", (w[2] for w in expired))
        self.logs.report(
            "expired",
            "failover: %d queued writes given up: their entries expired before the store answered",
            len(expired),
        )
        gone = {id(w) for w in expired}
        return [w for w in writes if id(w) not in gone], expired

    def _overtaken(self, again: list[Write]) -> list[Write]:
        """``again`` less the writes a newer one of their key overtook meanwhile: those wait no
        more (the newer one is written in their place: counted written, as any overtaken
        write), so that `retry` holds one write per key and a busy key never fills the bound
        with its past."""
        with self.lock:
            pending = self.pending
            newest = [w for w in again if pending.get((w[0], w[1])) is w]
            if len(newest) < len(again):
                kept = {id(w) for w in newest}
                self.count("written", (w[2] for w in again if id(w) not in kept))
        return newest

    def _park(self, written: list[Write], again: list[Write]) -> int:
        """Forget ``written`` as pending but ``again`` (the store was out), which waits in
        `retry` with backoff: how many were parked (none once stopped: then given up, counted
        failed). The backoff starts over once the store took a write."""
        keep = {id(w) for w in again}
        with self.lock:
            if self.stopped and again:
                keep = set()
                self.given_up += len(again)
            pending = self.pending
            # A failed write is forgotten too: reads must not show what is not stored.
            for write in written:
                if id(write) not in keep and pending.get((write[0], write[1])) is write:
                    del pending[write[0], write[1]]
            if not keep:
                if again:  # given up at close
                    self.count("failed", (w[2] for w in again))
                elif len(written) > 0:
                    self.failures = 0
                    if not self.retry:
                        self.due = None
                return 0
            self.retry.extend(again)
            if self.taken_at != self.flushes:
                # Tried before a flush began: that flush tries them once more.
                self.hurried = len(self.retry)
                if self.idle:  # parked by a write made on a caller's behalf
                    self.idle = False  # not idle for the flush until it tried them
                    self.has_work.notify()
            self.failures += 1
            backoff = min(RETRY_MOST, RETRY_FIRST * 2 ** min(self.failures - 1, 16))
            # Jittered: the processes of a fleet do not all retry at the same instant.
            self.due = self.logs.clock() + timedelta(seconds=backoff * random.uniform(0.5, 1.0))
            return len(again)

    def _by_name(self, stores: list[Payload], kept: int | None) -> Counter[str]:
        """The ``kept`` entries of ``stores`` (written in one `store_many`) that a newer stored
        entry kept out, per name."""
        if not kept:
            return Counter()
        names = dict.fromkeys(p.name for p in stores)
        if len(names) == 1:
            return Counter({stores[0].name: kept})
        # Rare (a race between processes, in a batch of several names): the store says how
        # many, read back which (an entry stored newer than what was written).
        found: Counter[str] = Counter()
        try:
            for name in names:
                mine = [p for p in stores if p.name == name]
                there = self.inner.find_many(name, [p.key for p in mine])
                found[name] = sum(older(p, there.get(p.key)) for p in mine)
        except Exception:  # unread: the count stands, put on the batch's first name
            log.debug("failover: reading back superseded writes failed", exc_info=True)
            found = Counter()
        rest = kept - found.total()
        if rest > 0:
            found[stores[0].name] += rest
        return found

    def _count_written(self, stored: Counter[str], superseded: Counter[str]) -> None:
        """Count, per name, the entries stored that were ``superseded`` (a newer entry of their
        key was stored) and the rest as written."""
        if self.metrics is NULL_METRICS:
            return
        for name, n in stored.items():
            kept = min(superseded.get(name, 0), n)
            if kept:
                self.metrics.write_results(name, "superseded", kept)
            if n > kept:
                self.metrics.write_results(name, "written", n - kept)

    def _store_each(
        self, payloads: list[Payload], superseded: Counter[str]
    ) -> tuple[list[Payload], list[Payload]]:
        """Store one by one; the payloads that failed, and those the store was out for
        (retried later). Those a newer entry kept out are added to ``superseded``, per
        name."""
        failed: list[Payload] = []
        later: list[Payload] = []
        for payload in payloads:
            try:
                if self._call("store", self.inner.store, payload):
                    superseded[payload.name] += 1
            except SerializationError as exc:
                failed.append(payload)
                self._refuse(payload, exc)
            except Exception as exc:
                (later if out(exc) else failed).append(payload)
                self.logs.report(
                    "store",
                    "failover: writing the queued entry (%r, %r) failed",
                    payload.name,
                    payload.key,
                    exc_info=True,
                )
        return failed, later

    def count(self, result: str, values: Iterable[Payload | Tombstone]) -> None:
        """Count the live results among ``values`` (not deletes) as ``result``, per name
        (`failover_writes_total`)."""
        if self.metrics is not NULL_METRICS:
            names = Counter(v.name for v in values if not isinstance(v, Tombstone))
            for name, n in names.items():
                self.metrics.write_results(name, result, n)

    def _refused(self, write: Write) -> bool:
        value = write[2]
        return (
            not isinstance(value, Tombstone) and (value.name, type(value.payload)) in self.refused
        )

    def _refuse(self, payload: Payload, exc: SerializationError) -> None:
        """The store cannot encode this type of result of ``payload.name``: say so once, and
        queue no more of them (each would cost an encoding, a failure and a log line)."""
        kind = type(payload.payload)
        if (payload.name, kind) in self.refused:
            return
        self.refused.add((payload.name, kind))
        log.warning(
            "failover: the store cannot encode %s.%s, a result of %r (%s); results of this type "
            "are no longer queued for it. Return plain data (a dict, a dataclass, a pydantic "
            "model: e.g. response.json()) to have them stored",
            kind.__module__,
            kind.__qualname__,
            payload.name,
            exc,
        )

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
