"""`RedisStore` benchmark: batch reads, batched writes and point reads against raw redis-py.

Run with ``.venv/bin/python bench/redis_store.py`` (a throwaway ``redis-server`` on loopback,
started as the test suite starts it), or ``--url redis://host:6379/0`` for a server of your own
(keys under a fresh prefix, deleted at the end). Prints a markdown table.

Every payload is a small dict, the typical reference-data entry. Each case runs against its raw
redis-py counterpart in the same process, on the same server, the cases interleaved round by
round, and keeps its best round (a burst of load elsewhere on the host hits all cases alike):

- ``find_many`` of 1,000 keys vs one ``MGET`` of 1,000 keys plus ``json.loads`` of each value:
  entries written in one batch (they share their times, as the slices of one scatter/gather
  call do), and entries written apart (each at a time of its own);
- ``store_many`` of 1,000 entries vs a pipeline of 1,000 ``SET ... PXAT`` of ``json.dumps`` of
  each payload (encoding included on both sides);
- ``find`` vs ``GET`` plus ``json.loads``.

The store's figures include everything it does beyond the raw calls: the codec and its type
tags, the entry header, the envelopes, and on writes the per-name index.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/redis_server.py starts the throwaway server

from failover.payload import ReferentialPayload, envelope  # noqa: E402
from failover.stores.backends.redis import RedisStore  # noqa: E402

BATCH = 1_000
ROUNDS = 30
POINTS = 200  # point reads per round


def payloads(count: int, name: str = "bench.rates", apart: bool = False) -> list[Any]:
    """``count`` entries written together (one time for all, as the slices of one call are),
    or ``apart`` (each at a time of its own, as the entries of separate calls are)."""
    now = datetime.now(UTC)
    step = timedelta(microseconds=1 if apart else 0)
    return [
        envelope(
            name,
            f"{i:06d}",
            {"code": "EUR", "rate": 1.085 + i / 1e6, "source": "ecb", "n": i},
            now - i * step,
            now - i * step + timedelta(hours=1),
            True,
        )
        for i in range(count)
    ]


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one send is one round trip."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)


def round_trips(url: str, prefix: str, entries: list[ReferentialPayload[Any]]) -> int:
    """The round trips of one ``find_many`` of ``entries``' keys, on a counting connection."""
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    store = RedisStore(client, prefix=prefix)
    client.ping()
    CountingConnection.sends = 0
    found = store.find_many("bench.rates", [p.key for p in entries])
    sends = CountingConnection.sends
    assert len(found) == len(entries)
    client.close()
    return sends


def measure(url: str) -> tuple[list[list[str]], int]:
    prefix = f"bench{uuid.uuid4().hex[:8]}:"
    raw_prefix = f"{prefix}raw:"
    store = RedisStore(url, prefix=prefix)
    client = redis.Redis.from_url(url)
    entries = payloads(BATCH)
    keys = [p.key for p in entries]
    store.store_many(payloads(BATCH, "bench.apart", apart=True))
    raw_keys = [raw_prefix + k for k in keys]
    expires = int(entries[0].expire_on.timestamp() * 1000)  # type: ignore[union-attr]

    def raw_writes() -> None:
        pipe = client.pipeline(transaction=False)
        for key, p in zip(raw_keys, entries, strict=True):
            pipe.set(key, json.dumps(p.payload), pxat=expires)
        pipe.execute()

    def raw_find_many() -> list[Any]:
        return [json.loads(v) for v in client.mget(raw_keys)]

    point = keys[BATCH // 2]
    raw_point = raw_prefix + point

    def store_points() -> None:
        for _ in range(POINTS):
            store.find("bench.rates", point)

    def raw_points() -> None:
        for _ in range(POINTS):
            json.loads(client.get(raw_point))

    cases: dict[str, Callable[[], object]] = {
        "store_many": lambda: store.store_many(entries),
        "raw pipeline SET PXAT": raw_writes,
        "find_many": lambda: store.find_many("bench.rates", keys),
        "raw MGET + json.loads": raw_find_many,
        "find_many, apart": lambda: store.find_many("bench.apart", keys),
        "find": store_points,
        "raw GET + json.loads": raw_points,
    }
    for case in cases.values():  # warm up: connections, caches, the keys themselves
        case()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - start)
    best = {name: min(t) for name, t in times.items()}
    sends = round_trips(url, prefix, entries)
    for key in client.scan_iter(match=f"{prefix}*", count=1_000):
        client.delete(key)
    store.close()
    client.close()

    writes, raw_writes_ = BATCH / best["store_many"], BATCH / best["raw pipeline SET PXAT"]
    many, raw_many = best["find_many"], best["raw MGET + json.loads"]
    apart = best["find_many, apart"]
    point_us = best["find"] / POINTS * 1e6
    raw_point_us = best["raw GET + json.loads"] / POINTS * 1e6
    rows = [
        [
            "batched writes, 1,000 per batch",
            f"{writes:,.0f} /s",
            f"{raw_writes_:,.0f} /s",
            f"{writes / raw_writes_:.2f}",
            "≥ 0.6",
        ],
        [
            "find_many, 1,000 keys",
            f"{many * 1e3:.2f} ms",
            f"{raw_many * 1e3:.2f} ms",
            f"{many / raw_many:.2f}",
            "≤ 2",
        ],
        [
            "find_many, 1,000 keys written apart",
            f"{apart * 1e3:.2f} ms",
            f"{raw_many * 1e3:.2f} ms",
            f"{apart / raw_many:.2f}",
            "",
        ],
        [
            "point find",
            f"{point_us:.0f} µs",
            f"{raw_point_us:.0f} µs",
            f"{point_us / raw_point_us:.2f}",
            "",
        ],
    ]
    return rows, sends


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis server of your own (redis://host:6379/0)")
    args = parser.parse_args()
    server = None
    if args.url:
        url = args.url
    else:
        from tests.redis_server import RedisServer

        try:
            server = RedisServer().start()
        except BaseException as exc:  # pytest.skip outside pytest: the binary is missing
            print(f"no redis-server to run against: {exc}", file=sys.stderr)
            return 1
        url = server.url
    try:
        rows, sends = measure(url)
        info = redis.Redis.from_url(url).info("server")
    finally:
        if server is not None:
            server.stop()
    try:
        import hiredis

        parser_name = f"hiredis {hiredis.__version__}"
    except ImportError:
        parser_name = "the pure-Python parser (no hiredis)"
    print(
        f"RedisStore, Python {platform.python_version()}, redis-py {redis.__version__} with "
        f"{parser_name}, Redis {info['redis_version']}; best of {ROUNDS} interleaved rounds\n"
    )
    print("| measure | RedisStore | raw redis-py | ratio | bar |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nfind_many of {BATCH:,} keys: {sends} round trip(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
