"""Store-chain benchmark: what a successful decorated call costs its caller on a SQLite store,
with async writes on and off, against the in-memory store and a plain call; what a recovery
costs when its entry is read from the SQLite file; and how fast the async-writes worker writes.

Run with ``.venv/bin/python bench/store_chain.py`` (``--quick`` for a short run). The decorated
function is synchronous and returns a small dict; calls cycle over 1,000 distinct keys. A run is
``--calls`` calls in a row, timed on the caller's thread (the worker thread, which competes for
the GIL, is part of what the caller pays); the best of ``--repeat`` runs is shown. Before each
run the queue is flushed, and the writes discarded at a full queue are counted: a figure bought
with discarded writes would not be a fair one.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy

import failover
from failover import ReferentialPayload
from failover.metrics import NullMetrics
from failover.stores import AsyncWriteStore, FailoverStore, InMemoryStore
from failover.stores.backends.sql import SqlStore

KEYS = [f"K{i:04d}" for i in range(1_000)]


def country(code: str) -> dict[str, str]:
    return {"code": code, "name": "France", "currency": "EUR"}


class Drops(NullMetrics):
    """Counts what the queue discards."""

    def __init__(self) -> None:
        self.dropped = 0

    def async_dropped(self, count: int = 1) -> None:
        self.dropped += count


def best_ns(fn: Callable[[str], Any], calls: int, repeat: int, before: Callable[[], Any]) -> float:
    """Best per-call time over ``repeat`` runs of ``calls`` calls; ``before`` runs untimed."""
    best = float("inf")
    keys = itertools.cycle(KEYS)
    for _ in range(repeat):
        batch = [next(keys) for _ in range(calls)]
        before()
        start = time.perf_counter_ns()
        for k in batch:
            fn(k)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def decorated(store: FailoverStore | str, async_writes: bool | None) -> Any:
    engine = failover.Failover(store, async_writes=async_writes, metrics=False)
    return engine, failover.failover("country", engine=engine)(country)


def recover_ns(folder: Path, calls: int, repeat: int) -> float:
    """`best_ns` of a recovery: the upstream down, each call's entry read from a SQLite file
    (a point read; no near copy in process memory)."""
    down: list[bool] = []

    def flaky(code: str) -> dict[str, str]:
        if down:
            raise ConnectionError(code)
        return country(code)

    engine = failover.Failover(
        SqlStore(f"sqlite:///{folder / 'recover.db'}"), async_writes=False, metrics=False
    )
    fn = failover.failover("country", engine=engine)(flaky)
    for k in KEYS:
        fn(k)
    down.append(True)
    try:
        return best_ns(fn, calls, repeat, lambda: None)
    finally:
        engine.close()


def worker_rate(folder: Path, total: int, batch_size: int) -> float:
    """Payloads per second the worker writes to SQLite, from a full queue to an empty one."""
    store = AsyncWriteStore(
        SqlStore(f"sqlite:///{folder / 'rate.db'}"), queue_size=total, batch_size=batch_size
    )
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    payloads = [
        ReferentialPayload("rate", f"K{i:07d}", country(f"K{i}"), now, later, True)
        for i in range(total)
    ]
    store.store(payloads[0])
    store.flush()  # the worker thread and the table exist: only writing is timed
    start = time.perf_counter()
    store.store_many(payloads)
    store.flush()
    seconds = time.perf_counter() - start
    store.close()
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5_000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs; the best is shown")
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    calls, repeat = (1_000, 3) if args.quick else (args.calls, args.repeat)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows: list[tuple[str, float]] = []
        rows.append(("plain call", best_ns(country, calls, repeat, lambda: None)))

        engine, fn = decorated(InMemoryStore(), None)
        rows.append(("@failover, memory", best_ns(fn, calls, repeat, lambda: None)))
        engine.close()

        drops = Drops()
        queue = AsyncWriteStore(SqlStore(f"sqlite:///{folder / 'on.db'}"), metrics=drops)
        engine, fn = decorated(queue, None)
        rows.append(
            ("@failover, SQLite, async writes on", best_ns(fn, calls, repeat, engine.flush))
        )
        engine.close()

        engine, fn = decorated(f"sqlite:///{folder / 'off.db'}", False)
        off_calls = max(calls // 10, 100)  # a commit per call: fewer calls, same precision
        rows.append(
            ("@failover, SQLite, async writes off", best_ns(fn, off_calls, repeat, engine.flush))
        )
        engine.close()

        rows.append(("@failover recover, SQLite point read", recover_ns(folder, off_calls, repeat)))

        # Sustained: many more calls than the queue holds, timed until the last write is done.
        drops_sustained = Drops()
        queue = AsyncWriteStore(
            SqlStore(f"sqlite:///{folder / 'sustained.db'}"), metrics=drops_sustained
        )
        engine, fn = decorated(queue, None)
        sustained_calls = 10 * calls
        start = time.perf_counter_ns()
        for k, _ in zip(itertools.cycle(KEYS), range(sustained_calls), strict=False):
            fn(k)
        caller_ns = (time.perf_counter_ns() - start) / sustained_calls
        engine.flush()
        drained_ns = (time.perf_counter_ns() - start) / sustained_calls
        engine.close()

        rate = worker_rate(folder, 20_000 if not args.quick else 5_000, 500)

    memory = rows[1][1]
    plain = rows[0][1]
    print(
        f"Python {platform.python_version()} ({sys.platform}), SQLAlchemy "
        f"{sqlalchemy.__version__}, SQLite {__import__('sqlite3').sqlite_version}; "
        f"{calls} calls per run, best of {repeat}\n"
    )
    print("| call | ns per call | vs memory | vs plain |")
    print("|---|---:|---:|---:|")
    for label, ns in rows:
        print(f"| {label} | {ns:,.0f} | {ns / memory:.2f} | {ns / plain:.1f} |")
    print(f"\nwrites discarded at a full queue during the async runs: {drops.dropped}")
    print(
        f"sustained, {sustained_calls:,} calls in a row, async writes on: {caller_ns:,.0f} ns "
        f"per call for the caller ({caller_ns / memory:.2f}x memory), {drained_ns:,.0f} ns per "
        f"call until the queue was drained; {drops_sustained.dropped} writes discarded"
    )
    print(f"async-writes worker, SQLite, batches of 500: {rate:,.0f} payloads/s")
    ratio = rows[2][1] / memory
    verdict = "meets" if ratio <= 3 else "MISSES"
    print(f"bar: SQLite with async writes at most 3x memory: {ratio:.2f}x, {verdict} it")


if __name__ == "__main__":
    main()
