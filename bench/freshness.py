"""Freshness benchmark: a call answered within ``fresh_for`` against a cachetools hit.

Run with ``.venv/bin/python bench/freshness.py``. Prints markdown tables: nanoseconds per call
(best of several interleaved rounds) and ratios.

Every upstream returns a nested dict, the shape of a rates or price-list answer:
``{"currency": ..., "rates": {20 currencies: float}, "meta": {...}}``. The calls cycle over 1,000
currencies, every one stored (or cached) before the rounds start. Cases:

- *plain call*: the undecorated function, which builds the dict (the floor);
- *cachetools hit*: ``cachetools.cached(TTLCache)`` finding the key; it returns the cached object
  itself, so every caller shares (and may mutate) one dict;
- *cachetools hit, then a deep copy*: what the caller of a cache must do to get what a fresh
  hit gives (a value of its own), with the copier the store uses;
- *fresh hit*: ``@failover(fresh_for="1h")`` on the in-memory store, metrics off: the entry is
  read, found fresh, and a copy of it returned, so the caller's mutations never reach the store
  (``.referential`` returns the envelope instead: ``up_to_date``, ``as_of``);
- *live success*: ``@failover`` without ``fresh_for``: the upstream called and its result stored
  (a copy), as every call does without a cache-first window;
- *past refresh_ahead*: ``@failover(fresh_for="10m", refresh_ahead=0.5)`` with every entry past
  the mark: the call is answered from the store and hands a refresh to the engine's pool. The
  refreshes are held at a gate until the round is timed, so the figure is the caller's own cost
  (the refresh's upstream call and store happen on the pool, after); then they are released and
  joined, outside the timing, and the clock moves the renewed entries past the mark again.
  *a refresh already running* times the same calls again while each key's refresh is still in
  flight (nothing to start: the single-flight check only). Both against a fresh hit on the same
  kind of engine (its clock shifted by the same offset).

*scatter/gather*: a ``ListSplitter`` failover whose calls ask for 1,000 slices (small dicts),
every one fresh, half of them (the upstream is asked for the other half only, in one call: the
benchmark asserts it), or none; one call per round each.

``--profile`` runs the fresh hit alone under cProfile and prints where its time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import pstats
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import cachetools

import failover
from failover import ListSplitter
from failover.stores.layers.copying import deep_copy

CURRENCIES = [f"C{i:03d}" for i in range(1_000)]
QUOTES = [f"Q{i:02d}" for i in range(20)]


def rates(currency: str) -> dict[str, Any]:
    """The upstream: a nested dict of 20 rates and some metadata."""
    return {
        "currency": currency,
        "rates": {q: 1.0 + i / 100 for i, q in enumerate(QUOTES)},
        "meta": {"source": "ecb", "published": "2026-11-25T10:00:00Z", "version": 7},
    }


class ShiftedClock:
    """The real clock plus an offset the benchmark moves (entries age without sleeping)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


Case = tuple[str, Callable[[str], Any]]


def timed(fn: Callable[[str], Any], keys: list[str]) -> float:
    """Nanoseconds per call of ``fn`` over ``keys``."""
    start = time.perf_counter_ns()
    for k in keys:
        fn(k)
    return (time.perf_counter_ns() - start) / len(keys)


class RefreshCase:
    """A failover whose every call is past ``refresh_ahead``; its refreshes wait at a gate."""

    def __init__(self) -> None:
        self.clock = ShiftedClock()
        self.engine = failover.Failover("memory://", metrics=False, clock=self.clock)
        self.gate = threading.Event()
        self.gate.set()

        def gated(currency: str) -> dict[str, Any]:
            self.gate.wait()
            self.refreshed.append(currency)  # atomic: the pool's threads append
            return rates(currency)

        self.fn = failover.failover(
            "bench.ahead", fresh_for="10m", refresh_ahead=0.5, engine=self.engine
        )(gated)
        # The reference: a fresh hit on an engine with the same clock, never past a mark.
        # The clock moves 6 minutes a round: its entries stay fresh for a day.
        self.fresh = failover.failover(
            "bench.ahead.fresh", ttl="1d", fresh_for="1d", engine=self.engine
        )(rates)
        self.refreshed: list[str] = []
        for k in CURRENCIES:
            self.fn(k)
            self.fresh(k)
        self.round(CURRENCIES)  # warm-up: the pool's threads started

    def round(self, keys: list[str]) -> tuple[float, float, float]:
        """ns/call: starting a refresh, with one already running, and a fresh hit."""
        self.clock.offset += timedelta(minutes=6)  # every entry past the mark, still fresh
        self.gate.clear()
        try:
            starting = timed(self.fn, keys)
            running = timed(self.fn, keys)
        finally:
            self.gate.set()
        assert self.engine.refreshes.wait(60)
        fresh = timed(self.fresh, keys)
        return starting, running, fresh


CODES = [f"K{i:04d}" for i in range(1_000)]


class ScatterCase:
    """A scatter/gather failover over 1,000 slices, each call asking for all of them: every
    slice fresh, half of them fresh (the upstream asked for the other half, in one call), or
    none (the upstream asked for all, every slice stored)."""

    def __init__(self) -> None:
        self.clock = ShiftedClock()
        self.engine = failover.Failover("memory://", metrics=False, clock=self.clock)
        self.asked: list[list[str]] = []

        def countries(codes: list[str]) -> list[dict[str, Any]]:
            self.asked.append(codes)
            return [{"code": c, "name": f"Country {c}", "currency": "EUR"} for c in codes]

        self.fn = failover.failover(
            "bench.countries", splitter=ListSplitter("code"), fresh_for="10m", engine=self.engine
        )(countries)

    def round(self) -> tuple[float, float, float]:
        """ns per call of 1,000 slices: all fresh, half fresh, none fresh."""
        self.clock.offset += timedelta(minutes=11)  # every slice past fresh_for
        self.fn(CODES[::2])  # half of them stored again: fresh
        self.asked.clear()
        start = time.perf_counter_ns()
        self.fn(CODES)
        half = time.perf_counter_ns() - start
        assert self.asked == [CODES[1::2]], "one upstream call, for the other half only"
        start = time.perf_counter_ns()
        self.fn(CODES)
        every = time.perf_counter_ns() - start
        assert len(self.asked) == 1, "every slice fresh: no upstream call"
        self.clock.offset += timedelta(minutes=11)
        start = time.perf_counter_ns()
        self.fn(CODES)
        none = time.perf_counter_ns() - start
        assert self.asked[-1] == CODES, "nothing fresh: the upstream asked for every slice"
        return every, half, none


def cases() -> tuple[list[Case], list[failover.Failover]]:
    fresh_engine = failover.Failover("memory://", metrics=False)  # copying on, metrics off
    shared_engine = failover.Failover("memory://?copy=false", metrics=False)  # as cachetools
    live_engine = failover.Failover("memory://", metrics=False)
    cached = cachetools.cached(cachetools.TTLCache(maxsize=10_000, ttl=3600))(rates)
    fresh = failover.failover("bench.fresh", fresh_for="1h", engine=fresh_engine)(rates)
    shared = failover.failover("bench.shared", fresh_for="1h", engine=shared_engine)(rates)
    live = failover.failover("bench.live", engine=live_engine)(rates)
    for k in CURRENCIES:  # every key found from the first round on
        cached(k)
        fresh(k)
        shared(k)
    sync: list[Case] = [
        ("plain call (builds the nested dict)", rates),
        ("cachetools.cached(TTLCache) hit", cached),
        ("cachetools hit, then a deep copy (failover's copier)", lambda k: deep_copy(cached(k))),
        ("@failover(fresh_for) fresh hit", fresh),
        ("@failover(fresh_for) fresh hit, .referential", fresh.referential),
        ("@failover(fresh_for) fresh hit, memory://?copy=false (shared, as cachetools)", shared),
        ("@failover live success (no fresh_for: upstream called, stored)", live),
    ]
    return sync, [fresh_engine, shared_engine, live_engine]


def profile(rounds: int, top: int = 15) -> None:
    """cProfile of the fresh hit alone: where its time goes, function by function."""
    engine = failover.Failover("memory://", metrics=False)
    fresh = failover.failover("bench.fresh", fresh_for="1h", engine=engine)(rates)
    for k in CURRENCIES:
        fresh(k)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(rounds):
        for k in CURRENCIES:
            fresh(k)
    profiler.disable()
    engine.close()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds of every case")
    parser.add_argument(
        "--profile", action="store_true", help="profile the fresh hit (cProfile) instead"
    )
    args = parser.parse_args()
    if args.profile:
        profile(args.rounds)
        return
    sync, engines = cases()
    ahead = RefreshCase()
    keys = CURRENCIES  # a batch: every key once (each starts one refresh past the mark)
    best = {label: float("inf") for label, _ in sync}
    refresh = {"start": float("inf"), "running": float("inf"), "fresh": float("inf")}
    scatter = ScatterCase()
    gather = {"every": float("inf"), "half": float("inf"), "none": float("inf")}
    for _ in range(args.rounds):
        for label, fn in sync:
            best[label] = min(best[label], timed(fn, keys))
        for name, ns in zip(refresh, ahead.round(keys), strict=True):
            refresh[name] = min(refresh[name], ns)
        for name, ns in zip(gather, scatter.round(), strict=True):
            gather[name] = min(gather[name], ns)
    # Every call past the mark started a refresh (the first calls and the warm-up round too).
    assert len(ahead.refreshed) == len(keys) * (args.rounds + 2), len(ahead.refreshed)
    for engine in [*engines, ahead.engine, scatter.engine]:
        engine.close()

    print(
        f"Python {platform.python_version()}, {platform.machine()}; best of {args.rounds} "
        f"interleaved rounds of {len(keys):,} calls (1,000 keys, a nested dict of 20 rates)\n"
    )
    plain = best["plain call (builds the nested dict)"]
    hit = best["cachetools.cached(TTLCache) hit"]
    print("| path | ns/call | x cachetools hit |")
    print("|---|---:|---:|")
    for label, _ in sync:
        print(f"| {label} | {best[label]:,.0f} | {best[label] / hit:.2f} |")
    print()
    print("| refresh ahead, on the caller | ns/call | x fresh hit |")
    print("|---|---:|---:|")
    base = refresh["fresh"]
    rows = [
        ("fresh hit (same clock, no mark)", refresh["fresh"]),
        ("past refresh_ahead: starts a refresh", refresh["start"]),
        ("past refresh_ahead: a refresh already running", refresh["running"]),
    ]
    for label, ns in rows:
        print(f"| {label} | {ns:,.0f} | {ns / base:.2f} |")
    print()
    print(
        "| scatter/gather, a call of 1,000 slices | upstream asked for | ms/call | x none fresh |"
    )
    print("|---|---:|---:|---:|")
    rows = [
        ("every slice fresh", "nothing", gather["every"]),
        ("half the slices fresh", "500 slices, one call", gather["half"]),
        ("none fresh (each stored)", "1,000 slices, one call", gather["none"]),
    ]
    for label, asked, ns in rows:
        print(f"| {label} | {asked} | {ns / 1e6:.2f} | {ns / gather['none']:.2f} |")
    fresh_ns = best["@failover(fresh_for) fresh hit"]
    print()
    print("| ratio | value | bar |")
    print("|---|---:|---:|")
    shared_ns = best["@failover(fresh_for) fresh hit, memory://?copy=false (shared, as cachetools)"]
    copied_hit = best["cachetools hit, then a deep copy (failover's copier)"]
    print(f"| fresh hit, shared (copy=false) / cachetools hit | {shared_ns / hit:.2f} | <= 3 |")
    both_copied = fresh_ns / copied_hit
    print(f"| fresh hit (copied) / cachetools hit, then a deep copy | {both_copied:.2f} | <= 3 |")
    print(f"| fresh hit (copied) / cachetools hit | {fresh_ns / hit:.2f} | |")
    print(f"| fresh hit / plain call | {fresh_ns / plain:.2f} | |")
    live_ns = best["@failover live success (no fresh_for: upstream called, stored)"]
    print(f"| fresh hit / live success | {fresh_ns / live_ns:.2f} | |")


if __name__ == "__main__":
    main()
