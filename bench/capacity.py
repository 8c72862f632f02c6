"""Capacity model of a fleet, checked by a simulation against a real Redis and PostgreSQL.

Run with ``.venv/bin/python bench/capacity.py`` (``--help`` for the knobs). A throwaway
``redis-server`` and PostgreSQL server on loopback are started as the test suite starts them.

The model (docs/scale.md, "Capacity model"): P processes each make c calls a second over K
distinct keys (uniformly at random), entries live a TTL T, and write coalescing keeps one key
from being stored twice within ``store_interval`` I by one process.

- calm (the upstream answers): every call is live, none reads the store. A process stores a key
  at its first call past I since its last store of it: calls to one key arrive c/K a second, so
  the stores of one key are I + K/c apart, and the fleet writes
  ``W = P * K / (I + K / c)`` entries a second (``P * c`` without coalescing, I = 0);
- outage (the upstream fails): every call is a recovery, one key read each (concurrent ones
  batched into one ``find_many``): the fleet reads ``R = P * c`` keys a second and writes none;
  recoveries find their key while its last store is younger than T: the fleet refreshes a key
  every (I + K/c) / P seconds, so over an outage of D seconds a share of about
  ``(T - (I + K/c) / P) / D`` of the recoveries find it (all of them when that exceeds 1).

The simulation runs P engines in one process (each its own coalescing memo and async-writes
queue, as P processes have), each driven by a thread at c calls a second, against one shared
store, for a calm phase then an outage phase, each bounded in time. A counting layer under each
engine's queue counts the entries written and the keys read; writes are measured once the
coalescing memos are warm (past I + K/c). It also measures what the store sustains: batched
writes (500 per batch, as the async-writes worker sends) and ``find_many`` of 100 keys, from 4
threads, for a few seconds each. Prints a markdown table: model vs measured.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/redis_server.py and tests/postgres.py start the servers

import failover  # noqa: E402
from failover import ReferentialPayload  # noqa: E402
from failover.stores.base import Payload  # noqa: E402


def model_write_rate(processes: int, rate: float, keys: int, interval: float) -> float:
    """Entries a second the fleet writes in calm (see the module's docstring)."""
    return processes * keys / (interval + keys / rate)


def model_hit_ratio(
    processes: int, rate: float, keys: int, interval: float, ttl: float, outage: float
) -> float:
    """The share of an outage's recoveries (spread evenly over ``outage`` seconds) that find
    their key: a key was last stored some (I + K/c) / P seconds before the outage began, on
    average, and is found until T after that."""
    age = (interval + keys / rate) / processes
    return min(1.0, max(0.0, (ttl - age) / outage))


def model_read_rate(processes: int, rate: float) -> float:
    """Keys a second the fleet reads in an outage."""
    return processes * rate


class Counted:
    """A pass-through store counting the entries written and the keys read."""

    def __init__(self, inner: Any, counts: dict[str, int], lock: threading.Lock) -> None:
        self.inner, self.counts, self.lock = inner, counts, lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def store(self, payload: Payload) -> None:
        self.store_many([payload])

    def store_many(self, payloads: Sequence[Payload]) -> None:
        self.inner.store_many(payloads)
        with self.lock:
            self.counts["written"] += len(payloads)

    def find(self, name: str, key: str) -> Any:
        with self.lock:
            self.counts["read"] += 1
            self.counts["lookups"] += 1
        return self.inner.find(name, key)

    def find_many(self, name: str, keys: Any) -> Any:
        wanted = list(keys)
        with self.lock:
            self.counts["read"] += len(wanted)
            self.counts["lookups"] += 1
        return self.inner.find_many(name, wanted)

    def close(self) -> None:
        return None  # the shared store is closed once, by the simulation


class Fleet:
    """P engines ("processes") on one shared store, each called by its own paced thread."""

    def __init__(
        self, make_store: Callable[[], Any], processes: int, keys: int, interval: float, ttl: float
    ) -> None:
        self.store = make_store()
        self.counts = {"written": 0, "read": 0, "lookups": 0, "calls": 0, "hits": 0}
        self.lock = threading.Lock()
        self.down = False
        self.name = f"cap.{uuid.uuid4().hex[:8]}"
        self.keys = [f"K{i:05d}" for i in range(keys)]
        self.engines: list[failover.Failover] = []
        self.functions: list[Callable[[str], Any]] = []
        for _ in range(processes):
            engine = failover.Failover(
                Counted(self.store, self.counts, self.lock),
                metrics=False,
                store_interval=interval or None,
            )
            self.engines.append(engine)
            self.functions.append(self._decorate(engine, ttl))

    def _decorate(self, engine: failover.Failover, ttl: float) -> Callable[[str], Any]:
        fleet = self

        @failover.failover(self.name, ttl=timedelta(seconds=ttl), engine=engine)
        def price(sku: str) -> dict[str, Any]:
            if fleet.down:
                raise ConnectionError("upstream down")
            return {"sku": sku, "price": 9.99, "currency": "EUR"}

        return price

    def run(self, rate: float, seconds: float) -> None:
        """Every process calls ``rate`` times a second (random keys) for ``seconds``."""
        stop_at = time.monotonic() + seconds

        def process(fn: Callable[[str], Any], seed: int) -> None:
            pick = random.Random(seed).choice
            keys, period = self.keys, 1.0 / rate
            due = time.monotonic()
            calls = hits = 0
            while True:
                now = time.monotonic()
                if now >= stop_at:
                    break
                if now < due:
                    time.sleep(due - now)
                due += period
                try:
                    fn(pick(keys))
                    hits += 1
                except Exception:  # a recovery that found nothing: the upstream's error
                    pass
                calls += 1
            with self.lock:
                self.counts["calls"] += calls
                self.counts["hits"] += hits

        threads = [
            threading.Thread(target=process, args=(fn, i)) for i, fn in enumerate(self.functions)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
        self.store.close()


def simulate(
    make_store: Callable[[], Any],
    processes: int,
    rate: float,
    keys: int,
    interval: float,
    ttl: float,
    seconds: float,
) -> dict[str, float]:
    """Calm then outage; the measured rates."""
    fleet = Fleet(make_store, processes, keys, interval, ttl)
    try:
        warm = interval + keys / rate  # until every memo is past its first store of each key
        fleet.run(rate, warm)
        for engine in fleet.engines:
            engine.flush(timeout=60)
        before, start = fleet.snapshot(), time.monotonic()
        fleet.run(rate, seconds)
        for engine in fleet.engines:
            engine.flush(timeout=60)
        calm, elapsed = fleet.snapshot(), time.monotonic() - start
        fleet.down = True
        start = time.monotonic()
        fleet.run(rate, seconds)
        outage, out_elapsed = fleet.snapshot(), time.monotonic() - start
    finally:
        fleet.close()
    calm_calls = calm["calls"] - before["calls"]
    out_calls = outage["calls"] - calm["calls"]
    return {
        "call_rate": calm_calls / elapsed / processes,
        "calm_writes": (calm["written"] - before["written"]) / elapsed,
        "calm_reads": (calm["read"] - before["read"]) / elapsed,
        "outage_reads": (outage["read"] - calm["read"]) / out_elapsed,
        "outage_lookups": (outage["lookups"] - calm["lookups"]) / out_elapsed,
        "outage_writes": (outage["written"] - calm["written"]) / out_elapsed,
        "outage_call_rate": out_calls / out_elapsed / processes,
        "hit_ratio": (outage["hits"] - calm["hits"]) / max(out_calls, 1),
    }


def sustained(make_store: Callable[[], Any], seconds: float = 3.0) -> tuple[float, float]:
    """Entries a second the store writes in batches of 500, and keys a second it reads with
    ``find_many`` of 100, from 4 threads."""
    store = make_store()
    name = f"sus.{uuid.uuid4().hex[:8]}"
    now = failover.utcnow() if hasattr(failover, "utcnow") else None
    from datetime import UTC, datetime

    now = now or datetime.now(UTC)
    later = now + timedelta(minutes=10)
    payload = {"sku": "x", "price": 9.99, "currency": "EUR"}

    def batch(start: int) -> list[ReferentialPayload[Any]]:
        return [
            ReferentialPayload(name, f"K{start + i:06d}", payload, now, later, True)
            for i in range(500)
        ]

    def hammer(work: Callable[[int], int]) -> float:
        done = [0]
        lock = threading.Lock()
        stop_at = time.monotonic() + seconds

        def worker(w: int) -> None:
            n = i = 0
            while time.monotonic() < stop_at:
                n += work(w * 1_000_000 + i)
                i += 1
            with lock:
                done[0] += n

        start = time.monotonic()
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return done[0] / (time.monotonic() - start)

    try:
        store.store_many(batch(0) + batch(500))  # keys K000000..K000999 for the reads
        writes = hammer(lambda i: store.store_many(batch((i % 200) * 500)) or 500)
        keys = [f"K{i:06d}" for i in range(1000)]
        reads = hammer(lambda i: len(store.find_many(name, keys[(i % 10) * 100 :][:100])) or 100)
    finally:
        store.close()
    return writes, reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=40)
    parser.add_argument("--rate", type=float, default=100.0, help="calls a second, per process")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=5.0, help="store_interval, seconds")
    parser.add_argument("--ttl", type=float, default=600.0)
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase's length")
    args = parser.parse_args()

    from failover.stores.backends.redis import RedisStore
    from failover.stores.backends.sql import SqlStore
    from tests import postgres, redis_server

    stores: dict[str, Callable[[], Any]] = {
        "Redis": lambda: RedisStore(redis_server.server().url, prefix=redis_server.unique_prefix()),
        "PostgreSQL": lambda: SqlStore(
            postgres.server().url, table_prefix=postgres.unique_prefix()
        ),
    }
    p, c, k, i, t = args.processes, args.rate, args.keys, args.interval, args.ttl
    print(
        f"P={p} processes, c={c:g} calls/s each, K={k} keys, store_interval={i:g} s, "
        f"TTL={t:g} s; phases of {args.seconds:g} s; {platform.python_version()}, "
        f"{platform.machine()}\n"
    )
    print("| store | measure | model | measured | measured / model |")
    print("|---|---|---:|---:|---:|")
    try:
        for label, make in stores.items():
            got = simulate(make, p, c, k, i, t, args.seconds)
            # The model at the call rate the simulated processes reached (the pacing may lag).
            write_model = model_write_rate(p, got["call_rate"], k, i)
            read_model = model_read_rate(p, got["outage_call_rate"])
            rows = [
                ("calls/s per process (calm)", c, got["call_rate"]),
                ("calm: writes/s", write_model, got["calm_writes"]),
                ("calm: reads/s", 0.0, got["calm_reads"]),
                ("outage: keys read/s", read_model, got["outage_reads"]),
                ("outage: reads/s (find, find_many)", read_model, got["outage_lookups"]),
                ("outage: writes/s", 0.0, got["outage_writes"]),
                (
                    "outage: recoveries that found their key",
                    model_hit_ratio(p, got["call_rate"], k, i, t, args.seconds),
                    got["hit_ratio"],
                ),
            ]
            for what, model, measured in rows:
                ratio = f"{measured / model:.2f}" if model else "-"
                shown = ".2f" if model <= 1 and measured <= 1 else ",.1f"
                print(f"| {label} | {what} | {model:{shown}} | {measured:{shown}} | {ratio} |")
            writes, reads = sustained(make)
            sustains = "sustains (4 threads):"
            print(f"| {label} | {sustains} writes/s, batches of 500 | | {writes:,.0f} | |")
            print(f"| {label} | {sustains} keys read/s, find_many of 100 | | {reads:,.0f} | |")
    finally:
        redis_server.stop()
        postgres.stop()


if __name__ == "__main__":
    main()
