"""`AsyncWriteStore`: the queue, its worker, rejection at a full queue, read-your-writes, flush.

The worker is blocked deterministically with `GatedStore`, whose ``store_many`` waits on an
event: no test waits for time to pass.
"""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import textwrap
import threading
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import (
    ConfigurationError,
    Failover,
    ReferentialPayload,
    SerializationError,
    StoreError,
)
from failover.metrics import NullMetrics
from failover.stores import AsyncWriteStore, CopyingStore, InMemoryStore
from failover.stores.backends.sql import SqlStore

from .conftest import FakeClock

WAIT = 10.0  # a bound on waits that only a broken test reaches


def entry(clock: FakeClock, key: str, value: object = None, ttl: float = 60) -> Any:
    now = clock()
    payload = {"key": key} if value is None else value
    return ReferentialPayload("n", key, payload, now, now + timedelta(seconds=ttl), True)


class GatedStore(InMemoryStore):
    """An in-memory store that counts what it writes, and whose ``store_many`` waits for
    ``gate`` (open by default): closing the gate parks the worker inside a batch."""

    def __init__(self) -> None:
        super().__init__(max_entries=0)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.writes: Counter[str] = Counter()
        self.writers: dict[str, int] = {}
        self.batches: list[int] = []
        self._count_lock = threading.Lock()

    def hold(self) -> None:
        """Park the worker in its next batch."""
        self.gate.clear()
        self.entered.clear()

    def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT)
        with self._count_lock:
            self.batches.append(len(payloads))
            for p in payloads:
                self.writes[p.key] += 1
                self.writers[p.key] = threading.get_ident()
        super().store_many(payloads)


class FlakyStore(InMemoryStore):
    """Refuses to store entries whose key starts with ``bad``."""

    def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
        if any(p.key.startswith("bad") for p in payloads):
            raise OSError("disk full")
        super().store_many(payloads)


class PickyStore(InMemoryStore):
    """Cannot encode values of keys starting with ``odd``; refuses such a batch whole."""

    def store(self, payload: ReferentialPayload[Any]) -> None:
        if payload.key.startswith("odd"):
            raise SerializationError(f"cannot encode {payload.key}")
        super().store(payload)

    def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
        for p in payloads:
            if p.key.startswith("odd"):
                raise SerializationError(f"cannot encode {p.key}")
        super().store_many(payloads)


class RecordingMetrics(NullMetrics):
    def __init__(self) -> None:
        self.dropped = 0
        self.failed = 0
        self.sizes: list[int] = []

    def async_queue(self, size: int) -> None:
        self.sizes.append(size)

    def async_dropped(self, count: int = 1) -> None:
        self.dropped += count

    def async_failed(self, count: int = 1) -> None:
        self.failed += count


@pytest.fixture
def gated() -> GatedStore:
    return GatedStore()


@pytest.fixture
def metrics() -> RecordingMetrics:
    return RecordingMetrics()


@pytest.fixture
def closing() -> Iterator[list[AsyncWriteStore]]:
    """Stores to close at the end, the gate of their inner store opened first."""
    stores: list[AsyncWriteStore] = []
    yield stores
    for store in stores:
        if isinstance(store.inner, GatedStore):
            store.inner.gate.set()
        store.close()


def parked(
    closing: list[AsyncWriteStore], inner: GatedStore, clock: FakeClock, **settings: Any
) -> AsyncWriteStore:
    """A store whose worker is parked inside the batch of the write of key ``first``."""
    store = AsyncWriteStore(inner, **settings)
    closing.append(store)
    inner.hold()
    store.store(entry(clock, "first"))
    assert inner.entered.wait(WAIT)
    return store


def test_settings_are_validated() -> None:
    for kwargs, setting in [
        ({"queue_size": 0}, "queue_size"),
        ({"queue_size": -1}, "queue_size"),
        ({"queue_size": True}, "queue_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"rejection": "drop"}, "rejection"),
    ]:
        with pytest.raises(ConfigurationError, match=setting):
            AsyncWriteStore(InMemoryStore(), **kwargs)


def test_no_thread_starts_before_the_first_write(
    clock: FakeClock, closing: list[AsyncWriteStore]
) -> None:
    before = {t.ident for t in threading.enumerate()}
    store = AsyncWriteStore(InMemoryStore())
    closing.append(store)
    store.find("n", "k")
    store.find_all("n")
    assert store.flush()
    assert {t.ident for t in threading.enumerate()} == before
    store.store(entry(clock, "k"))
    assert store.flush(WAIT)
    started = [t for t in threading.enumerate() if t.ident not in before]
    assert [t.name for t in started] == ["failover-async-writes"]
    assert started[0].daemon


def test_500_concurrent_writes_land_exactly_once(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = AsyncWriteStore(gated, batch_size=64)
    closing.append(store)
    start = threading.Barrier(10)

    def write(t: int) -> None:
        start.wait()
        for i in range(50):
            store.store(entry(clock, f"t{t}-{i}"))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(10)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert store.flush(WAIT)
    assert len(gated.writes) == 500
    assert set(gated.writes.values()) == {1}
    assert len(gated.find_all("n")) == 500
    assert max(gated.batches) <= 64


def test_batches_hold_at_most_batch_size_writes(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = parked(closing, gated, clock, batch_size=4)
    store.store_many([entry(clock, f"k{i}") for i in range(10)])
    gated.gate.set()
    assert store.flush(WAIT)
    assert gated.batches == [1, 4, 4, 2]


@pytest.mark.parametrize("last", ["delete", "store"])
def test_the_last_write_of_a_key_wins(
    last: str, clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    gated.store(entry(clock, "k", {"v": 0}))
    store = parked(closing, gated, clock)
    if last == "delete":
        store.store(entry(clock, "k", {"v": 1}))
        store.delete("n", "k")
    else:
        store.delete("n", "k")
        store.store(entry(clock, "k", {"v": 2}))
    gated.gate.set()
    assert store.flush(WAIT)
    found = gated.find("n", "k")
    if last == "delete":
        assert found is None
    else:
        assert found is not None
        assert found.payload == {"v": 2}


def test_a_write_superseded_while_queued_is_skipped(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = parked(closing, gated, clock)
    for v in range(5):
        store.store(entry(clock, "k", {"v": v}))
    gated.gate.set()
    assert store.flush(WAIT)
    assert gated.writes["k"] == 1
    found = gated.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 4}


def test_read_your_writes_while_queued(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    gated.store(entry(clock, "old", {"v": "stored"}))
    store = parked(closing, gated, clock)
    store.store(entry(clock, "k", {"v": 1}))
    store.store_many([entry(clock, "m1"), entry(clock, "m2")])
    store.delete("n", "old")
    assert gated.find("n", "k") is None  # not written yet: the reads below see the queue
    found = store.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 1}
    assert store.find("n", "old") is None
    assert sorted(store.find_many("n", ["k", "m1", "old", "absent"])) == ["k", "m1"]
    assert sorted(p.key for p in store.find_all("n")) == ["first", "k", "m1", "m2"]
    assert store.queued == 4
    gated.gate.set()
    assert store.flush(WAIT)
    assert sorted(p.key for p in store.find_all("n")) == ["first", "k", "m1", "m2"]
    assert store.find("n", "old") is None


def test_flush_times_out_while_the_worker_is_blocked(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = parked(closing, gated, clock)
    assert store.flush(timeout=0.01) is False
    gated.gate.set()
    assert store.flush(timeout=WAIT) is True
    assert gated.find("n", "first") is not None


def test_discard_counts_and_warns_once_per_burst(
    clock: FakeClock,
    gated: GatedStore,
    metrics: RecordingMetrics,
    closing: list[AsyncWriteStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "failover")
    store = parked(closing, gated, clock, queue_size=2, batch_size=1, metrics=metrics)
    store.store(entry(clock, "q1"))
    store.store(entry(clock, "q2"))
    store.store(entry(clock, "dropped1"))
    store.store_many([entry(clock, "dropped2"), entry(clock, "dropped3")])
    assert metrics.dropped == 3
    assert store.find("n", "dropped1") is None  # a discarded write is not seen either
    gated.gate.set()
    assert store.flush(WAIT)
    assert sorted(gated.writes) == ["first", "q1", "q2"]
    warnings = [r for r in caplog.records if "discarding" in r.getMessage()]
    assert len(warnings) == 1

    # The queue drained: the next burst warns again.
    gated.hold()
    store.store(entry(clock, "second"))
    assert gated.entered.wait(WAIT)
    store.store_many([entry(clock, "q3"), entry(clock, "q4")])
    store.store(entry(clock, "dropped4"))
    gated.gate.set()
    assert store.flush(WAIT)
    assert metrics.dropped == 4
    assert len([r for r in caplog.records if "discarding" in r.getMessage()]) == 2


class SignallingLock:
    """A lock that tells when a second thread starts waiting for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_caller_runs_writes_on_the_callers_thread(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = AsyncWriteStore(gated, queue_size=1, batch_size=1, rejection="caller_runs")
    closing.append(store)
    io_lock = store._q.io_lock = SignallingLock()  # type: ignore[assignment]
    gated.hold()
    store.store(entry(clock, "first"))
    assert gated.entered.wait(WAIT)
    store.store(entry(clock, "j"))  # fills the queue

    # The queue is full: this write is made on the caller's thread, which first waits for the
    # batch being written (writes never overtake the one being made).
    caller = threading.Thread(target=store.store, args=(entry(clock, "k", {"v": "new"}),))
    caller.start()
    assert io_lock.contended.wait(WAIT)
    gated.gate.set()
    caller.join(WAIT)
    assert store.flush(WAIT)
    assert gated.writers["k"] == caller.ident
    found = gated.find("n", "k")
    assert found is not None
    assert found.payload == {"v": "new"}
    assert gated.writes["k"] == 1


def test_a_newer_write_takes_the_place_of_the_queued_one(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    """A hot key costs one queued write, not one per call: a full queue still takes it, on
    the worker's thread, and only the newest is written."""
    store = parked(closing, gated, clock, queue_size=1, batch_size=1, rejection="caller_runs")
    for v in range(5):
        writer = threading.Thread(target=store.store, args=(entry(clock, "k", {"v": v}),))
        writer.start()
        writer.join(WAIT)
        assert not writer.is_alive()  # queued: the caller did not wait for the parked store
    assert len(store._q.queue) == 1
    gated.gate.set()
    assert store.flush(WAIT)
    found = gated.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 4}
    assert gated.writes["k"] == 1
    assert set(gated.writers.values()) == {store._q.worker.ident}  # type: ignore[union-attr]


def test_abort_raises_and_the_call_still_returns_its_live_result(
    clock: FakeClock, gated: GatedStore, caplog: pytest.LogCaptureFixture
) -> None:
    queue = AsyncWriteStore(gated, queue_size=1, batch_size=1, rejection="abort")
    engine = Failover(queue, clock=clock, metrics=False)
    assert isinstance(engine.store, CopyingStore)
    assert engine.store.inner is queue  # a queue given to the engine is not queued again

    @failover.failover("f", engine=engine)
    def f(x: int) -> dict[str, int]:
        return {"x": x}

    try:
        gated.hold()
        assert f(1) == {"x": 1}
        assert gated.entered.wait(WAIT)
        assert f(2) == {"x": 2}  # queued
        with pytest.raises(StoreError, match="queue is full"):
            queue.store(entry(clock, "direct"))
        caplog.set_level(logging.WARNING, "failover")
        assert f(3) == {"x": 3}  # refused by the queue: logged, and the caller gets its result
        assert any("storing the live result failed" in r.getMessage() for r in caplog.records)
        assert isinstance(caplog.records[-1].exc_info[1], StoreError)  # type: ignore[index]
    finally:
        gated.gate.set()
        engine.close()
    assert len(gated.writes) == 2


def test_a_failing_inner_store_is_counted_and_the_worker_survives(
    clock: FakeClock, metrics: RecordingMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "failover")
    inner = FlakyStore()
    store = AsyncWriteStore(inner, batch_size=1, metrics=metrics)
    try:
        for key in ("good1", "bad1", "good2", "bad2"):
            store.store(entry(clock, key))
        assert store.flush(WAIT)
        assert metrics.failed == 2
        assert any("queued entries failed" in r.getMessage() for r in caplog.records)
        assert store.find("n", "bad1") is None  # reads do not show what was not stored
        store.store(entry(clock, "good3"))
        assert store.flush(WAIT)
        assert sorted(p.key for p in inner.find_all("n")) == ["good1", "good2", "good3"]
    finally:
        store.close()


def test_a_value_that_cannot_be_encoded_fails_alone(
    clock: FakeClock, metrics: RecordingMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "failover")
    inner = PickyStore()
    store = AsyncWriteStore(inner, metrics=metrics)
    try:
        store.store_many([entry(clock, "a"), entry(clock, "odd"), entry(clock, "b")])
        assert store.flush(WAIT)
        assert metrics.failed == 1
        assert sorted(p.key for p in inner.find_all("n")) == ["a", "b"]
        assert any("cannot encode odd" in r.getMessage() for r in caplog.records)
    finally:
        store.close()


class Opaque:
    """Nothing a JSON store can encode (an HTTP response object, say)."""


def test_a_result_the_store_refuses_is_logged_once_then_not_queued_again(
    tmp_path: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import CollectorRegistry

    import failover

    registry = CollectorRegistry()
    eng = failover.Failover(
        f"sqlite:///{tmp_path}/f.db",
        clock=clock,
        metrics=registry,
        async_writes=True,
        store_timeout=WAIT,  # a loaded host's slow write, retried, is not what is logged here
    )
    answers = Opaque()

    @failover.failover("opaque", engine=eng)
    def fetch(key: str):  # type: ignore[no-untyped-def]  # no annotation: found at call time
        return answers if key != "plain" else {"plain": True}

    with caplog.at_level(logging.DEBUG, "failover"):
        assert fetch("a") is answers
        assert eng.flush(WAIT)  # the queue met the refusal
        for key in ("b", "c", "d"):
            assert fetch(key) is answers  # returned live every time, no longer queued
        assert fetch("plain") == {"plain": True}  # another type of the same failover: stored
        assert eng.flush(WAIT)
    refusals = [r for r in caplog.records if "cannot encode" in r.getMessage()]
    assert len(refusals) == 1  # logged once, not on every call
    assert "Opaque" in refusals[0].getMessage()
    assert "'opaque'" in refusals[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    assert registry.get_sample_value("failover_async_writes_failed_total") == 1
    assert fetch.peek("plain") is not None
    assert fetch.peek("b") is None
    eng.close()


def test_clean_by_expiry_counts_writes_still_queued(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = parked(closing, gated, clock)
    store.store_many([entry(clock, "short1", ttl=10), entry(clock, "short2", ttl=10)])
    store.store(entry(clock, "long", ttl=100))
    gated.gate.set()
    assert store.clean_by_expiry(clock.advance(50)) == 2
    assert sorted(p.key for p in store.find_all("n")) == ["first", "long"]


def test_close_flushes_stops_the_worker_then_writes_in_place(clock: FakeClock) -> None:
    inner = GatedStore()
    store = AsyncWriteStore(inner)
    inner.hold()
    store.store(entry(clock, "a"))
    assert inner.entered.wait(WAIT)
    store.store(entry(clock, "b"))
    worker = store._q.worker
    assert worker is not None
    inner.gate.set()
    store.close()
    assert not worker.is_alive()
    assert sorted(inner.writes) == ["a", "b"]
    store.store(entry(clock, "after"))  # no worker any more: written on this thread
    assert inner.writers["after"] == threading.get_ident()


def test_the_worker_runs_in_a_copy_of_the_starting_context(
    clock: FakeClock, closing: list[AsyncWriteStore]
) -> None:
    seen: list[str | None] = []

    class Recording(InMemoryStore):
        def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
            seen.append(failover.current_tenant())
            super().store_many(payloads)

    store = AsyncWriteStore(Recording())
    closing.append(store)
    with failover.tenant("acme"):
        store.store(entry(clock, "k"))
    assert store.flush(WAIT)
    assert seen == ["acme"]


def test_a_store_dropped_without_close_is_collected_and_its_worker_ends(
    clock: FakeClock,
) -> None:
    inner = InMemoryStore()
    store = AsyncWriteStore(inner)
    store.store(entry(clock, "k"))
    worker = store._q.worker
    assert worker is not None
    ref = weakref.ref(store)
    del store
    gc.collect()
    assert ref() is None
    worker.join(WAIT)
    assert not worker.is_alive()
    assert inner.find("n", "k") is not None  # what was queued was written first


def test_queued_writes_are_flushed_at_interpreter_exit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    script = textwrap.dedent(
        """
        import atexit, sys, threading
        from datetime import UTC, datetime, timedelta
        from failover import ReferentialPayload
        from failover.stores import AsyncWriteStore
        from failover.stores.backends.sql import SqlStore

        class Gated(SqlStore):
            gate = threading.Event()

            def store_many(self, payloads):
                assert self.gate.wait(30)
                super().store_many(payloads)

        store = AsyncWriteStore(Gated(sys.argv[1]), batch_size=10)
        now = datetime.now(UTC)
        for i in range(100):
            store.store(ReferentialPayload("n", f"k{i}", {"i": i}, now, now + timedelta(hours=1), True))
        # atexit runs the last hook registered first: this one opens the gate before the store's
        # own hook flushes, so everything is still queued when the interpreter starts exiting.
        atexit.register(Gated.gate.set)
        print(store.queued)
        """  # noqa: E501 - one line of the script
    )
    done = subprocess.run(
        [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 90  # the worker holds the first batch of 10, at most
    reader = SqlStore(url)
    assert len(reader.find_all("n")) == 100
    reader.close()


class BrokenQueueGauge(NullMetrics):
    """Metrics whose queue gauge raises, as a custom metrics object lacking the method does."""

    def async_queue(self, size: int) -> None:
        raise AttributeError("async_queue")


def test_a_failing_metric_does_not_stop_the_worker(clock: FakeClock) -> None:
    inner = InMemoryStore()
    store = AsyncWriteStore(inner, metrics=BrokenQueueGauge())
    try:
        store.store(entry(clock, "a"))
        assert store.flush(WAIT)
        store.store(entry(clock, "b"))  # a worker ended by the metric would never write this
        assert store.flush(WAIT)
        assert inner.find("n", "b") is not None
    finally:
        store._q.stop(WAIT)  # not close(): with a dead worker, it would wait forever


class HeldLock:
    """A lock that holds back the thread named ``held``: it tells when that thread arrives, and
    lets it take the lock only once ``allow`` is set."""

    def __init__(self, held: str) -> None:
        self._lock = threading.Lock()
        self.held = held
        self.arrived = threading.Event()
        self.allow = threading.Event()

    def __enter__(self) -> None:
        if threading.current_thread().name == self.held:
            self.arrived.set()
            assert self.allow.wait(WAIT)
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_flush_waits_for_a_write_being_made_on_a_callers_thread(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    store = AsyncWriteStore(gated, queue_size=1, batch_size=1, rejection="caller_runs")
    closing.append(store)
    io_lock = store._q.io_lock = HeldLock("caller")  # type: ignore[assignment]
    gated.hold()
    store.store(entry(clock, "first"))
    assert gated.entered.wait(WAIT)
    store.store(entry(clock, "j"))  # queued: the queue is full now
    caller = threading.Thread(
        target=store.store, args=(entry(clock, "k", {"v": "new"}),), name="caller"
    )
    caller.start()
    try:
        assert io_lock.arrived.wait(WAIT)  # "new" is accepted (reads see it), not written yet
        gated.gate.set()
        q = store._q
        with q.lock:  # the worker wrote "first" and "j"
            assert q.progress.wait_for(lambda: q.handled >= 2, WAIT)
        found = store.find("n", "k")
        assert found is not None
        assert found.payload == {"v": "new"}
        assert gated.find("n", "k") is None
        assert store.flush(timeout=0) is False  # a write that reads already see is not written
    finally:
        io_lock.allow.set()
        caller.join(WAIT)
    assert store.flush(WAIT)
    found = gated.find("n", "k")
    assert found is not None
    assert found.payload == {"v": "new"}


def test_discard_never_drops_a_delete(
    clock: FakeClock, gated: GatedStore, metrics: RecordingMetrics, closing: list[AsyncWriteStore]
) -> None:
    """An invalidate() at a full queue must not be lost: the entry would be served again."""
    gated.store(entry(clock, "stale"))  # already in the inner store
    store = parked(closing, gated, clock, queue_size=1, batch_size=1, metrics=metrics)
    store.store(entry(clock, "q1"))  # the queue is full now
    deleted = threading.Event()

    def invalidate() -> None:
        store.delete("n", "stale")  # made on this thread, once the worker's batch is done
        deleted.set()

    th = threading.Thread(target=invalidate)
    th.start()
    store.store(entry(clock, "dropped"))
    gated.gate.set()
    th.join(WAIT)
    assert deleted.is_set()
    assert store.flush(WAIT)
    assert gated.find("n", "stale") is None
    assert store.find("n", "stale") is None
    assert metrics.dropped == 1  # the store, not the delete


# The worker thread dying of the BaseException is the point: pytest reports such threads.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_killed_by_a_base_exception_does_not_hang_flush(
    clock: FakeClock, closing: list[AsyncWriteStore], caplog: pytest.LogCaptureFixture
) -> None:
    class Fatal(InMemoryStore):
        fatal = True

        def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
            if self.fatal:
                self.fatal = False
                raise SystemExit("the store pulled the plug")  # once: it kills the worker
            super().store_many(payloads)

    store = AsyncWriteStore(Fatal())
    closing.append(store)
    store.store(entry(clock, "a"))
    store.store(entry(clock, "b"))
    worker = store._q.worker
    assert worker is not None
    worker.join(WAIT)
    assert not worker.is_alive()
    flusher = threading.Thread(target=store.flush, daemon=True)  # no timeout: it must return
    flusher.start()
    flusher.join(WAIT)
    assert not flusher.is_alive()
    store.store(entry(clock, "after"))  # the worker is gone: written on the caller's thread
    assert store.inner.find("n", "after") is not None


# -- failover_writes_total: queued, then written or failed -----------------------------------------


def _writes(registry: Any, name: str) -> dict[str, float]:
    from prometheus_client import CollectorRegistry

    assert isinstance(registry, CollectorRegistry)
    return {
        result: registry.get_sample_value("failover_writes_total", {"name": name, "result": result})
        or 0.0
        for result in ("queued", "written", "failed", "superseded")
    }


def test_queued_writes_are_counted_queued_then_written_or_failed(
    clock: FakeClock, gated: GatedStore, closing: list[AsyncWriteStore]
) -> None:
    from prometheus_client import CollectorRegistry

    from failover.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    store = parked(
        closing, gated, clock, queue_size=2, metrics=PrometheusMetrics.for_registry(registry)
    )
    store.store(entry(clock, "a", {"v": 1}))
    store.store(entry(clock, "a", {"v": 2}))  # takes the first one's place: that one is not written
    store.store(entry(clock, "b"))
    store.store(entry(clock, "c"))  # the queue is full (a and b): discarded
    # Counted queued as the worker takes them (the parked one), as a newer write of their key
    # takes their place (superseded), or as the queue drops them.
    assert _writes(registry, "n") == {"queued": 3, "written": 0, "failed": 1, "superseded": 1}
    gated.gate.set()
    assert store.flush(WAIT)
    # Every write handed to the queue ended written, superseded or failed: the counts add up.
    assert _writes(registry, "n") == {"queued": 5, "written": 3, "failed": 1, "superseded": 1}
    found = gated.find("n", "a")
    assert found is not None
    assert found.payload == {"v": 2}


def test_an_engine_counts_its_queued_writes_once_each(tmp_path: Any, clock: FakeClock) -> None:
    from prometheus_client import CollectorRegistry

    import failover

    registry = CollectorRegistry()
    # A generous store deadline: a loaded host's write past the default 0.5 s would be retried
    # and counted so, not what is counted here.
    eng = failover.Failover(
        f"sqlite:///{tmp_path}/f.db",
        clock=clock,
        metrics=registry,
        async_writes=True,
        store_timeout=WAIT,
    )

    @failover.failover("rates", engine=eng)
    def rate(key: str):  # type: ignore[no-untyped-def]  # no annotation: refused at call time
        return Opaque() if key == "opaque" else {"key": key}

    for key in ("a", "b", "c", "opaque"):
        rate(key)
    assert eng.flush(WAIT)
    # Not counted twice (once by the caller, once by the queue): queued, then each written,
    # the result the store cannot encode failed.
    assert _writes(registry, "rates") == {"queued": 4, "written": 3, "failed": 1, "superseded": 0}
    eng.close()


@pytest.mark.parametrize("clear", ["name", "tag"])
def test_a_clear_does_not_count_an_entry_whose_delete_is_still_queued(
    clock: FakeClock, clear: str
) -> None:
    """An entry invalidated (its delete queued behind a write the worker is busy with) is gone
    for the caller: a clear of its name or of its tag does not count it among what it removed.
    An entry whose newer write is queued is still there for the caller: it is counted."""
    inner = GatedStore()
    store = AsyncWriteStore(inner)

    def tagged(key: str, value: int) -> ReferentialPayload[Any]:
        now = clock()
        return ReferentialPayload("n", key, value, now, now + timedelta(60), True, tags=("t",))

    try:
        inner.store_many([tagged("a", 1), tagged("b", 1)])
        inner.hold()
        store.store(entry(clock, "c"))
        assert inner.entered.wait(WAIT)  # the worker is parked in that write
        store.delete("n", "a")  # queued behind it
        clock.advance(1)
        store.store(tagged("b", 2))  # a newer b, queued too
        assert store.find("n", "a") is None
        removed = store.delete_all("n") if clear == "name" else store.delete_tagged("t")
        assert removed == 1  # b: a was gone already
        inner.gate.set()
        assert store.flush(WAIT)
        left = [p.key for p in inner.find_all("n")]
        assert left == ([] if clear == "name" else ["c"])  # c carries no tag
    finally:
        inner.gate.set()
        store.close()
