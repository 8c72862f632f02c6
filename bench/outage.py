"""Outage benchmark: 1,000 concurrent async calls (``asyncio.gather``) on a real store.

Run with ``make bench`` (installs cashews) or ``.venv/bin/python bench/outage.py``. A throwaway
``redis-server`` and PostgreSQL server on loopback are started as the test suite starts them.
Prints a markdown table: calls per second, best of several interleaved rounds.

- *live*: the upstream answers; every result is stored (failover: the default engine, writes
  queued in the background; cashews: ``@cache.failover``, which writes every result);
- *recover*: the upstream raises; every call is served from the store (1,000 distinct keys,
  filled by a live round first).

failover and cashews run on the same Redis server, in the same process and event loop, their
rounds interleaved (a burst of load elsewhere on the host hits both alike). PostgreSQL runs for
failover alone (cashews has no SQL backend).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/redis_server.py and tests/postgres.py start the servers

import failover  # noqa: E402

CONCURRENCY = 1_000
KEYS = [f"K{i:05d}" for i in range(CONCURRENCY)]


class Down(Exception):
    """The upstream's outage."""


class Upstream:
    """An async upstream that answers, or raises while ``down``."""

    def __init__(self) -> None:
        self.down = False

    async def __call__(self, code: str) -> dict[str, Any]:
        if self.down:
            raise Down(code)
        return {"code": code, "name": "France", "currency": "EUR", "rate": 1.085}


Fn = Callable[[str], Awaitable[Any]]


async def one_round(fn: Fn) -> float:
    """Calls per second of one ``gather`` of `CONCURRENCY` calls."""
    start = time.perf_counter()
    results = await asyncio.gather(*(fn(k) for k in KEYS))
    elapsed = time.perf_counter() - start
    assert len(results) == CONCURRENCY
    assert all(r is not None for r in results)
    return CONCURRENCY / elapsed


async def measure(
    cases: dict[str, tuple[Fn, Upstream, Callable[[], Awaitable[None]]]], rounds: int
) -> dict[str, float]:
    """Best calls/s of each case, live then recover, the cases interleaved round by round."""
    best: dict[str, float] = {}
    for fn, upstream, settle in cases.values():  # fill the stores; warm connections
        upstream.down = False
        await one_round(fn)
        await settle()
    for mode in ("live", "recover"):
        for _ in range(rounds):
            for label, (fn, upstream, settle) in cases.items():
                upstream.down = mode == "recover"
                rate = await one_round(fn)
                await settle()  # queued writes land outside the timed window, for both
                key = f"{label} {mode}"
                best[key] = max(best.get(key, 0.0), rate)
    return best


def failover_case(
    url: str, name: str
) -> tuple[failover.Failover, tuple[Fn, Upstream, Callable[[], Awaitable[None]]]]:
    engine = failover.Failover(url, metrics=False)
    upstream = Upstream()
    fn = failover.failover(name, engine=engine)(upstream)

    async def settle() -> None:
        await asyncio.to_thread(engine.flush, 30)

    return engine, (fn, upstream, settle)


async def run(redis_url: str, pg_url: str | None, rounds: int) -> dict[str, float]:
    engines = []
    cases: dict[str, tuple[Fn, Upstream, Callable[[], Awaitable[None]]]] = {}
    engine, case = failover_case(redis_url, f"bench.outage.{uuid.uuid4().hex[:6]}")
    engines.append(engine)
    cases["failover redis"] = case
    try:
        from cashews import Cache
    except ImportError:
        print("cashews is not installed: `make bench` installs it", file=sys.stderr)
    else:
        cache = Cache()
        cache.setup(redis_url)
        upstream = Upstream()
        decorated = cache.failover(ttl="1h", exceptions=Down)(upstream.__call__)

        async def nothing() -> None:
            return None

        cases["cashews redis"] = (decorated, upstream, nothing)
    if pg_url is not None:
        engine, case = failover_case(pg_url, f"bench.outage.{uuid.uuid4().hex[:6]}")
        engines.append(engine)
        cases["failover postgresql"] = case
    try:
        return await measure(cases, rounds)
    finally:
        for engine in engines:
            await engine.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="gathers of each case and mode")
    parser.add_argument("--no-postgres", action="store_true", help="Redis only")
    args = parser.parse_args()
    from tests.redis_server import RedisServer

    redis_server = RedisServer().start()
    pg = None
    if not args.no_postgres:
        from tests import postgres

        pg = postgres.server()
    try:
        pg_url = None if pg is None else pg.url
        best = asyncio.run(run(redis_server.url, pg_url, args.rounds))
    finally:
        redis_server.stop()
        if pg is not None:
            postgres.stop()
    print(
        f"Python {platform.python_version()}, {platform.machine()}; {CONCURRENCY:,} concurrent "
        f"calls per gather, best of {args.rounds} interleaved rounds\n"
    )
    print("| store | mode | failover calls/s | cashews calls/s | failover / cashews |")
    print("|---|---|---:|---:|---:|")
    for mode in ("live", "recover"):
        ours, theirs = best["failover redis " + mode], best.get("cashews redis " + mode)
        ratio = "" if theirs is None else f"{ours / theirs:.1f}x"
        other = "" if theirs is None else f"{theirs:,.0f}"
        print(f"| Redis | {mode} | {ours:,.0f} | {other} | {ratio} |")
    for mode in ("live", "recover"):
        pg_rate = best.get("failover postgresql " + mode)
        if pg_rate is not None:
            print(f"| PostgreSQL | {mode} | {pg_rate:,.0f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
