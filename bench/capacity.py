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

The fleet (``--fleet``, docs/scale.md "The fleet's Redis"), with real processes (forked, each
an engine of its own, as tests/fleet_procs.py makes them):

- cold keys: P processes, each with M concurrent callers of one cold key at once, over a number
  of keys; an upstream call takes ``--upstream-ms``. Upstream calls per cold key, with per-process
  single flight (model: P, one per process) and with ``single_flight="fleet"`` (model: 1), and
  the fleet's Redis commands per cold key;
- the backplane: P processes with a tiered store write W entries a second in all; the messages
  a second published on the fleet's channel (model: at most W; one message carries every entry
  a process wrote since its previous round), the entries per message, and the deliveries a
  second Redis makes (messages x P subscribers); then what one Redis sustains: deliveries a
  second of 200-byte messages to P subscribers.
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


# -- the fleet ------------------------------------------------------------------------------------


def _commands(client: Any, *names: str) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if not names or k in names)


def cold_keys(
    fleet_url: str,
    store_url: str,
    processes: int,
    callers: int,
    keys: int,
    upstream: float,
    fleet: bool,
) -> tuple[float, float]:
    """Upstream calls per cold key, and the lease scripts and publishes the fleet's Redis
    runs per cold key."""
    import redis

    from tests.fleet_procs import Here, fleet_of
    from tests.redis_server import unique_prefix

    tag = unique_prefix()
    counter = redis.Redis.from_url(store_url)

    def setup(index: int, here: Here) -> dict[str, Callable[..., Any]]:
        engine = failover.Failover(
            store=f"{store_url}?prefix={tag}", fleet=f"{fleet_url}?prefix={tag}", metrics=False
        )
        assert engine.fleet is not None
        assert engine.fleet.bus.subscribed.wait(10)
        calls = redis.Redis.from_url(store_url)

        @failover.failover(
            "cap.cold", engine=engine, single_flight="fleet" if fleet else True, fresh_for="1m"
        )
        def get(key: str) -> dict[str, str]:
            calls.incr(f"{tag}calls")
            time.sleep(upstream)
            return {"key": key}

        def run(key: str) -> int:
            threads = [threading.Thread(target=get, args=(key,)) for _ in range(callers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return callers

        return {"run": run}

    fleet_client = redis.Redis.from_url(fleet_url)
    # The commands a client sends (a lease script, a publish), not those a script runs.
    sent = ("cmdstat_eval", "cmdstat_publish")
    with fleet_of(processes, setup) as children:
        before = _commands(fleet_client, *sent)
        for k in range(keys):
            for child in children:
                child.send("run", f"cold-{k}")
            for child in children:
                child.answer(60)
        commands = _commands(fleet_client, *sent) - before
    calls = int(counter.get(f"{tag}calls") or 0)
    counter.close()
    fleet_client.close()
    return calls / keys, commands / keys


def backplane(
    fleet_url: str, store_url: str, processes: int, writes: float, seconds: float
) -> dict[str, float]:
    """Messages a second on the fleet's channel for ``writes`` entries a second in all."""
    import redis

    from tests.redis_server import unique_prefix

    tag = unique_prefix()
    engines = [
        failover.Failover(
            store=f"tiered+{store_url}?prefix={tag}",
            fleet=f"{fleet_url}?prefix={tag}",
            metrics=False,
        )
        for _ in range(processes)
    ]
    for e in engines:
        assert e.fleet is not None
        assert e.fleet.bus.subscribed.wait(10)
    functions = []
    for e in engines:

        @failover.failover("cap.bp", engine=e)
        def put(key: str) -> dict[str, str]:
            return {"key": key}

        functions.append(put)
    client = redis.Redis.from_url(fleet_url)
    before = _commands(client, "cmdstat_publish")
    stop_at = time.monotonic() + seconds
    done = [0]
    lock = threading.Lock()

    def process(fn: Callable[[str], Any], seed: int) -> None:
        period = processes / writes
        due = time.monotonic()
        n = 0
        while time.monotonic() < stop_at:
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            due += period
            fn(f"{seed}-{n}")
            n += 1
        with lock:
            done[0] += n

    threads = [threading.Thread(target=process, args=(f, i)) for i, f in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in engines:
        e.flush(10)
    time.sleep(0.5)  # the last rounds
    published = _commands(client, "cmdstat_publish") - before
    received = sum(e.fleet.bus.received for e in engines if e.fleet is not None)
    for e in engines:
        e.close()
    client.close()
    return {
        "writes": done[0] / seconds,
        "messages": published / seconds,
        "entries_per_message": done[0] / max(published, 1),
        "deliveries": received / seconds,
    }


def pubsub_sustained(fleet_url: str, subscribers: int, seconds: float = 3.0) -> float:
    """Deliveries a second one Redis makes: 200-byte messages to ``subscribers``, published
    from 4 threads."""
    import redis

    channel = f"cap:{uuid.uuid4().hex[:8]}"
    got = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def listen() -> None:
        sub = redis.Redis.from_url(fleet_url).pubsub()
        sub.subscribe(channel)
        n = 0
        while not stop.is_set():
            if sub.get_message(timeout=0.1) is not None:
                n += 1
        with lock:
            got[0] += n
        sub.close()

    listeners = [threading.Thread(target=listen) for _ in range(subscribers)]
    for t in listeners:
        t.start()
    time.sleep(0.5)
    body = "x" * 200
    stop_at = time.monotonic() + seconds

    def publish() -> None:
        client = redis.Redis.from_url(fleet_url)
        while time.monotonic() < stop_at:
            pipe = client.pipeline(transaction=False)
            for _ in range(50):
                pipe.publish(channel, body)
            pipe.execute()
        client.close()

    publishers = [threading.Thread(target=publish) for _ in range(4)]
    for t in publishers:
        t.start()
    for t in publishers:
        t.join()
    time.sleep(0.5)
    stop.set()
    for t in listeners:
        t.join()
    return got[0] / seconds


def fleet_main(args: argparse.Namespace) -> None:
    from tests import redis_server

    store = redis_server.server()
    fleet = redis_server.RedisServer().start()
    try:
        p, m = args.fleet_processes, args.callers
        print(
            f"\nThe fleet: P={p} processes, M={m} callers each, an upstream call of "
            f"{args.upstream_ms:g} ms, {args.cold_keys} cold keys\n"
        )
        print("| measure | model | measured |")
        print("|---|---:|---:|")
        for fleet_on, model in ((False, p), (True, 1)):
            calls, commands = cold_keys(
                fleet.url, store.url, p, m, args.cold_keys, args.upstream_ms / 1000, fleet_on
            )
            what = 'single_flight="fleet"' if fleet_on else "single_flight=True (per process)"
            print(f"| upstream calls per cold key, {what} | {model} | {calls:.2f} |")
            print(f"| fleet Redis scripts + publishes per cold key, {what} | | {commands:.1f} |")
        for writes in args.writes:
            got = backplane(fleet.url, store.url, p, writes, args.seconds)
            print(
                f"| backplane at {got['writes']:,.0f} writes/s: messages/s | ≤ {writes:,.0f} | "
                f"{got['messages']:,.1f} |"
            )
            print(f"| ... entries per message | | {got['entries_per_message']:,.1f} |")
            print(f"| ... deliveries/s (messages x other processes) | | {got['deliveries']:,.1f} |")
        sustained_deliveries = pubsub_sustained(fleet.url, p)
        print(
            f"| Redis sustains: deliveries/s, 200-byte messages to {p} subscribers | | "
            f"{sustained_deliveries:,.0f} |"
        )
    finally:
        fleet.stop()
        redis_server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=40)
    parser.add_argument("--rate", type=float, default=100.0, help="calls a second, per process")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=5.0, help="store_interval, seconds")
    parser.add_argument("--ttl", type=float, default=600.0)
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase's length")
    parser.add_argument("--fleet", action="store_true", help="measure the fleet instead")
    parser.add_argument("--fleet-processes", type=int, default=8)
    parser.add_argument("--callers", type=int, default=8, help="callers per process (--fleet)")
    parser.add_argument("--cold-keys", type=int, default=20)
    parser.add_argument("--upstream-ms", type=float, default=50.0)
    parser.add_argument(
        "--writes", type=float, nargs="*", default=[100.0, 1000.0], help="entries/s (--fleet)"
    )
    args = parser.parse_args()
    if args.fleet:
        fleet_main(args)
        return

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
