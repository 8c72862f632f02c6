"""How the async-writes worker writes a batch (`BatchWriter`): what is still the newest write
of its key, in one ``store_many`` and one delete per name; what the store could not take waits
for a retry; each write counted once, per name (`failover_writes_total`).

A part of `failover.stores.layers.write_queue.WriteQueue`, which holds the state declared here.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from ...errors import SerializationError
from ...logs import LogLimiter
from ...metrics import NULL_METRICS, Metrics
from ..base import FailoverStore, Payload, delete_many, older
from ..outages import worth_retrying

__all__ = ["DELETED", "RETRY_FIRST", "RETRY_MOST", "BatchWriter", "Tombstone", "Write"]

# The queue logs as the store it serves: what users filter on, and what it always was.
log = logging.getLogger("failover.stores.layers.async_write")

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


class BatchWriter:
    """Writes the batches of a `failover.stores.layers.write_queue.WriteQueue` (its
    ``__init__`` sets the state declared here)."""

    inner: FailoverStore
    metrics: Metrics
    lock: threading.Lock
    has_work: threading.Condition
    progress: threading.Condition
    io_lock: threading.Lock
    pending: dict[tuple[str, str], Write]
    landed: Callable[[list[Write]], None] | None
    retry: deque[Write]
    due: datetime | None
    failures: int
    hurried: int
    flushes: int
    taken_at: int
    idle: bool
    stopped: bool
    given_up: int
    worker: threading.Thread | None
    bounded: Callable[..., Any] | None
    logs: LogLimiter
    refused: set[tuple[str, type]]

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
                    if worth_retrying(exc):
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
                if worth_retrying(exc):
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
                (later if worth_retrying(exc) else failed).append(payload)
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

    def _forget(self, writes: list[Write]) -> None:
        """``writes`` leave `pending` unless a newer write of their key took their place."""
        pending = self.pending
        for write in writes:
            if pending.get((write[0], write[1])) is write:
                del pending[write[0], write[1]]
