"""`RedisPermits` benchmark: one acquire + release of a cluster-wide permit against raw Redis
round trips, in the same run, on the same server.

Run with ``.venv/bin/python bench/permits.py`` (a throwaway ``redis-server`` on loopback, started
as the test suite starts it), or ``--url redis://host:6379/0`` for a server of your own (keys
under a fresh prefix, deleted at the end). Prints a markdown table.

An acquire is one Lua script (``EVALSHA``: purge lapsed leases, count, take) and a release
another, so the floor is two round trips; the raw cases are one ``PING``, and a ``SET`` then a
``DEL`` (two round trips, no script). The cases are interleaved round by round and each keeps
its best round. The decorated call through a Redis pool is shown against the same call through
an in-process pool, for what a cluster-wide bulkhead adds to a call.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/redis_server.py starts the throwaway server

import failover  # noqa: E402
from failover.execution.redis_permits import RedisPermits  # noqa: E402

ROUNDS = 30
CALLS = 200  # per round


def measure(url: str) -> list[list[str]]:
    prefix = f"bench{uuid.uuid4().hex[:8]}:"
    client = redis.Redis.from_url(url)
    source = RedisPermits(url, prefix=prefix).bind("bench", 8, True)
    engine = failover.Failover("memory://", metrics=False)
    engine.bulkhead_pool("redis", permits=8, source=RedisPermits(url, prefix=prefix))
    engine.bulkhead_pool("local", permits=8)

    def country(code: str) -> dict[str, str]:
        return {"code": code, "name": "France"}

    through_redis = failover.failover("bench.redis", engine=engine, bulkhead="redis")(country)
    through_local = failover.failover("bench.local", engine=engine, bulkhead="local")(country)
    raw_key = f"{prefix}raw"

    def permit() -> None:
        for _ in range(CALLS):
            source.release(source.acquire(1, 0.0))

    def ping() -> None:
        for _ in range(CALLS):
            client.ping()

    def set_del() -> None:
        for _ in range(CALLS):
            client.set(raw_key, b"1")
            client.delete(raw_key)

    def call_redis() -> None:
        for _ in range(CALLS):
            through_redis("FR")

    def call_local() -> None:
        for _ in range(CALLS):
            through_local("FR")

    cases: dict[str, Callable[[], None]] = {
        "RedisPermits acquire + release": permit,
        "raw PING": ping,
        "raw SET + DEL": set_del,
        "decorated call, Redis pool": call_redis,
        "decorated call, in-process pool": call_local,
    }
    for case in cases.values():  # warm up: connections, script caches
        case()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - start)
    us = {name: min(t) / CALLS * 1e6 for name, t in times.items()}
    assert source.in_use() == 0
    for key in client.scan_iter(match=f"{prefix}*", count=1_000):
        client.delete(key)
    engine.close()
    source.close()
    client.close()
    ping = us["raw PING"]
    return [
        [name, f"{value:.1f} µs", f"{value / ping:.2f}"]
        for name, value in (
            ("raw PING (one round trip)", ping),
            ("raw SET + DEL (two round trips)", us["raw SET + DEL"]),
            ("RedisPermits acquire + release (two scripts)", us["RedisPermits acquire + release"]),
            ("decorated call, Redis pool", us["decorated call, Redis pool"]),
            ("decorated call, in-process pool", us["decorated call, in-process pool"]),
        )
    ]


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
        rows = measure(url)
    finally:
        if server is not None:
            server.stop()
    print(
        f"Python {platform.python_version()}, {platform.machine()}, redis-py "
        f"{redis.__version__}; best of {ROUNDS} interleaved rounds of {CALLS} operations, "
        "loopback TCP\n"
    )
    print("| operation | per operation | x raw PING |")
    print("|---|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
