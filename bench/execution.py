"""Execution-layer benchmark: what a circuit breaker and a bulkhead add to a decorated call, and
how fast a call is served from the store while the breaker is open, in one process.

Run with ``.venv/bin/python bench/execution.py``. Every case uses the in-memory store (copying
on, metrics off) and cycles over 1,000 keys; the cases are interleaved round by round and each
keeps its best round (`bench/run.py`'s method), so the ratios compare like with like:

- success path: basic execution, ``breaker=``, ``max_concurrency=`` (sync and ``async def``),
  and a weighted call on a shared pool (``bulkhead="pool"``, ``weight=3``) against
  ``max_concurrency=`` (one permit of a private pool);
- recover path: the upstream raises and the entry is found (plain), against the breaker open
  (the upstream is not called: pybreaker's error is the cause, the entry is found);
- soft timeout, for information: every call hands the upstream to a worker thread (sync) or a
  task (async), which costs what a thread or task hand-off costs.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable
from typing import Any

import pybreaker
from run import HOT, Case, acountry, broken, country, interleaved

import failover

BARS = [
    ("breaker / basic, success", "sync: breaker success", "sync: basic success", 1.5),
    ("bulkhead / basic, success", "sync: bulkhead success", "sync: basic success", 1.3),
    ("breaker / basic, async success", "async: breaker success", "async: basic success", 1.5),
    ("bulkhead / basic, async success", "async: bulkhead success", "async: basic success", 1.3),
    (
        "weighted pool / bulkhead, success",
        "sync: weighted pool success",
        "sync: bulkhead success",
        1.3,
    ),
    (
        "weighted pool / bulkhead, async success",
        "async: weighted pool success",
        "async: bulkhead success",
        1.3,
    ),
    ("breaker open / plain, recover", "sync: recover, breaker open", "sync: recover", 2.0),
    (
        "breaker open / plain, async recover",
        "async: recover, breaker open",
        "async: recover",
        2.0,
    ),
]


async def abroken(code: str) -> dict[str, str]:
    raise ConnectionError(code)


def tripped() -> pybreaker.CircuitBreaker:
    """A breaker that stays open for the whole run."""
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=3600)
    cb.open()
    return cb


def cases() -> tuple[list[Case], list[Case], failover.Failover]:
    engine = failover.Failover("memory://", metrics=False, policy="never_throw")
    engine.bulkhead_pool("bench", permits=24)

    def decorate(name: str, fn: Callable[..., Any], **options: Any) -> Any:
        return failover.failover(f"bench.{name}", domain="bench", engine=engine, **options)(fn)

    fill = decorate("fill", country)
    for k in HOT:  # every recover finds its entry (one domain: the same entries)
        fill(k)
    sync: list[Case] = [
        ("sync: plain call", country, HOT),
        ("sync: basic success", decorate("basic", country), HOT),
        ("sync: breaker success", decorate("breaker", country, breaker=True), HOT),
        ("sync: bulkhead success", decorate("bulkhead", country, max_concurrency=8), HOT),
        (
            "sync: weighted pool success",
            decorate("weighted", country, bulkhead="bench", weight=3),
            HOT,
        ),
        (
            "sync: breaker + bulkhead success",
            decorate("both", country, breaker=True, max_concurrency=8),
            HOT,
        ),
        ("sync: soft timeout success (pool hand-off)", decorate("to", country, timeout=5), HOT),
        ("sync: recover", decorate("recover", broken), HOT),
        ("sync: recover, breaker open", decorate("open", broken, breaker=tripped()), HOT),
    ]
    asyn: list[Case] = [
        ("async: plain await", acountry, HOT),
        ("async: basic success", decorate("abasic", acountry), HOT),
        ("async: breaker success", decorate("abreaker", acountry, breaker=True), HOT),
        ("async: bulkhead success", decorate("abulkhead", acountry, max_concurrency=8), HOT),
        (
            "async: weighted pool success",
            decorate("aweighted", acountry, bulkhead="bench", weight=3),
            HOT,
        ),
        ("async: soft timeout success (task)", decorate("ato", acountry, timeout=5), HOT),
        ("async: recover", decorate("arecover", abroken), HOT),
        ("async: recover, breaker open", decorate("aopen", abroken, breaker=tripped()), HOT),
    ]
    return sync, asyn, engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5_000, help="calls per batch")
    parser.add_argument("--rounds", type=int, default=30, help="batches of each case")
    args = parser.parse_args()
    sync, asyn, engine = cases()
    best = interleaved(sync, asyn, args.number, args.rounds)
    engine.close()

    print(
        f"Python {platform.python_version()}, {platform.machine()}; best of {args.rounds} "
        f"interleaved batches of {args.number:,} calls\n"
    )
    print("| path | ns/call | x basic |")
    print("|---|---:|---:|")
    for group, base in (
        (sync, best["sync: basic success"]),
        (asyn, best["async: basic success"]),
    ):
        for label, _, _ in group:
            print(f"| {label} | {best[label]:,.0f} | {best[label] / base:.2f} |")
    print()
    print("| ratio | value | bar |")
    print("|---|---:|---:|")
    for label, case, base, bar in BARS:
        ratio = best[case] / best[base]
        print(f"| {label} | {ratio:.2f} | <= {bar:g}{'' if ratio <= bar else ' MISSED'} |")


if __name__ == "__main__":
    main()
