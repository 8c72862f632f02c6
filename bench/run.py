"""Hot-path benchmark: the decorated call against a plain call and against peers, in one process.

Run with ``make bench`` (installs cashews into the venv) or ``.venv/bin/python bench/run.py``.
Prints a markdown table: nanoseconds per call (best of several repeats) and ratios.

Every upstream returns a small dict, the typical reference-data payload. Two key patterns:

- *repeated keys*: the calls cycle over 1,000 arguments (a catalogue of countries, currencies,
  products): the common case;
- *a new key every call*: the calls cycle over 20,000 arguments, more than any cache here holds
  (10,000 entries), so cachetools always misses and our key memo never helps: the worst case.

cachetools on a miss builds a key, calls, and stores (evicting at capacity), which is what our
success path does too; a miss needs a new key, so its row always uses the second pattern.
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

HOT = [f"K{i:05d}" for i in range(1_000)]
COLD = [f"K{i:05d}" for i in range(20_000)]


def country(code: str) -> dict[str, str]:
    return {"code": code, "name": "France", "currency": "EUR"}


async def acountry(code: str) -> dict[str, str]:
    return {"code": code, "name": "France", "currency": "EUR"}


def broken(code: str) -> dict[str, str]:
    raise ConnectionError(code)


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


def batches(keys: list[str], number: int, repeat: int) -> list[list[str]]:
    cycle = itertools.cycle(keys)
    return [[next(cycle) for _ in range(number)] for _ in range(repeat)]


def best_ns(fn: Callable[[str], Any], keys: list[str], number: int, repeat: int) -> float:
    """Best per-call time over ``repeat`` runs of ``number`` calls."""
    best = float("inf")
    for batch in batches(keys, number, repeat):
        start = time.perf_counter_ns()
        for k in batch:
            fn(k)
        best = min(best, (time.perf_counter_ns() - start) / number)
    return best


def best_async_ns(
    fn: Callable[[str], Awaitable[Any]], keys: list[str], number: int, repeat: int
) -> float:
    """Best per-call time of ``await fn(key)`` in a running event loop."""

    async def run() -> float:
        best = float("inf")
        for batch in batches(keys, number, repeat):
            start = time.perf_counter_ns()
            for k in batch:
                await fn(k)
            best = min(best, (time.perf_counter_ns() - start) / number)
        return best

    return asyncio.run(run())


def sync_rows(n: int, r: int) -> dict[str, float]:
    engine = failover.Failover("memory://", metrics=False)  # copying on, metrics off
    metered = failover.Failover("memory://", metrics=True)
    decorated = failover.failover("bench.country", engine=engine)(country)
    with_metrics = failover.failover("bench.metrics", engine=metered)(country)
    failing = failover.failover("bench.broken", domain="bench.country", engine=engine)(broken)
    rows = {
        "plain call": best_ns(country, HOT, n, r),
        "minimal hand-written failover (dict + try/except)": best_ns(
            minimal_failover(country), HOT, n, r
        ),
        "cachetools.cached(TTLCache) miss": best_ns(
            cachetools.cached(cachetools.TTLCache(maxsize=10_000, ttl=3600))(country), COLD, n, r
        ),
        "cachetools.cached(LRUCache) miss": best_ns(
            cachetools.cached(cachetools.LRUCache(maxsize=10_000))(country), COLD, n, r
        ),
        "@failover success, repeated keys": best_ns(decorated, HOT, n, r),
        "@failover success, repeated keys, metrics on": best_ns(with_metrics, HOT, n, r),
        "@failover success, a new key every call": best_ns(decorated, COLD, n, r),
    }
    for k in HOT:  # the recover path finds every entry
        decorated(k)
    rows["@failover recover (upstream raises, entry found)"] = best_ns(failing, HOT, n, r)
    engine.close()
    metered.close()
    return rows


def async_rows(n: int, r: int) -> dict[str, float]:
    engine = failover.Failover("memory://", metrics=False)
    decorated = failover.failover("bench.acountry", engine=engine)(acountry)
    rows = {
        "plain await": best_async_ns(acountry, HOT, n, r),
        "@failover success, async, repeated keys": best_async_ns(decorated, HOT, n, r),
    }
    try:
        from cashews import cache
    except ImportError:
        print("cashews is not installed: `make bench` installs it", file=sys.stderr)
    else:
        cache.setup("mem://", size=10_000)
        rows["cashews @cache.failover success (mem://)"] = best_async_ns(
            cache.failover(ttl="1h")(acountry), HOT, n, r
        )
    engine.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    sync, asyn = sync_rows(args.number, args.repeat), async_rows(args.number, args.repeat)

    print(
        f"Python {platform.python_version()}, {platform.machine()}; best of {args.repeat} "
        f"runs of {args.number:,} calls\n"
    )
    print("| path | ns/call | x plain |")
    print("|---|---:|---:|")
    for rows, base in ((sync, sync["plain call"]), (asyn, asyn["plain await"])):
        for label, ns in rows.items():
            print(f"| {label} | {ns:,.0f} | {ns / base:.1f} |")
    miss = sync["cachetools.cached(TTLCache) miss"]
    print()
    print("| bar | ratio | bar |")
    print("|---|---:|---:|")
    for label, ratio, bar in (
        (
            "success (repeated keys) / cachetools TTL miss",
            sync["@failover success, repeated keys"] / miss,
            "<= 1",
        ),
        (
            "success (a new key every call) / cachetools TTL miss",
            sync["@failover success, a new key every call"] / miss,
            "(worst case)",
        ),
        (
            "recover / cachetools TTL miss",
            sync["@failover recover (upstream raises, entry found)"] / miss,
            "<= 2",
        ),
    ):
        print(f"| {label} | {ratio:.2f} | {bar} |")
    cashews_ns = asyn.get("cashews @cache.failover success (mem://)")
    if cashews_ns:
        ratio = asyn["@failover success, async, repeated keys"] / cashews_ns
        print(f"| async success / cashews failover success | {ratio:.2f} | <= 0.2 |")


if __name__ == "__main__":
    main()
