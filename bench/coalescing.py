"""The write rate a fleet puts on a shared store, with and without ``store_interval``.

Simulated, so that it runs anywhere in seconds: ``--threads`` threads (the fleet's workers) call
one failover over ``--keys`` keys as fast as they can, on a shared fake clock that moves
``--tick-ms`` milliseconds at every read (so the call rate is about 1,000 / tick-ms calls per
simulated second), for ``--seconds`` simulated seconds. A counting in-memory store stands in for
the shared store. Prints the calls, the writes that reached the store, and the write rate, per
interval.

    .venv/bin/python bench/coalescing.py
"""

from __future__ import annotations

import argparse
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import failover


class TickingClock:
    """A shared clock moving ``tick`` at every read: the calls make simulated time pass."""

    def __init__(self, tick: timedelta) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self.tick = tick
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self.now += self.tick
            return self.now


class CountingStore(failover.InMemoryStore):
    """The shared store: counts the writes that reach it."""

    def __init__(self) -> None:
        super().__init__(max_entries=0)
        self.writes = 0
        self._count = threading.Lock()

    def store(self, payload: Any) -> None:
        with self._count:
            self.writes += 1
        super().store(payload)


def run(
    interval: str | None, threads: int, keys: int, seconds: float, tick_ms: float
) -> tuple[int, int]:
    clock = TickingClock(timedelta(milliseconds=tick_ms))
    store = CountingStore()
    engine = failover.Failover(store, clock=clock, metrics=False, store_interval=interval)
    rate = failover.failover("bench.fleet", engine=engine)(lambda key: {"key": key, "rate": 1.08})
    end = clock.now + timedelta(seconds=seconds)
    calls = [0] * threads

    def worker(i: int) -> None:
        # Every worker goes over every key (from its own offset), as a fleet's callers do.
        k = i * keys // threads
        while clock.now < end:
            rate(k % keys)
            k += 1
            calls[i] += 1

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    engine.close()
    return sum(calls), store.writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0, help="simulated seconds")
    parser.add_argument("--tick-ms", type=float, default=1.0)
    args = parser.parse_args()
    print(
        f"{args.threads} threads, {args.keys} keys, {args.seconds:g} simulated seconds, "
        f"a clock read every {args.tick_ms:g} ms of simulated time\n"
    )
    print(
        "| store_interval | calls | writes | writes / s | writes / call | bound (keys / interval) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for interval, seconds in ((None, None), ("1s", 1.0), ("10s", 10.0)):
        calls, writes = run(interval, args.threads, args.keys, args.seconds, args.tick_ms)
        bound = "—" if seconds is None else f"{args.keys / seconds:,.0f} / s"
        print(
            f"| {interval or 'off'} | {calls:,} | {writes:,} | {writes / args.seconds:,.1f} | "
            f"{writes / calls:.3f} | {bound} |"
        )


if __name__ == "__main__":
    main()
