"""The store URL schemes: one table from a scheme to its store maker and its per-tenant maker.

`make_store` and `per_tenant` (`failover.stores.factory`) both look a URL's scheme up here; the
table also writes the supported list and the spelling hints of their error messages. The
library's own schemes (``memory``, ``cachetools``, the Redis ones, ``tiered+``) are registered
by `failover.stores.factory`; a SQLAlchemy URL is the fallback family, for any scheme not in the
table. A store of your own adds its scheme with one line::

    register_scheme("kv", lambda url, clock: KvStore(url))
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .base import FailoverStore
    from .layers.tenant_stores import TenantStores

__all__ = ["Scheme", "find", "nearest", "register_scheme", "registered", "supported"]

Clock = Callable[[], datetime] | None
StoreMaker = Callable[[str, Clock], "FailoverStore"]
"""``(url, clock) -> store``: ``clock`` is the engine's time source, or ``None``."""
TenantMaker = Callable[[str, Clock], "TenantStores"]
"""``(url, clock) -> a factory tenant -> store`` (a `TenantStores`)."""

_NAME = re.compile(r"[a-z][a-z0-9.+-]*")

# SQLAlchemy's own dialects, and what people write for them: suggested by nearest spelling.
SQL_SCHEMES = ("sqlite", "postgresql+psycopg", "mysql", "mariadb", "mssql", "oracle")
_SQL_ALIASES = {
    "postgres": "postgresql+psycopg",  # Heroku's and libpq's spelling, gone from SQLAlchemy 1.4
    "postgresql+psycopg3": "postgresql+psycopg",
    "pg": "postgresql+psycopg",
    "psql": "postgresql+psycopg",
    "sqlite3": "sqlite",
}
_SQL_FAMILY = "a SQLAlchemy URL such as sqlite:///path.db or postgresql+psycopg://user@host/db"


@dataclass(frozen=True, slots=True)
class Scheme:
    """One URL scheme's row of the table.

    Attributes:
        name: the scheme, lower case (``"kv"``); one ending in ``+`` names a family of URLs
            that start with it (``"tiered+"``: ``tiered+redis://...``).
        make: makes the store of a URL.
        per_tenant: makes a factory ``tenant -> store`` from a URL, or ``None``: the scheme has
            no per-tenant stores (`per_tenant` refuses it, naming it).
        in_process: its stores live inside this process (nothing of them outlives it).
        misspellings: what people write for it, suggested in error messages (``"mem"``).
    """

    name: str
    make: StoreMaker
    per_tenant: TenantMaker | None = None
    in_process: bool = False
    misspellings: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        """How the supported list shows it: ``kv://``, ``tiered+<url>``."""
        return f"{self.name}<url>" if self.name.endswith("+") else f"{self.name}://"


_TABLE: dict[str, Scheme] = {}
_BUILTIN: set[str] = set()


def register_scheme(
    name: str,
    make: StoreMaker,
    per_tenant: TenantMaker | None = None,
    *,
    in_process: bool = False,
    misspellings: Iterable[str] = (),
) -> None:
    """Make ``name://`` URLs open a store of your own, in `make_store`, ``Failover(store=...)``
    and (with ``per_tenant``) under multi-tenancy.

    Registering a scheme again replaces it; the library's own schemes cannot be replaced.

    Args:
        name: the scheme, e.g. ``"kv"`` for ``kv://...`` URLs.
        make: ``(url, clock) -> store``; ``clock`` is the engine's time source or ``None``.
        per_tenant: ``(url, clock) -> factory tenant -> store`` (a
            `failover.stores.layers.tenant_stores.TenantStores`), or ``None``: a multi-tenant engine
            refuses the scheme, naming it.
        in_process: its stores live inside this process (commands such as ``failover inspect``
            then know there is nothing to read from outside).
        misspellings: spellings to suggest ``name://`` for in error messages.

    Raises:
        ConfigurationError: a name that is not a URL scheme, or one of the library's own.
    """
    key = name.lower() if isinstance(name, str) else name
    if not isinstance(key, str) or not _NAME.fullmatch(key):
        raise ConfigurationError(
            f"register_scheme: {name!r} is not a URL scheme (a letter, then letters, digits, "
            "'+', '-' or '.')"
        )
    if key in _BUILTIN:
        raise ConfigurationError(f"register_scheme: {key!r} is one of failover's own schemes")
    _TABLE[key] = Scheme(key, make, per_tenant, in_process, tuple(misspellings))


def builtin(scheme: Scheme) -> None:
    """Register one of the library's own schemes (`failover.stores.factory` does, at import)."""
    _TABLE[scheme.name] = scheme
    _BUILTIN.add(scheme.name)


def registered() -> tuple[Scheme, ...]:
    """Every registered scheme, in registration order."""
    return tuple(_TABLE.values())


def find(scheme: str) -> Scheme | None:
    """The row of ``scheme`` (lower case), or ``None``: a SQLAlchemy URL, or an unknown one."""
    found = _TABLE.get(scheme)
    if found is None and "+" in scheme:
        found = _TABLE.get(scheme.split("+", 1)[0] + "+")
    return found


def supported() -> str:
    """The supported schemes, as an error message lists them."""
    return ", ".join([row.shown for row in _TABLE.values()]) + f", or {_SQL_FAMILY}"


def nearest(scheme: str) -> str | None:
    """The supported scheme ``scheme`` most likely misspells, or ``None``."""
    aliases = dict(_SQL_ALIASES)
    for row in _TABLE.values():
        aliases.update(dict.fromkeys(row.misspellings, row.name))
    names = [row.name for row in _TABLE.values() if not row.name.endswith("+")]
    close = difflib.get_close_matches(scheme, [*names, *SQL_SCHEMES, *aliases], n=1, cutoff=0.6)
    return aliases.get(close[0], close[0]) if close else None
