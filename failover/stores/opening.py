"""Opening a shared store from a URL for a command (``failover inspect``, ``clean``...): reached
once, so that an unreachable database is one error, not a warning and a retry on first use.

Here, not in the command line, so that only the stores speak SQLAlchemy and redis-py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..masking import masked_url
from . import schemes
from .base import FailoverStore
from .factory import REDIS_SCHEMES, check_sql_scheme

__all__ = ["driver_errors", "in_process", "open_shared"]


def _sqlalchemy_url(url: str) -> Any:
    """``url`` parsed by SQLAlchemy; ``None`` when it cannot be (the store reports that itself)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        return None


def in_process(url: str) -> bool:
    """Whether the store at ``url`` lives inside this process: nothing of it outlives it."""
    row = schemes.find(url.partition("://")[0].lower())
    if row is not None and row.in_process:
        return True
    from .backends.sql.engine import is_memory

    parsed = _sqlalchemy_url(url) if url.lower().startswith("sqlite") else None
    return parsed is not None and is_memory(parsed)


def _first_line(exc: BaseException) -> str:
    # Drivers' messages go on with the SQL and a documentation link on further lines.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def open_shared(url: str, *, create: bool, table_prefix: str = "") -> FailoverStore:
    """The SQL or Redis store at ``url``, reached once already.

    Args:
        url: a SQLAlchemy or Redis URL.
        create: make the table when missing; without it, a SQLite file must exist (a mistyped
            path is an error, not a new empty file).
        table_prefix: the SQL store's table prefix.

    Raises:
        StoreError: no such SQLite file, or the database cannot be reached.
        ConfigurationError: a URL the store refuses (a misspelt scheme gets the nearest).
    """
    if url.partition("://")[0].lower() in REDIS_SCHEMES:
        from .backends.redis import RedisStore

        redis_store = RedisStore(url)
        try:
            redis_store.client.ping()
        except Exception as exc:  # redis-py's errors
            redis_store.close()
            raise StoreError(f"cannot reach {masked_url(url)}: {_first_line(exc)}") from exc
        return redis_store
    from sqlalchemy.exc import SQLAlchemyError

    from .backends.sql import SqlStore, make_engine
    from .backends.sql.urls import row_options

    check_sql_scheme(url, url.partition("://")[0].lower())  # names the nearest known scheme
    probe = make_engine(row_options(url)[0])  # the store's own options are not the driver's
    try:
        database = probe.url.database
        if (
            not create
            and probe.dialect.name == "sqlite"
            and database not in (None, "", ":memory:")
            and not Path(database).is_file()
        ):
            raise StoreError(f"{masked_url(url)}: no such SQLite file")
        try:
            with probe.connect():
                pass
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot reach {masked_url(url)}: {_first_line(exc)}") from exc
    finally:
        probe.dispose()
    return SqlStore(url, table_prefix=table_prefix, create_table=create)


def driver_errors() -> tuple[type[BaseException], ...]:
    """The errors of the database drivers a store may let through (SQLAlchemy's), for a
    command line that reports them as one line."""
    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:  # pragma: no cover - SQLAlchemy is a dependency
        return ()
    return (SQLAlchemyError,)
