"""Hot-path benchmark: the decorated call against a plain call and against peers, in one process.

Run with ``make bench`` (installs cashews into the venv) or ``.venv/bin/python bench/run.py``.
Prints a markdown table: nanoseconds per call (best of several repeats) and ratios. Every
decorated call returns a small dict, the typical reference-data payload; the calls cycle over
20,000 distinct keys, more than the 10,000 entries every cache here holds, so cachetools always
misses (it builds a key, stores, and evicts) and our store evicts as it would in production.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import cachetools

import failover

KEYS = [f"K{i:05d}" for i in range(20_000)]


def country(code: str) -> dict[str, str]:
    return {"code": code, "name": "France", "currency": "EUR"}


async def acountry(code: str) -> dict[str, str]:
    return {"code": code, "name": "France", "currency": "EUR"}


def broken(code: str) -> dict[str, str]:
    raise ConnectionError(code)


def best_ns(fn: Callable[[str], Any], number: int, repeat: int) -> float:
    """Best per-call time over ``repeat`` runs of ``number`` calls."""
    best = float("inf")
    keys = itertools.cycle(KEYS)
    for _ in range(repeat):
        batch = [next(keys) for _ in range(number)]
        start = time.perf_counter_ns()
        for k in batch:
            fn(k)
        best = min(best, (time.perf_counter_ns() - start) / number)
    return best


def best_async_ns(fn: Callable[[str], Awaitable[Any]], number: int, repeat: int) -> float:
    """Best per-call time of ``await fn(key)`` in a running event loop."""

    async def run() -> float:
        best = float("inf")
        keys = itertools.cycle(KEYS)
        for _ in range(repeat):
            batch = [next(keys) for _ in range(number)]
            start = time.perf_counter_ns()
            for k in batch:
                await fn(k)
            best = min(best, (time.perf_counter_ns() - start) / number)
        return best

    return asyncio.run(run())


def minimal_failover(fn: Callable[[str], Any]) -> Callable[[str], Any]:
    """The least a failover can do: a dict and a try/except (the floor, for reference)."""
    saved: dict[str, Any] = {}

    def wrapper(code: str) -> Any:
        try:
            result = fn(code)
        except Exception:
            return saved[code]
        saved[code] = result
        return result

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    n, r = args.number, args.repeat

    engine = failover.Failover("memory://", metrics=False)  # copying on, metrics off
    decorated = failover.failover("bench.country", ttl="1h", engine=engine)(country)
    adecorated = failover.failover("bench.acountry", ttl="1h", engine=engine)(acountry)
    # The recover path has its own engine, so the success runs' evictions cannot touch it.
    recovering = failover.Failover("memory://", metrics=False)
    filling = failover.failover("bench.fill", domain="bench", engine=recovering)(country)
    failing = failover.failover("bench.broken", domain="bench", engine=recovering)(broken)
    for k in KEYS[-10_000:]:  # the recover path always finds the entry: fill what it reads
        filling(k)
    metered = failover.Failover("memory://", metrics=True)
    decorated_metrics = failover.failover("bench.metrics", ttl="1h", engine=metered)(country)

    rows: list[tuple[str, float]] = []
    plain = best_ns(country, n, r)
    rows.append(("plain call", plain))
    rows.append(
        (
            "minimal hand-written failover (dict + try/except)",
            best_ns(minimal_failover(country), n, r),
        )
    )
    ttl_cached = cachetools.cached(cachetools.TTLCache(maxsize=10_000, ttl=3600))(country)
    lru_cached = cachetools.cached(cachetools.LRUCache(maxsize=10_000))(country)
    ttl_miss = best_ns(ttl_cached, n, r)
    rows.append(("cachetools.cached(TTLCache) miss", ttl_miss))
    rows.append(("cachetools.cached(LRUCache) miss", best_ns(lru_cached, n, r)))
    success = best_ns(decorated, n, r)
    rows.append(("@failover success, sync (memory, copying, metrics off)", success))
    rows.append(("@failover success, sync, metrics on", best_ns(decorated_metrics, n, r)))
    hot_keys = KEYS[-10_000:]
    recover = best_ns(lambda k: failing(hot_keys[int(k[1:]) % 10_000]), n, r)
    rows.append(("@failover recover (upstream raises, entry found)", recover))

    aplain = best_async_ns(acountry, n, r)
    rows.append(("plain await", aplain))
    asuccess = best_async_ns(adecorated, n, r)
    rows.append(("@failover success, async", asuccess))
    cashews_ns: float | None = None
    try:
        from cashews import cache as cashews_cache
    except ImportError:
        print("cashews not installed: `make bench` installs it", file=sys.stderr)
    else:
        cashews_cache.setup("mem://", size=10_000)
        cashews_failover = cashews_cache.failover(ttl="1h")(acountry)
        cashews_ns = best_async_ns(cashews_failover, n, r)
        rows.append(("cashews @cache.failover success (mem://)", cashews_ns))

    print(
        f"Python {platform.python_version()} on {platform.machine()}, "
        f"{n} calls x {r} repeats, best repeat\n"
    )
    print("| path | ns/call | x plain |")
    print("|---|---:|---:|")
    for label, ns in rows:
        base = aplain if "await" in label or "async" in label or "cashews" in label else plain
        print(f"| {label} | {ns:,.0f} | {ns / base:.1f} |")
    print()
    print(f"- sync success / cachetools TTL miss: {success / ttl_miss:.2f} (bar: <= 1)")
    print(f"- recover / cachetools TTL miss: {recover / ttl_miss:.2f} (bar: <= 2)")
    if cashews_ns is not None:
        print(f"- async success / cashews failover: {asuccess / cashews_ns:.2f} (bar: <= 0.2)")
    engine.close()
    recovering.close()
    metered.close()


if __name__ == "__main__":
    main()
