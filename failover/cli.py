"""The ``failover`` command line (also ``python -m failover``).

Commands: ``demo``, ``inspect``, ``clean``, ``scheduler``, ``dashboard`` and ``ops``;
``failover COMMAND --help`` for each.
Errors a user can fix (a bad URL, an unreachable database, a port in use) are one line on stderr
and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socketserver
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, TextIO

from .cleanup import CleanupScheduler
from .engine import Failover, utcnow
from .errors import ConfigurationError, FailoverError
from .expiry import parse_ttl
from .metrics import NULL_METRICS, Metrics, NullMetrics, PrometheusMetrics
from .stores.factory import make_store

if TYPE_CHECKING:
    import sqlalchemy as sa

    from .stores.redis import RedisStore
    from .stores.sql import SqlStore

__all__ = ["main", "render_table"]

PROG = "failover"


class _CliError(Exception):
    """A problem the user can fix, reported as one line."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too, pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: message; see PROG --help`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 on an error (printed as one line on stderr), 130 when
        interrupted.
    """
    args = _parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130
    except _user_errors() as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _user_errors() -> tuple[type[BaseException], ...]:
    # SQLAlchemy is imported only when an error has to be matched, to keep --help fast.
    from sqlalchemy.exc import SQLAlchemyError

    return (_CliError, FailoverError, SQLAlchemyError, OSError)


def _one_line(exc: BaseException) -> str:
    # SQLAlchemy messages carry the SQL and a documentation link on further lines.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    message = lines[0] if lines else type(exc).__name__
    if not isinstance(exc, _CliError | FailoverError):
        message = f"{type(exc).__name__}: {message}"
    return message


def _version() -> str:
    try:
        return version("failover")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Serve the last good answer, marked stale, when an upstream goes down.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="a flaky upstream on loopback, called through @failover: live, stale, live",
        description=(
            "Start a flaky HTTP upstream on 127.0.0.1, call it through @failover while it goes "
            "down and comes back, and print the timeline. A fake clock moves the time on, so a "
            "run takes about a second."
        ),
    )
    demo.add_argument(
        "--store",
        metavar="URL",
        help="store URL (default: a SQLite file in the temporary directory)",
    )
    demo.set_defaults(command=_demo)

    inspect = commands.add_parser(
        "inspect",
        help="list the stored entries, expired ones included",
        description="List every stored entry: name, key, as_of, expire_on, size, live/expired.",
    )
    _store_argument(inspect)
    _table_prefix_argument(inspect)
    inspect.add_argument("--name", help="only the entries of this failover name (or domain)")
    inspect.set_defaults(command=_inspect)

    clean = commands.add_parser(
        "clean",
        help="delete the expired entries once",
        description="Delete the expired entries of the store once and print how many went.",
    )
    _store_argument(clean)
    _table_prefix_argument(clean)
    clean.set_defaults(command=_clean)

    scheduler = commands.add_parser(
        "scheduler",
        help="delete expired entries periodically, in the foreground",
        description=(
            "Run a cleanup now, then every --every, until SIGINT or SIGTERM (exit status 0). "
            "Meant to run as a sidecar or a service of its own."
        ),
    )
    _store_argument(scheduler)
    _table_prefix_argument(scheduler)
    scheduler.add_argument(
        "--every",
        type=_every,
        default="1h",
        metavar="DURATION",
        help="the period: seconds, or e.g. 30s, 15m, 1h, 1d (default: 1h)",
    )
    scheduler.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics",
    )
    scheduler.set_defaults(command=_scheduler)

    dashboard = commands.add_parser(
        "dashboard",
        help="serve the read-only dashboard of a store",
        description=(
            "Serve the dashboard of a store shared by your services: its names (entries, live "
            "and expired, oldest and newest as_of, size) and each name's entries. Per-call "
            "counts are per process: they come from each service's Prometheus metrics."
        ),
    )
    _store_argument(dashboard)
    _table_prefix_argument(dashboard)
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1, this machine only)",
    )
    dashboard.add_argument(
        "--port", type=_port, default=8050, help="the port to listen on (default: 8050)"
    )
    dashboard.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="require this bearer token (open /?token=TOKEN once in a browser)",
    )
    dashboard.add_argument(
        "--show-payloads",
        action="store_true",
        help="show a preview of each stored payload (they may hold personal data)",
    )
    dashboard.set_defaults(command=_dashboard)

    ops = commands.add_parser(
        "ops",
        help="where the shipped alert rules and Grafana dashboard are",
        description=(
            "Print the directory holding alerts.yml (Prometheus alerting rules), "
            "alerts_test.yml (their promtool tests) and grafana-dashboard.json."
        ),
    )
    ops.add_argument("what", choices=["path"], help="path: print the directory")
    ops.set_defaults(command=_ops)
    return parser


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


def _port(text: str) -> int:
    port = int(text) if text.isdigit() else -1
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return port


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        required=True,
        help=(
            "store URL, e.g. sqlite:///failover.db, postgresql+psycopg://user@host/db or "
            "redis://host:6379/0"
        ),
    )


def _display(url: str) -> str:
    """The URL without its password, fit for printing."""
    if "@" not in url:
        return url
    from .stores.sql.engine import masked

    return masked(_sqlalchemy_url(url) or url)


def _sqlalchemy_url(url: str) -> sa.URL | None:
    """``url`` parsed by SQLAlchemy; ``None`` when it cannot be (the store reports that itself)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        return None


def _in_process(url: str) -> bool:
    """Whether the store at ``url`` lives inside this process: nothing of it outlives a command."""
    if url.partition("://")[0].lower() in ("memory", "cachetools"):
        return True
    from .stores.sql.engine import is_memory

    parsed = _sqlalchemy_url(url) if url.lower().startswith("sqlite") else None
    return parsed is not None and is_memory(parsed)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain-text table: columns padded to their widest cell, a rule under the headers.

    Args:
        headers: the column titles.
        rows: the cells, one sequence per row, as many as ``headers``.

    Returns:
        The table, one line per row, without a trailing newline.
    """
    cells = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def _duration(delta: timedelta) -> str:
    if timedelta(0) < delta < timedelta(seconds=1):
        return f"{delta.total_seconds():g}s"
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n]
    return " ".join(parts) or "0s"


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(sep=" ", timespec="seconds")


# -- demo -----------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from . import demo

    store = args.store or demo.default_store()
    out = sys.stdout
    print(f"failover demo: store {_display(store)}", file=out)
    shared = _shared(store)  # the far store of a tiered URL
    in_process = _in_process(shared)
    if in_process:
        result = demo.run(store)
    elif _is_redis(shared) or shared != store:
        # Reached once here; the engine then makes the store from the URL on the demo's clock,
        # which Redis must know to expire the entries when that clock says, not hours early.
        _open(shared, "demo", create=True).close()
        result = demo.run(store)
    else:
        result = demo.run(_open(store, "demo", create=True))
    print(f"upstream {result.upstream_url}/countries/<code>, ttl {_duration(result.ttl)}", file=out)
    print("time: a fake clock that the demo moves on, so nothing waits", file=out)
    print(file=out)
    rows = [
        [
            str(s.number),
            f"+{_duration(s.elapsed)}",
            s.upstream,
            s.call,
            s.value,
            "-" if s.up_to_date is None else str(s.up_to_date),
            "-" if s.age is None else _duration(s.age),
            s.outcome,
        ]
        for s in result.steps
    ]
    headers = ["step", "time", "upstream", "call", "value", "up_to_date", "age", "outcome"]
    print(render_table(headers, rows), file=out)
    print(file=out)
    for s in result.steps:
        if s.error:
            print(f"step {s.number}: {s.error}", file=out)
        if s.note:
            print(f"        re-raised with the note: {s.note}", file=out)
    if not in_process:
        print(f"\nthe entries are kept: {PROG} inspect --store {_display(shared)}", file=out)
    return 0


# -- stores -------------------------------------------------------------------------------------


def _open(url: str, command: str, *, create: bool, table_prefix: str = "") -> SqlStore | RedisStore:
    """The store at ``url``, reached once already.

    Reaching it here turns an unreachable database into one error, where the store would log a
    warning and retry on first use (right for a service starting, noise for a command). Without
    ``create``, a SQLite file must exist: a mistyped path is an error, not a new empty file.
    """
    if "://" not in url or _in_process(url):
        make_store(url).close()  # a malformed URL is reported as such
        raise _CliError(
            f"{url} is a store inside one process, a new empty one here: {PROG} {command} "
            "needs a durable store, e.g. sqlite:///failover.db"
        )
    if _shared(url) != url:
        raise _CliError(
            f"{PROG} {command} reads the shared store of a tiered one: --store "
            f"{_display(_shared(url))}"
        )
    if _is_redis(url):
        return _open_redis(url, table_prefix)
    from sqlalchemy.exc import SQLAlchemyError

    from .stores.factory import check_sql_scheme
    from .stores.sql import SqlStore, make_engine

    check_sql_scheme(url, url.partition("://")[0].lower())  # names the nearest known scheme
    probe = make_engine(url)
    try:
        database = probe.url.database
        if (
            not create
            and probe.dialect.name == "sqlite"
            and database not in (None, "", ":memory:")
            and not Path(database).is_file()
        ):
            raise _CliError(f"{_display(url)}: no such SQLite file")
        try:
            with probe.connect():
                pass
        except SQLAlchemyError as exc:
            raise _CliError(f"cannot reach {_display(url)}: {_one_line(exc)}") from exc
    finally:
        probe.dispose()
    return SqlStore(url, table_prefix=table_prefix, create_table=create)


def _shared(url: str) -> str:
    """The far store's URL of a ``tiered+`` URL; any other URL as it is."""
    return url[len("tiered+") :] if url.lower().startswith("tiered+") else url


def _is_redis(url: str) -> bool:
    return url.partition("://")[0].lower() in ("redis", "rediss", "unix")


def _open_redis(url: str, table_prefix: str) -> RedisStore:
    from .stores.redis import RedisStore

    if table_prefix:
        raise _CliError(
            "--table-prefix is for SQL stores; a Redis store's key prefix is the URL's "
            "prefix option (redis://host/0?prefix=myapp:)"
        )
    store = RedisStore(url)
    try:
        store.client.ping()
    except Exception as exc:  # redis-py's errors, imported only with it
        store.close()
        raise _CliError(f"cannot reach {_display(url)}: {_one_line(exc)}") from exc
    return store


def _table_prefix_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table-prefix",
        default="",
        metavar="PREFIX",
        help="the SqlStore table_prefix the application uses (default: none)",
    )


# -- inspect --------------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    store = _open(args.store, "inspect", create=False, table_prefix=args.table_prefix)
    # The entries are read as stored, not decoded: this process registers no failover, so the
    # codec's allowlist would refuse their types, and sizes are those of what the store holds.
    try:
        found = _stored(store, args.name)
    finally:
        store.close()
    if not found:
        where = f"under {args.name!r} " if args.name else ""
        print(f"no entries {where}in {_display(args.store)}")
        return 0
    now = utcnow()
    rows = []
    for name, key, as_of, expires, size, payload_type in found:
        status = "expired" if expires is not None and expires <= now else "live"
        rows.append([name, key, _time(as_of), _time(expires), str(size), payload_type, status])
    headers = ["name", "key", "as_of", "expire_on", "size", "type", "status"]
    print(render_table(headers, rows))
    expired = sum(row[-1] == "expired" for row in rows)
    print(f"\n{len(rows)} {_plural(len(rows), 'entry', 'entries')}, {expired} expired")
    return 0


_Stored = tuple[str, str, datetime | None, datetime | None, int, str]


def _stored(store: SqlStore | RedisStore, name: str | None) -> Sequence[_Stored]:
    """Every entry (of ``name``) as stored: name, key, as_of, expire_on, size, type."""
    from .stores.sql import SqlStore

    if not isinstance(store, SqlStore):
        return [
            (e.name, e.key, e.as_of, e.expire_on, e.size, e.payload_type)
            for e in store.entries(name)
        ]
    import sqlalchemy as sa

    from .stores.serializer import time_or_none

    c = store.table.c
    query = sa.select(c.name, c.key, c.as_of, c.expire_on, c.payload, c.payload_type)
    if name is not None:
        query = query.where(c.name == name)
    with store.engine.connect() as conn:
        rows = conn.execute(query.order_by(c.name, c.as_of, c.key)).all()
    # Rows written by hand (times out of range or not numbers, a binary or NULL payload) are
    # listed as they are, not a traceback: inspect is what one runs on a suspect table.
    return [
        (n, key, time_or_none(as_of), time_or_none(expire_on), _size(payload), str(type_))
        for n, key, as_of, expire_on, payload, type_ in rows
    ]


def _size(payload: object) -> int:
    if isinstance(payload, str):
        return len(payload.encode(errors="surrogatepass"))
    return len(payload) if isinstance(payload, bytes) else 0


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


# -- clean ----------------------------------------------------------------------------------------


def _clean(args: argparse.Namespace) -> int:
    store = _open(args.store, "clean", create=False, table_prefix=args.table_prefix)
    with Failover(store, metrics=False, async_writes=False) as engine:
        removed = engine.clean()
    why = " (Redis removes expired entries itself)" if _is_redis(args.store) else ""
    print(f"removed {removed} expired {_plural(removed, 'entry', 'entries')}{why}")
    return 0


# -- scheduler ------------------------------------------------------------------------------------


class _Shutdown(Exception):
    """Raised in the main thread by the SIGINT/SIGTERM handler."""


def _shutdown(signum: int, frame: FrameType | None) -> None:
    raise _Shutdown(signal.Signals(signum).name)


class _Report(NullMetrics):
    """Prints each cleanup run, then hands it to the Prometheus metrics (with --metrics-port)."""

    def __init__(self, out: TextIO, metrics: Metrics) -> None:
        self.out = out
        self.metrics = metrics

    def cleanup(self, removed: int, seconds: float) -> None:
        """Count the run, then print it (so the metrics already show a run that was printed)."""
        self.metrics.cleanup(removed, seconds)
        print(f"{_time(utcnow())} cleanup removed {removed} in {seconds:.3f}s", file=self.out)
        self.out.flush()


def _scheduler(args: argparse.Namespace) -> int:
    out = sys.stdout
    logging.basicConfig(format=f"{PROG}: %(levelname)s: %(message)s")
    store = _open(args.store, "scheduler", create=True, table_prefix=args.table_prefix)
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
        f"{PROG} scheduler started: cleaning {_display(args.store)} every "
        f"{_duration(scheduler.every)}{metrics} (SIGINT or SIGTERM stops it)"
    )
    signal_name = _until_signal(started, scheduler.start, scheduler.stop, out)
    print(f"{PROG} scheduler stopped ({signal_name})", file=out, flush=True)
    return 0


def _until_signal(
    started: str, start: Callable[[], object], stop: Callable[[], object], out: TextIO
) -> str:
    """Print ``started``, ``start()``, wait for SIGINT or SIGTERM, then ``stop()``; the
    signal's name."""
    previous = {sig: signal.signal(sig, _shutdown) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(started, file=out, flush=True)
        start()
        threading.Event().wait()  # until a signal handler raises _Shutdown
    except _Shutdown as received:
        signal_name = str(received)
    finally:
        # A second signal while stopping takes the default way out (force).
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop()
    return signal_name


# -- dashboard ------------------------------------------------------------------------------------


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _dashboard(args: argparse.Namespace) -> int:
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from .dashboard import make_store_app

    out = sys.stdout
    logging.basicConfig(format=f"{PROG}: %(levelname)s: %(message)s")
    if not _loopback(args.host) and not args.auth_token:
        print(
            f"{PROG}: warning: listening on {args.host} without --auth-token: anyone who can "
            "reach it can read the stored keys and times",
            file=sys.stderr,
        )
    store = _open(args.store, "dashboard", create=False, table_prefix=args.table_prefix)
    app = make_store_app(
        store, utcnow, show_payloads=args.show_payloads, token=args.auth_token or None
    )

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *values: object) -> None:
            return None  # no access log on stderr: the page refreshes every few seconds

    try:
        server = make_server(args.host, args.port, app, server_class=Server, handler_class=Quiet)
    except OSError as exc:
        store.close()
        raise _CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    host = f"[{args.host}]" if ":" in args.host else args.host
    # Served on a thread: the main thread only waits for the signal, so the handler's exception
    # never lands inside the server's own request handling (which swallows it).
    serving = threading.Thread(target=server.serve_forever, name="failover-dashboard")

    def stop() -> None:
        if serving.is_alive():  # shutdown() would wait forever for a loop that never ran
            server.shutdown()
        server.server_close()
        store.close()

    started = (
        f"{PROG} dashboard of {_display(args.store)} on http://{host}:{args.port}/ "
        "(SIGINT or SIGTERM stops it)"
    )
    signal_name = _until_signal(started, serving.start, stop, out)
    print(f"{PROG} dashboard stopped ({signal_name})", file=out, flush=True)
    return 0


# -- ops ------------------------------------------------------------------------------------------


def _ops(args: argparse.Namespace) -> int:
    from importlib.resources import files

    print(files("failover") / "ops")
    return 0
