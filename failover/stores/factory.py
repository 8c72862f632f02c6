"""`make_store`: a store from a URL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigurationError
from .base import FailoverStore

__all__ = ["make_store"]


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
        ConfigurationError: an unknown scheme or option; for a SQL URL, one SQLAlchemy cannot
            parse, an unknown database, or a driver that is not installed (named in a one-line
            message, the password masked).
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
    try:
        from .sql import SqlStore
    except ImportError as exc:  # pragma: no cover - sqlalchemy is a dependency
        raise ConfigurationError(f"SQL stores need SQLAlchemy ({exc})") from exc
    return SqlStore(url)  # SqlStore turns a bad URL into a ConfigurationError naming it
