"""`make_store`: a store from a URL."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigurationError
from .base import FailoverStore

__all__ = ["make_store"]

# The schemes make_store handles itself; any other is a SQLAlchemy URL.
_NATIVE = ("memory", "cachetools")
_SUPPORTED = (
    "memory://, cachetools://, or a SQLAlchemy URL such as sqlite:///path.db or "
    "postgresql+psycopg://user@host/db"
)
# SQLAlchemy's own dialects, and what people write for them: suggested by nearest spelling.
_SQL_SCHEMES = ("sqlite", "postgresql+psycopg", "mysql", "mariadb", "mssql", "oracle")
_ALIASES = {
    "postgres": "postgresql+psycopg",  # Heroku's and libpq's spelling, gone from SQLAlchemy 1.4
    "postgresql+psycopg3": "postgresql+psycopg",
    "pg": "postgresql+psycopg",
    "psql": "postgresql+psycopg",
    "sqlite3": "sqlite",
    "mem": "memory",
    "inmemory": "memory",
    "in-memory": "memory",
    "ttl": "cachetools",
}


def _nearest(scheme: str) -> str | None:
    """The supported scheme ``scheme`` most likely misspells, or ``None``."""
    candidates = [*_NATIVE, *_SQL_SCHEMES, *_ALIASES]
    close = difflib.get_close_matches(scheme, candidates, n=1, cutoff=0.6)
    return _ALIASES.get(close[0], close[0]) if close else None


def _check_sql_scheme(url: str, scheme: str) -> None:
    """Refuse a scheme SQLAlchemy has no dialect for, naming the supported ones and the nearest.

    Raises:
        ConfigurationError: an unknown scheme.
    """
    import sqlalchemy as sa
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        sa.make_url(url).get_dialect()  # loads the dialect's module, not its driver
        return
    except NoSuchModuleError:
        pass
    except (ArgumentError, ValueError):
        return  # not a URL SQLAlchemy can parse: SqlStore says so, naming it
    from .sql import _masked

    nearest = _nearest(scheme)
    hint = f" (did you mean {nearest}://?)" if nearest else ""
    raise ConfigurationError(
        f"store URL {_masked(url)!r}: unknown scheme {scheme!r}{hint}; supported: {_SUPPORTED}"
    )


def _int_options(url: str, allowed: set[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name not in allowed:
            raise ConfigurationError(
                f"store URL {url!r}: unknown option {name!r}; allowed: {', '.join(sorted(allowed))}"
            )
        try:
            options[name] = int(value)
        except ValueError:
            raise ConfigurationError(
                f"store URL {url!r}: option {name!r} must be an integer, got {value!r}"
            ) from None
    return options


def make_store(url: str, *, clock: Callable[[], datetime] | None = None) -> FailoverStore:
    """A raw store from a URL.

    ``memory://?max_entries=10000``, ``cachetools://?maxsize=10000``, or any SQLAlchemy URL
    (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``) for a `SqlStore`.

    Raises:
        ConfigurationError: an unknown scheme (the message lists the supported ones and suggests
            the nearest: ``memroy://`` → ``memory://``, ``postgres://`` →
            ``postgresql+psycopg://``) or option; for a SQL URL, one SQLAlchemy cannot parse, or a
            driver that is not installed (named in a one-line message, the password masked).
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"store URL {url!r} is not a URL (e.g. 'memory://')")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        from .memory import InMemoryStore

        return InMemoryStore(**_int_options(url, {"max_entries"}))
    if scheme == "cachetools":
        from .ttl import CachetoolsStore

        return CachetoolsStore(**_int_options(url, {"maxsize"}), clock=clock)
    _check_sql_scheme(url, scheme)
    from .sql import SqlStore

    return SqlStore(url)  # SqlStore turns a bad URL into a ConfigurationError naming it
