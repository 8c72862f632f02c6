"""What publishing health (``Failover(publish_health=...)``) costs, in one process and one run.

- A decorated call on a SQLite-file engine, with publishing off and with publishing every 10 ms
  (1,500 times the default rate, so that the publisher thread is always busy beside the calls):
  nanoseconds per call, and each as a ratio to a plain call measured in the same run.
- One publish (the engine's health read, the row encoded and written) with 20 failovers, and one
  read of 50 processes' rows (what the store dashboard does on each refresh), on the SQLite file.

Run with ``.venv/bin/python bench/publish_health.py``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import failover
from failover import Failover
from failover.engine import utcnow
from failover.stores.backends.sql import SqlStore
from failover.stores.health_rows import FailoverSummary, ProcessHealth

CALLS = 200_000
KEYS = [f"K{i:04d}" for i in range(1_000)]


def country(code: str) -> dict[str, str]:
    return {"code": code, "name": "France", "currency": "EUR"}


def per_call(fn: Callable[[str], Any], repeats: int = 5) -> float:
    """Nanoseconds per call, best of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter_ns()
        for i in range(CALLS):
            fn(KEYS[i % 1000])
        best = min(best, (time.perf_counter_ns() - started) / CALLS)
    return best


def engine_call(folder: Path, name: str, publish: object) -> tuple[Failover, Callable[..., Any]]:
    engine = Failover(
        store=f"sqlite:///{folder / name}.db",
        metrics=False,
        publish_health=publish,
        store_interval="1h",  # stored once per key: the call's own work, not the database's
    )
    return engine, failover.failover("countries", engine=engine, ttl="1d")(country)


def timed_ms(fn: Callable[[], Any], repeats: int = 200) -> float:
    """Median milliseconds of ``fn``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    plain = per_call(country)
    off, call_off = engine_call(folder, "off", False)
    on, call_on = engine_call(folder, "on", timedelta(milliseconds=10))
    for call in (call_off, call_on):
        for key in KEYS:
            call(key)
    off.flush(30)
    on.flush(30)
    # Interleaved, best of each: the machine's load drifts between the two otherwise.
    ns_off = ns_on = float("inf")
    for _ in range(5):
        ns_off = min(ns_off, per_call(call_off, 1))
        ns_on = min(ns_on, per_call(call_on, 1))
    assert on.publisher is not None
    for i in range(19):
        failover.failover(f"n{i}", engine=on, ttl="1d")(country)("FR")
    publish = timed_ms(on.publisher.publish)
    off.close()
    on.close()

    store = SqlStore(f"sqlite:///{folder / 'rows.db'}")
    now = utcnow()
    summaries = {f"n{i}": FailoverSummary("up", live=100, stale=3) for i in range(20)}
    for p in range(50):
        row = ProcessHealth(
            f"p{p}", "web", p, now, now, now + timedelta(minutes=1), "up", 60, summaries
        )
        store.publish_health(row)
    read = timed_ms(lambda: store.health_rows(now))
    store.close()

    version = sys.version.split()[0]
    print(f"python {version}, {CALLS:,} calls over 1,000 keys, best of 5, interleaved")
    print("| | ns per call | x plain call |")
    print("|---|---:|---:|")
    print(f"| plain call | {plain:,.0f} | 1.0 |")
    print(f"| failover, SQLite file, publish_health off | {ns_off:,.0f} | {ns_off / plain:.1f} |")
    print(
        f"| failover, SQLite file, publish_health every 10 ms | {ns_on:,.0f} | "
        f"{ns_on / plain:.1f} |"
    )
    print(f"\none publish (20 failovers), SQLite file: {publish:.2f} ms (median of 200)")
    print(f"one read of 50 processes' rows (20 failovers each): {read:.2f} ms (median of 200)")


if __name__ == "__main__":
    main()
