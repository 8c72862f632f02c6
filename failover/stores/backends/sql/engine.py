"""The SQLAlchemy engine a `SqlStore` runs on: pools, SQLite's settings, fork safety."""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from ....errors import ConfigurationError
from ....forks import INHERITED
from ....masking import masked_url
from ...layers.deadline import abandoned
from .limits import CONNECT_TIMEOUT_S, KEEPALIVES, STATEMENT_TIMEOUT_MS
from .psycopg import ping_when_idle

__all__ = [
    "CONNECT_TIMEOUT_S",
    "first_line",
    "is_memory",
    "is_psycopg",
    "make_engine",
    "prepares",
    "shared_engine",
]

_BUSY_TIMEOUT_MS = 5_000
_SQLITE_POOL = {"pool_size": 8, "max_overflow": 8}
_SERVER_POOL = {"pool_size": 10, "max_overflow": 10, "pool_pre_ping": True}


def first_line(exc: BaseException) -> str:
    """The first line of a driver's error message."""
    # SQLAlchemy's messages go on with the SQL and a documentation link.
    return str(exc).split("\n", 1)[0]


def is_memory(url: sa.URL) -> bool:
    """Whether ``url`` is an in-memory SQLite database."""
    return url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"


def sqlite_text(data: bytes) -> str | bytes:
    """A TEXT value read from SQLite: its text, or its bytes when they are not UTF-8."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    # SQLite keeps TEXT as the bytes it was given: a row another program wrote may hold bytes
    # that are not UTF-8, which the driver's own decoding refuses with an error that fails the
    # whole statement (every slice of a find_many, a whole listing). Read as bytes instead, such
    # a value is one corrupt row, as a BLOB is.
    dbapi_connection.text_factory = sqlite_text
    # Several processes share one file: readers never wait for the writer (WAL), and a writer
    # waits for another one instead of failing at once (busy timeout). synchronous=NORMAL is
    # safe with WAL (a crash loses at most the last commits, never the file).
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


_PID = "failover.pid"  # the process that opened a pooled connection, in its record's info


def _opened_here(dbapi_connection: Any, record: Any) -> None:
    record.info[_PID] = os.getpid()


def _discard_abandoned(dbapi_connection: Any, record: Any) -> None:
    """A pool ``checkin`` listener: the connection of an operation its caller gave up at the
    engine's ``store_timeout`` is closed, never lent again."""
    if dbapi_connection is not None and abandoned():
        record.invalidate()


def _checked_out_here(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """A pool ``checkout`` listener: a connection the parent of a forked process opened is
    replaced, never used (its socket is the parent's: two processes talking on one session
    corrupt both) nor closed (that would end the parent's session, or drop its file locks).

    Raises:
        sqlalchemy.exc.DisconnectionError: a parent's connection: the pool opens a new one.
    """
    pid = record.info.get(_PID)
    if pid is None or pid == os.getpid():
        return
    INHERITED.append(dbapi_connection)
    record.dbapi_connection = proxy.dbapi_connection = None
    raise sa_exc.DisconnectionError(f"connection opened by process {pid} before a fork")


_POOLERS = ("transaction", "statement", "session")
_UNPREPARED: weakref.WeakSet[Engine] = weakref.WeakSet()  # engines behind a pooling bouncer


def prepares(engine: Engine) -> bool:
    """Whether statements may be prepared server-side on ``engine``'s connections (not behind
    a transaction- or statement-pooling PgBouncer)."""
    return engine not in _UNPREPARED


def _pooler(parsed: sa.URL, declared: str | None) -> tuple[sa.URL, str | None]:
    """``parsed`` without its ``pgbouncer`` option, and the pooling mode declared (by the
    option or the setting).

    Raises:
        ConfigurationError: an unknown mode, or the option on another database than PostgreSQL.
    """
    option = parsed.query.get("pgbouncer")
    if isinstance(option, tuple):
        option = option[-1]
    mode = option if option is not None else declared
    if mode is None:
        return parsed, None
    shown = masked_url(parsed)
    if mode not in _POOLERS:
        raise ConfigurationError(
            f"store URL {shown!r}: pgbouncer must be one of {', '.join(_POOLERS)}, got {mode!r}"
        )
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(f"store URL {shown!r}: pgbouncer applies to PostgreSQL only")
    return parsed.difference_update_query(["pgbouncer"]), mode


def make_engine(url: str | sa.URL, *, pgbouncer: str | None = None, **engine_kwargs: Any) -> Engine:
    """A SQLAlchemy engine set up as `SqlStore` sets up its own.

    Use it to share one pool between several stores (one per ``table_prefix``). Connections are
    pooled (a pool sized for threads; pre-ping on database servers). SQLite files get WAL mode and
    a 5 s busy timeout on every connection, so several processes can share one file; an in-memory
    SQLite database is one connection that threads take in turn. Errors leave a statement's
    parameters out (``hide_parameters``: payloads and labels are data). Fork-safe: a process forked
    after connections were opened (a preforking server's workers) opens its own, and never uses
    nor closes its parent's.

    Args:
        url: a SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``).
        pgbouncer: the pooling mode of a PgBouncer between the store and PostgreSQL
            (``"transaction"``, ``"statement"``, ``"session"``; the URL's ``?pgbouncer=``
            option says the same). In transaction and statement modes nothing is prepared on
            the server: each transaction may run on another server connection, where a
            statement prepared on the last one does not exist (PgBouncer before 1.21 does not
            track them).
        **engine_kwargs: passed to `sqlalchemy.create_engine`, over these defaults.

    Raises:
        ConfigurationError: not a URL, an unknown database, or its driver is not installed.
    """
    try:
        parsed = sa.make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        raise ConfigurationError(
            f"store URL {masked_url(url)!r} is not a SQLAlchemy URL (e.g. 'sqlite:///failover.db')"
        ) from None
    parsed, pooler = _pooler(parsed, pgbouncer)
    sqlite = parsed.get_backend_name() == "sqlite"
    fast = not sqlite and is_psycopg(parsed)
    defaults = _pool(parsed, sqlite, fast, pooler, engine_kwargs)
    # SQLAlchemy's errors quote a statement's parameters (payloads, labels: argument values), and
    # a failed store operation is logged at WARNING with its traceback: the SQL only.
    engine = _created(parsed, {"hide_parameters": True, **defaults, **engine_kwargs})
    if pooler in ("transaction", "statement"):
        _UNPREPARED.add(engine)
    if not (sqlite and is_memory(parsed)):  # one in-memory database: the child's own copy
        # First of the checkout listeners: nothing may run on a parent's connection.
        sa.event.listen(engine, "connect", _opened_here)
        sa.event.listen(engine, "checkout", _checked_out_here)
        sa.event.listen(engine, "checkin", _discard_abandoned)
    if sqlite:
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    if fast:
        sa.event.listen(engine, "checkout", ping_when_idle)
    return engine


def shared_engine(url_or_engine: str | sa.URL | Engine) -> tuple[Engine, bool]:
    """The engine of ``url_or_engine`` (made by `make_engine` from a URL), and whether it was
    made here (and is disposed of by its maker)."""
    if isinstance(url_or_engine, Engine):
        return url_or_engine, False
    return make_engine(url_or_engine), True


def _pool(
    parsed: sa.URL, sqlite: bool, fast: bool, pooler: str | None, engine_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The engine's default settings for ``parsed`` (``engine_kwargs`` win over them)."""
    kwargs: dict[str, Any]
    if sqlite and is_memory(parsed):
        return {
            "poolclass": sa.QueuePool,
            "pool_size": 1,
            "max_overflow": 0,
            "connect_args": {"check_same_thread": False},
        }
    if sqlite:
        folder = Path(parsed.database or "").parent
        if not parsed.query.get("uri") and not folder.is_dir():
            raise ConfigurationError(
                f"store URL {masked_url(parsed)!r}: the folder {str(folder)!r} does not exist"
            )
        return {"poolclass": sa.QueuePool, **_SQLITE_POOL}
    kwargs = dict(_SERVER_POOL)
    if parsed.get_backend_name() == "postgresql":
        # An unreachable server fails in seconds, not after the system's TCP timeout.
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S, **KEEPALIVES}
        if pooler is None:
            kwargs["connect_args"]["options"] = f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"
        if pooler in ("transaction", "statement") and fast:
            # psycopg prepares a statement run 5 times; a pooled session must not.
            kwargs["connect_args"]["prepare_threshold"] = None
    if fast and "pool_pre_ping" not in engine_kwargs:
        # A ping per checkout costs as much as a point read: idle connections only, below.
        kwargs["pool_pre_ping"] = False
    if fast and "pool_use_lifo" not in engine_kwargs:
        kwargs["pool_use_lifo"] = True  # busy connections stay busy, with their prepared plans
    return kwargs


def _created(parsed: sa.URL, kwargs: dict[str, Any]) -> Engine:
    """`sqlalchemy.create_engine`, its refusals as `ConfigurationError` naming the URL."""
    shown = masked_url(parsed)
    try:
        return sa.create_engine(parsed, **kwargs)
    except sa_exc.NoSuchModuleError:
        raise ConfigurationError(
            f"store URL {shown!r}: unknown database or driver {parsed.drivername!r}"
        ) from None
    except ImportError as exc:
        hint = ""
        if parsed.get_backend_name() == "postgresql":
            hint = " (pip install failover[postgresql])"
            if parsed.get_driver_name() != "psycopg":  # psycopg2, the default of postgresql://
                hint = " (use postgresql+psycopg://, with pip install failover[postgresql])"
        raise ConfigurationError(
            f"store URL {shown!r}: the driver of {parsed.drivername!r} is not installed: "
            f"{exc}{hint}"
        ) from None
    except (sa_exc.ArgumentError, TypeError) as exc:
        raise ConfigurationError(f"store URL {shown!r}: {exc}") from None


def is_psycopg(url: sa.URL) -> bool:
    """Whether ``url`` is PostgreSQL through psycopg 3 (the fast path's driver)."""
    try:
        return url.get_backend_name() == "postgresql" and url.get_driver_name() == "psycopg"
    except (sa_exc.NoSuchModuleError, sa_exc.ArgumentError):
        return False  # create_engine says what is wrong with it
