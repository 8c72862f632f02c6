"""The async-writes worker (`Worker`): drains the queue in batches, retries with backoff the
writes the store could not take, and gives up the oldest of them when the queue is full.

A part of `failover.stores.layers.write_queue.WriteQueue`, which holds the state declared here.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from .write_batches import RETRY_MOST, BatchWriter, Write

__all__ = ["Worker"]

# The queue logs as the store it serves: what users filter on, and what it always was.
log = logging.getLogger("failover.stores.layers.async_write")


class Worker(BatchWriter):
    """The worker of a `failover.stores.layers.write_queue.WriteQueue`."""

    queue: OrderedDict[tuple[str, str], Write]
    batch_size: int
    queue_size: int
    passes: int
    handled: int
    dropping: bool
    worker_done: bool

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
                        n = min(self.batch_size, len(queue))
                        batch = [queue.popitem(last=False)[1] for _ in range(n)]
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
