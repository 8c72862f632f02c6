"""Hot-path benchmark: the decorated call against a plain call and against peers, in one process.

Run with ``make bench`` (installs cashews into the venv) or ``.venv/bin/python bench/run.py``.
Prints a markdown table: nanoseconds per call (best of several repeats) and ratios.

Every upstream returns a small dict holding a short list, the typical reference-data payload.
Two key patterns:

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


def country(code: str) -> dict[str, Any]:
    return {"code": code, "name": "France", "currencies": ["EUR"]}


async def acountry(code: str) -> dict[str, Any]:
    return {"code": code, "name": "France", "currencies": ["EUR"]}


def broken(code: str) -> dict[str, Any]:
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


Case = tuple[str, Callable[[str], Any], list[str]]


def interleaved(sync: list[Case], asyn: list[Case], number: int, rounds: int) -> dict[str, float]:
    """Best per-call time of each case. Every round runs one batch of every case, so a burst
    of load from elsewhere on the host hits the cases alike rather than whichever ran then."""
    best = {label: float("inf") for label, _, _ in sync + asyn}
    # One endless cycle of keys per case, so that a cold case keeps meeting new keys.
    cycles = {label: itertools.cycle(keys) for label, _, keys in sync + asyn}

    def batch(label: str) -> list[str]:
        return list(itertools.islice(cycles[label], number))

    loop = asyncio.new_event_loop()

    async def run_async(fn: Callable[[str], Awaitable[Any]], batch: list[str]) -> int:
        start = time.perf_counter_ns()
        for k in batch:
            await fn(k)
        return time.perf_counter_ns() - start

    try:
        for _ in range(rounds):
            for label, fn, _ in sync:
                keys = batch(label)
                start = time.perf_counter_ns()
                for k in keys:
                    fn(k)
                best[label] = min(best[label], (time.perf_counter_ns() - start) / number)
            for label, afn, _ in asyn:
                elapsed = loop.run_until_complete(run_async(afn, batch(label)))
                best[label] = min(best[label], elapsed / number)
    finally:
        pending = asyncio.all_tasks(loop)  # cashews' expiry task
        for task in pending:
            task.cancel()
        if pending:  # gather() of nothing would make its future on another loop
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
    return best


def cases() -> tuple[list[Case], list[Case], list[failover.Failover]]:
    engine = failover.Failover("memory://", metrics=False)  # copying on, metrics off
    cold = failover.Failover("memory://", metrics=False)  # its evictions stay its own
    metered = failover.Failover("memory://", metrics=True)
    recovering = failover.Failover("memory://", metrics=False)  # no eviction by other cases
    coalescing = failover.Failover("memory://", metrics=False, store_interval="1h")
    labelled = failover.Failover("memory://", metrics=False)  # label=True: its entries only
    decorated = failover.failover("bench.country", engine=engine)(country)
    filling = failover.failover("bench.fill", domain="bench", engine=recovering)(country)
    failing = failover.failover("bench.broken", domain="bench", engine=recovering)(broken)
    for k in HOT:  # the recover path finds every entry
        filling(k)
    sync: list[Case] = [
        ("plain call", country, HOT),
        ("minimal hand-written failover (dict + try/except)", minimal_failover(country), HOT),
        (
            "cachetools.cached(TTLCache) miss",
            cachetools.cached(cachetools.TTLCache(maxsize=10_000, ttl=3600))(country),
            COLD,
        ),
        (
            "cachetools.cached(LRUCache) miss",
            cachetools.cached(cachetools.LRUCache(maxsize=10_000))(country),
            COLD,
        ),
        ("@failover success, repeated keys", decorated, HOT),
        (
            "@failover success, repeated keys, metrics on",
            failover.failover("bench.metrics", engine=metered)(country),
            HOT,
        ),
        (
            "@failover success, a new key every call",
            failover.failover("bench.cold", engine=cold)(country),
            COLD,
        ),
        (
            "@failover success, repeated keys, label=True",
            failover.failover("bench.labelled", engine=labelled, label=True)(country),
            HOT,
        ),
        ("@failover recover (upstream raises, entry found)", failing, HOT),
        (
            "@failover success, breaker=True",
            failover.failover("bench.breaker", engine=engine, breaker=True)(country),
            HOT,
        ),
        (
            "@failover success, max_concurrency=8 (bulkhead)",
            failover.failover("bench.bulkhead", engine=engine, max_concurrency=8)(country),
            HOT,
        ),
        (
            "@failover success within store_interval (not stored again)",
            failover.failover("bench.coalesced", engine=coalescing)(country),
            HOT,
        ),
    ]
    asyn: list[Case] = [
        ("plain await", acountry, HOT),
        (
            "@failover success, async, repeated keys",
            failover.failover("bench.acountry", engine=engine)(acountry),
            HOT,
        ),
    ]
    try:
        from cashews import cache
    except ImportError:
        print("cashews is not installed: `make bench` installs it", file=sys.stderr)
    else:
        cache.setup("mem://", size=10_000)
        asyn.append(
            ("cashews @cache.failover success (mem://)", cache.failover(ttl="1h")(acountry), HOT)
        )
    return sync, asyn, [engine, cold, metered, recovering, coalescing, labelled]


def health_ms(failovers: int = 1_000, repeat: int = 20) -> float:
    """Best time of ``engine.health()`` over ``failovers`` registered failovers, in ms; every
    one called in the last minute (a third of them failing, not recovered), so none takes the
    idle shortcut."""
    engine = failover.Failover("memory://", metrics=False)
    for i in range(failovers):
        upstream = country if i % 3 else broken
        fn = failover.failover(f"bench.health.{i}", engine=engine, policy="never_throw")(upstream)
        fn("FR")
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        report = engine.health()
        best = min(best, time.perf_counter() - start)
    assert len(report.failovers) == failovers
    engine.close()
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5_000, help="calls per batch")
    parser.add_argument("--rounds", type=int, default=30, help="batches of each case")
    parser.add_argument(
        "--scatter-rounds", type=int, default=15, help="rounds of the scatter recover (0: skip)"
    )
    args = parser.parse_args()
    sync, asyn, engines = cases()
    best = interleaved(sync, asyn, args.number, args.rounds)
    for engine in engines:
        engine.close()

    print(
        f"Python {platform.python_version()}, {platform.machine()}; best of {args.rounds} "
        f"interleaved batches of {args.number:,} calls\n"
    )
    print("| path | ns/call | x plain |")
    print("|---|---:|---:|")
    for group, base in ((sync, best["plain call"]), (asyn, best["plain await"])):
        for label, _, _ in group:
            print(f"| {label} | {best[label]:,.0f} | {best[label] / base:.1f} |")
    miss = best["cachetools.cached(TTLCache) miss"]
    ratios = [
        (
            "success (repeated keys) / cachetools TTL miss",
            "@failover success, repeated keys",
            miss,
            "<= 1",
        ),
        (
            "success (a new key every call) / cachetools TTL miss",
            "@failover success, a new key every call",
            miss,
            "worst case",
        ),
        (
            "recover / cachetools TTL miss",
            "@failover recover (upstream raises, entry found)",
            miss,
            "<= 2",
        ),
        (
            "success within store_interval / cachetools TTL miss",
            "@failover success within store_interval (not stored again)",
            miss,
            "<= 0.5",
        ),
    ]
    ratios.append(
        (
            "success, metrics on / metrics off",
            "@failover success, repeated keys, metrics on",
            best["@failover success, repeated keys"],
            "<= 1.3",
        )
    )
    cashews_ns = best.get("cashews @cache.failover success (mem://)")
    if cashews_ns:
        ratios.append(
            (
                "async success / cashews failover success",
                "@failover success, async, repeated keys",
                cashews_ns,
                "<= 0.2",
            )
        )
    print()
    print("| ratio | value | bar |")
    print("|---|---:|---:|")
    for label, case, base, bar in ratios:
        print(f"| {label} | {best[case] / base:.2f} | {bar} |")
    print(f"\nengine.health() on 1,000 registered failovers: {health_ms():.1f} ms (bar: < 50 ms)")
    print()
    print(issue_table(best, scatter_ratio(args.scatter_rounds)))


def scatter_ratio(rounds: int) -> float | None:
    """A 1,000-slice recover from a SQLite file against a raw select + ``json.loads`` of the
    same rows (`bench/scatter.py`'s cases), best against best."""
    if rounds <= 0:
        return None
    import tempfile
    from pathlib import Path

    import scatter

    with tempfile.TemporaryDirectory() as tmp:
        timed, engines = scatter.cases(f"sqlite:///{Path(tmp) / 'bench.db'}", Path(tmp))
        try:
            wanted = (
                "raw select + json.loads (floor)",
                "@failover recover, 1,000 slices, async writes on",
            )
            times = scatter.run({label: timed[label] for label in wanted}, rounds)
        finally:
            for engine in engines:
                engine.close()
    return min(times[wanted[1]]) / min(times[wanted[0]])


def issue_table(best: dict[str, float], scatter: float | None) -> str:
    """The hot path's bars (issue 33), each figure against its bar."""
    miss = best["cachetools.cached(TTLCache) miss"]
    basic = best["@failover success, repeated keys"]
    figures: list[tuple[str, float | None, float]] = [
        ("sync success / cachetools.cached(TTLCache) miss", basic / miss, 0.5),
        (
            "sync recover / cachetools miss",
            best["@failover recover (upstream raises, entry found)"] / miss,
            1.0,
        ),
        (
            "async success / cashews @cache.failover success",
            best["@failover success, async, repeated keys"] / cashews
            if (cashews := best.get("cashews @cache.failover success (mem://)"))
            else None,
            0.1,
        ),
        ("breaker success / basic success", best["@failover success, breaker=True"] / basic, 1.1),
        (
            "bulkhead success / basic success",
            best["@failover success, max_concurrency=8 (bulkhead)"] / basic,
            1.1,
        ),
        ("metrics on / off", best["@failover success, repeated keys, metrics on"] / basic, 1.05),
        ("1,000-slice scatter recover (SQLite) / raw select + json.loads", scatter, 2.0),
    ]
    lines = ["| figure | now | bar | |", "|---|---:|---:|---|"]
    for label, value, bar in figures:
        if value is None:
            lines.append(f"| {label} | n/a | <= {bar:g} | not measured |")
        else:
            lines.append(
                f"| {label} | {value:.2f} | <= {bar:g} | {'met' if value <= bar else 'MISSED'} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
