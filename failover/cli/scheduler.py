"""``failover scheduler``: delete expired entries periodically, in the foreground."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
from datetime import timedelta
from typing import Any, TextIO

from ..cleanup import CleanupScheduler
from ..engine import Failover, utcnow
from ..errors import ConfigurationError
from ..expiry import parse_ttl
from ..metrics import NULL_METRICS, Metrics, NullMetrics, PrometheusMetrics
from .common import (
    PROG,
    display,
    duration,
    open_store,
    port,
    store_argument,
    table_prefix_argument,
    time_text,
    until_signal,
)

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    scheduler = commands.add_parser(
        "scheduler",
        help="delete expired entries periodically, in the foreground",
        description=(
            "Run a cleanup now, then every --every, until SIGINT or SIGTERM (exit status 0). "
            "Meant to run as a sidecar or a service of its own."
        ),
    )
    store_argument(scheduler)
    table_prefix_argument(scheduler)
    scheduler.add_argument(
        "--every",
        type=_every,
        default="1h",
        metavar="DURATION",
        help="the period: seconds, or e.g. 30s, 15m, 1h, 1d (default: 1h)",
    )
    scheduler.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics",
    )
    scheduler.set_defaults(command=run)


def _every(text: str) -> timedelta:
    value: float | str = text
    with contextlib.suppress(ValueError):
        value = float(text)  # a bare number is seconds, as in the Python API
    try:
        every = parse_ttl(value, "failover scheduler", "--every")
    except (ConfigurationError, ValueError, OverflowError) as exc:  # nan, inf, past timedelta.max
        if "at most a century" in str(exc):
            raise argparse.ArgumentTypeError(f"{text!r} is too long (at most a century)") from None
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive duration (seconds, or e.g. 30s, 15m, 1h, 1d)"
        ) from None
    if every.total_seconds() > threading.TIMEOUT_MAX:  # the scheduler's thread could not wait
        raise argparse.ArgumentTypeError(
            f"{text!r} is too long (at most {int(threading.TIMEOUT_MAX)} seconds)"
        )
    return every


class _Report(NullMetrics):
    """Prints each cleanup run, then hands it to the Prometheus metrics (with --metrics-port)."""

    def __init__(self, out: TextIO, metrics: Metrics) -> None:
        self.out = out
        self.metrics = metrics

    def cleanup(self, removed: int, seconds: float) -> None:
        """Count the run, then print it (so the metrics already show a run that was printed)."""
        self.metrics.cleanup(removed, seconds)
        print(f"{time_text(utcnow())} cleanup removed {removed} in {seconds:.3f}s", file=self.out)
        self.out.flush()


def run(args: argparse.Namespace) -> int:
    """Run the command."""
    out = sys.stdout
    logging.basicConfig(format=f"{PROG}: %(levelname)s: %(message)s")
    store = open_store(args.store, "scheduler", create=True, table_prefix=args.table_prefix)
    engine = Failover(store, metrics=False, async_writes=False)
    try:
        metrics: Metrics = NULL_METRICS
        if args.metrics_port is not None:
            from prometheus_client import CollectorRegistry, start_http_server

            # A registry of its own: only the scheduler's metrics, not the process's defaults.
            registry = CollectorRegistry()
            metrics = PrometheusMetrics.for_registry(registry)
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)
        scheduler = CleanupScheduler(engine, args.every, metrics=_Report(out, metrics))
        return _serve(scheduler, args, out)
    finally:
        engine.close()


def _serve(scheduler: CleanupScheduler, args: argparse.Namespace, out: TextIO) -> int:
    metrics = (
        f", metrics on http://127.0.0.1:{args.metrics_port}/metrics"
        if args.metrics_port is not None
        else ""
    )
    # Printed before the first run's line: whoever waits for "started" can signal now.
    started = (
        f"{PROG} scheduler started: cleaning {display(args.store)} every "
        f"{duration(scheduler.every)}{metrics} (SIGINT or SIGTERM stops it)"
    )
    signal_name = until_signal(started, scheduler.start, scheduler.stop, out)
    print(f"{PROG} scheduler stopped ({signal_name})", file=out, flush=True)
    return 0
