"""Batched writes of this checkout's stores against another checkout's (``--before``), in one
process, on the same servers: SQLite, a throwaway PostgreSQL, a throwaway ``redis-server`` and
the test suite's Redis Cluster (3 masters, 3 replicas).

Run with ``.venv/bin/python bench/ab_writes.py --before /path/to/other/checkout`` (its
``failover`` package is imported as ``failover_before``). Each round writes 1,000 fresh entries
(inserts), then the same entries again (upserts), on both sides in turn (the order alternating
round by round); the ratio is the median of the rounds' time ratios (after / before), so that
load elsewhere on the host moves both sides alike. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/ starts the servers

BATCH = 1_000


def batch(package: Any, tag: str, now: datetime) -> list[Any]:
    later = now + timedelta(hours=1)
    return [
        package.payload.envelope(
            "bench.rates",
            f"{tag}{i:06d}",
            {"code": "EUR", "rate": 1.085 + i / 1e6, "source": "ecb", "n": i},
            now,
            later,
            True,
        )
        for i in range(BATCH)
    ]


def compare(label: str, sides: dict[str, tuple[Any, Any]], rounds: int) -> list[str]:
    """Rows of ``label``: each side is (package, store)."""
    times: dict[tuple[str, str], list[float]] = {}
    ratios: dict[str, list[float]] = {"inserts": [], "upserts": []}
    names = list(sides)
    for r in range(rounds + 1):
        now = datetime.now(UTC)
        got: dict[str, tuple[float, float]] = {}
        for side in names if r % 2 else reversed(names):
            package, store = sides[side]
            entries = batch(package, f"r{r}-", now)
            start = time.perf_counter()
            store.store_many(entries)
            inserts = time.perf_counter() - start
            start = time.perf_counter()
            store.store_many(entries)
            got[side] = (inserts, time.perf_counter() - start)
        if r == 0:
            continue  # warm-up: connections, the script loaded
        for i, kind in enumerate(("inserts", "upserts")):
            ratios[kind].append(got["after"][i] / got["before"][i])
            for side in names:
                times.setdefault((side, kind), []).append(got[side][i])
    return [
        f"| {label}, {kind} | {BATCH / statistics.median(times['before', kind]):,.0f} /s | "
        f"{BATCH / statistics.median(times['after', kind]):,.0f} /s | "
        f"{statistics.median(ratios[kind]):.2f} |"
        for kind in ("inserts", "upserts")
    ]


def _backends(package: Any) -> tuple[Any, Any]:
    """The SQL and Redis store modules of a checkout: under ``stores.backends`` since the
    stores were laid out by kind, directly under ``stores`` before."""
    for where in ("stores.backends", "stores"):
        try:
            return (
                importlib.import_module(f"{package.__name__}.{where}.sql"),
                importlib.import_module(f"{package.__name__}.{where}.redis"),
            )
        except ModuleNotFoundError:
            continue
    raise SystemExit(f"{package.__name__}: no SQL and Redis stores found")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a checkout holding the other failover")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "failover_before").symlink_to(Path(args.before).resolve() / "failover")
        sys.path.insert(0, tmp)
        before = importlib.import_module("failover_before")
        import failover as after

        backends = {package: _backends(package) for package in (before, after)}
        from tests import postgres, redis_ha, redis_server

        def stores(make: Callable[[Any, str], Any]) -> dict[str, tuple[Any, Any]]:
            return {side: (p, make(p, side)) for side, p in (("before", before), ("after", after))}

        rows: list[str] = []
        sql = stores(lambda p, side: backends[p][0].SqlStore(f"sqlite:///{tmp}/{side}.db"))
        rows += compare("SQLite (WAL file)", sql, args.rounds)
        pg = postgres.server()
        try:
            sql = stores(lambda p, side: backends[p][0].SqlStore(pg.url, table_prefix=f"{side}_"))
            rows += compare("PostgreSQL (local)", sql, args.rounds)
            for _, store in sql.values():
                store.close()
        finally:
            postgres.stop()
        for label, url in (
            ("Redis (local)", redis_server.server().url),
            ("Redis Cluster (3 masters)", redis_ha.cluster().url),
        ):
            kv = stores(lambda p, side, url=url: backends[p][1].RedisStore(url, prefix=f"{side}:"))
            rows += compare(label, kv, args.rounds)
            for _, store in kv.values():
                store.close()
        redis_server.stop()
        redis_ha.stop()
    print(f"batched writes of {BATCH:,}, median of {args.rounds} interleaved rounds\n")
    print("| store | before | after | after / before (time) |\n|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
