"""What the commands share: the store they open, its URL shown without a password, plain-text
tables and durations, one-line errors, and the wait for SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from types import FrameType
from typing import TextIO

from ..errors import FailoverError, StoreError
from ..masking import masked_url
from ..stores.base import FailoverStore
from ..stores.factory import make_store
from ..stores.opening import in_process, open_shared

__all__ = [
    "PROG",
    "STORE_VARIABLE",
    "CliError",
    "display",
    "duration",
    "from_environment",
    "in_process",
    "is_redis",
    "one_line",
    "open_store",
    "plural",
    "port",
    "render_table",
    "shared",
    "store_argument",
    "table_prefix_argument",
    "time_text",
    "until_signal",
]

PROG = "failover"
STORE_VARIABLE = "FAILOVER_STORE"
"""The store URL when ``--store`` is not given: as `failover.Failover.from_env` reads it, and out
of the process list (``ps`` shows every argument, a URL's password with it)."""


class CliError(Exception):
    """A problem the user can fix, reported as one line."""


def one_line(exc: BaseException) -> str:
    """The first line of an error's message (with its type, unless the user can fix it)."""
    # SQLAlchemy messages carry the SQL and a documentation link on further lines.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    message = lines[0] if lines else type(exc).__name__
    if not isinstance(exc, CliError | FailoverError):
        message = f"{type(exc).__name__}: {message}"
    return message


def port(text: str) -> int:
    """A TCP port argument (argparse ``type=``)."""
    port = int(text) if text.isdigit() else -1
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return port


def from_environment(variable: str) -> str | None:
    """The value of environment ``variable``; ``None`` when unset or blank (as
    `failover.Failover.from_env` reads it)."""
    return os.environ.get(variable, "").strip() or None


def store_argument(parser: argparse.ArgumentParser) -> None:
    """Add the ``--store URL`` argument (default: the ``FAILOVER_STORE`` variable)."""
    default = from_environment(STORE_VARIABLE)
    parser.add_argument(
        "--store",
        metavar="URL",
        required=default is None,
        default=default,
        help=(
            "store URL, e.g. sqlite:///failover.db, postgresql+psycopg://user@host/db or "
            f"redis://host:6379/0 (default: ${STORE_VARIABLE}; a URL with a password is best "
            "given there: every process on the machine can read a command's arguments)"
        ),
    )


def display(url: str) -> str:
    """The URL without its password, fit for printing."""
    return masked_url(url)


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


def duration(delta: timedelta) -> str:
    """A duration as ``1h 2m 3s``."""
    if timedelta(0) < delta < timedelta(seconds=1):
        return f"{delta.total_seconds():g}s"
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n]
    return " ".join(parts) or "0s"


def time_text(value: datetime | None) -> str:
    """A time to the second, or ``-``."""
    return "-" if value is None else value.isoformat(sep=" ", timespec="seconds")


def open_store(url: str, command: str, *, create: bool, table_prefix: str = "") -> FailoverStore:
    """The store at ``url``, reached once already.

    Reaching it here turns an unreachable database into one error, where the store would log a
    warning and retry on first use (right for a service starting, noise for a command). Without
    ``create``, a SQLite file must exist: a mistyped path is an error, not a new empty file.
    """
    if "://" not in url or in_process(url):
        make_store(url).close()  # a malformed URL is reported as such
        raise CliError(
            f"{display(url)} is a store inside one process, a new empty one here: {PROG} {command} "
            "needs a durable store, e.g. sqlite:///failover.db"
        )
    if shared(url) != url:
        raise CliError(
            f"{PROG} {command} reads the shared store of a tiered one: --store "
            f"{display(shared(url))}"
        )
    if is_redis(url) and table_prefix:
        raise CliError(
            "--table-prefix is for SQL stores; a Redis store's key prefix is the URL's "
            "prefix option (redis://host/0?prefix=myapp:)"
        )
    try:
        return open_shared(url, create=create, table_prefix=table_prefix)
    except StoreError as exc:
        raise CliError(str(exc)) from exc


def shared(url: str) -> str:
    """The far store's URL of a ``tiered+`` URL; any other URL as it is."""
    return url[len("tiered+") :] if url.lower().startswith("tiered+") else url


def is_redis(url: str) -> bool:
    """Whether ``url`` is a Redis store's."""
    return url.partition("://")[0].lower() in ("redis", "rediss", "unix")


def table_prefix_argument(parser: argparse.ArgumentParser) -> None:
    """Add the ``--table-prefix`` argument."""
    parser.add_argument(
        "--table-prefix",
        default="",
        metavar="PREFIX",
        help="the SqlStore table_prefix the application uses (default: none)",
    )


def plural(n: int, one: str, many: str) -> str:
    """``one`` or ``many``, by ``n``."""
    return one if n == 1 else many


class _Shutdown(Exception):
    """Raised in the main thread by the SIGINT/SIGTERM handler."""


def _shutdown(signum: int, frame: FrameType | None) -> None:
    raise _Shutdown(signal.Signals(signum).name)


def until_signal(
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
