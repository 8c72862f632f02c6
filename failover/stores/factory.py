"""Stores from URLs: `make_store` for one store, `per_tenant` for one store per tenant.

Both look the URL's scheme up in one table (`failover.stores.schemes`): the library's own
schemes are registered here, each with its maker and its per-tenant maker (made in
`failover.stores.layers.tenant_stores`: `per_tenant_stores` here for the in-process stores,
`RedisStore.per_tenant` for Redis); a scheme not in the table is a SQLAlchemy URL
(`failover.stores.backends.sql`) when SQLAlchemy has a dialect for it, and refused by name
otherwise. Store modules are imported when their scheme is first used.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..errors import ConfigurationError
from ..expiry import parse_ttl
from ..masking import masked_url
from . import schemes
from .base import FailoverStore
from .layers import tenant_stores
from .layers.routing import check_max_tenants
from .layers.tenant_stores import TenantStores
from .schemes import Scheme

__all__ = ["check_sql_scheme", "make_store", "per_tenant", "per_tenant_stores"]

_TIERED = "tiered+"


def check_sql_scheme(url: str, scheme: str) -> None:
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
    nearest = schemes.nearest(scheme)
    hint = f" (did you mean {nearest}://?)" if nearest else ""
    raise ConfigurationError(
        f"store URL {masked_url(url)!r}: unknown scheme {scheme!r}{hint}; "
        f"supported: {schemes.supported()}"
    )


def _int_options(
    url: str, allowed: set[str], flags: frozenset[str] = frozenset()
) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name not in allowed and name not in flags:
            known = ", ".join(sorted(allowed | flags))
            raise ConfigurationError(
                f"store URL {masked_url(url)!r}: unknown option {name!r}; allowed: {known}"
            )
        if name in flags:
            if value.lower() not in ("true", "false"):
                raise ConfigurationError(
                    f"store URL {masked_url(url)!r}: option {name!r} must be true or false, "
                    f"got {value!r}"
                )
            options[name] = value.lower() == "true"
            continue
        try:
            options[name] = int(value)
        except ValueError:
            raise ConfigurationError(
                f"store URL {masked_url(url)!r}: option {name!r} must be an integer, got {value!r}"
            ) from None
    return options


def _scheme(url: object) -> str:
    if not isinstance(url, str) or "://" not in url:
        shown = masked_url(url) if isinstance(url, str) else url
        raise ConfigurationError(f"store URL {shown!r} is not a URL (e.g. 'memory://')")
    return url.split("://", 1)[0].lower()


def _redis_module() -> Any:
    try:
        from .backends import redis
    except ImportError as exc:
        raise ConfigurationError(f"Redis stores need redis-py: {exc}") from None
    return redis


def make_store(url: str, *, clock: Callable[[], datetime] | None = None) -> FailoverStore:
    """A raw store from a URL.

    - ``memory://?max_entries=10000``: an `InMemoryStore` (``&copy=false``: callers share the
      stored objects, see `InMemoryStore`);
    - ``cachetools://?maxsize=10000``: a `CachetoolsStore`;
    - ``redis://[:password@]host[:port][/db]``, ``rediss://...`` (TLS), ``unix:///path.sock``:
      a `RedisStore` (``?prefix=`` its key prefix; redis-py's options such as
      ``socket_timeout`` pass through);
    - ``redis+sentinel://host:port,.../master[/db]`` (the master the sentinels name) and
      ``redis+cluster://host:port,...`` (a Redis Cluster): a `RedisStore` (``?prefix=`` only);
    - ``tiered+`` before any other URL (``tiered+redis://host/0``): a `TieredStore` with a
      ``cachetools://`` store near and the URL's store far (``?hedge_after=50ms``: how long a
      read waits for far when near has an answer);
    - a scheme registered with `failover.stores.register_scheme` (``kv://...``): its store;
    - any other SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``):
      a `SqlStore`.

    Args:
        url: the store's URL.
        clock: the engine's time source (cachetools and Redis stores measure expiry on it).

    Raises:
        ConfigurationError: an unknown scheme (the message lists the supported ones and suggests
            the nearest: ``memroy://`` → ``memory://``, ``postgres://`` →
            ``postgresql+psycopg://``) or option; a URL its store cannot parse; a driver or client
            library that is not installed (named in a one-line message, the password masked).
    """
    scheme = _scheme(url)
    row = schemes.find(scheme)
    if row is not None:
        return row.make(url, clock)
    check_sql_scheme(url, scheme)
    from .backends.sql import SqlStore

    return SqlStore(url)  # SqlStore turns a bad URL into a ConfigurationError naming it


def _hedge_option(url: str) -> tuple[str, str]:
    """A tiered store's far URL without its ``hedge_after`` option, and that option (default
    ``"50ms"``)."""
    base, _, query = url.partition("?")
    options = parse_qsl(query, keep_blank_values=True)
    hedge = [value for key, value in options if key == "hedge_after"]
    if not hedge:
        return url, "50ms"
    parse_ttl(hedge[-1], "TieredStore", "hedge_after")  # refused now, not at a tenant's first use
    rest = urlencode([(key, value) for key, value in options if key != "hedge_after"])
    return base + (f"?{rest}" if rest else ""), hedge[-1]


def per_tenant_stores(url: str, *, clock: Callable[[], datetime] | None = None) -> TenantStores:
    """One in-process store per tenant (``memory://``, ``cachetools://``), from one URL.

    Args:
        url: a `make_store` URL, made once per tenant.
        clock: the time source of ``cachetools://`` stores.

    Returns:
        A factory ``tenant -> store`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: a URL that is not an in-process store, or that `make_store` refuses.
    """
    scheme = url.split("://", 1)[0].lower() if isinstance(url, str) else ""
    row = schemes.find(scheme)
    if row is None or not row.in_process:
        # Several stores made from one database URL would share one table: no isolation.
        raise ConfigurationError(
            f"per_tenant_stores: {masked_url(url)!r} is not an in-process store URL; for a "
            "database use per_tenant_tables or per_tenant_databases"
        )
    return tenant_stores.in_process(
        lambda: make_store(url, clock=clock), f"per_tenant_stores({masked_url(url)!r})"
    )


def per_tenant(url: str, *, clock: Callable[[], datetime] | None = None) -> TenantStores:
    """The engine's strategy for a store URL under multi-tenancy.

    The URL's ``max_tenants`` option (``sqlite:///f.db?max_tenants=200``) is the router's: the
    tenants' stores kept open at once (see `failover.stores.layers.routing.MultiTenantStore`); it is
    taken out before the store sees the URL.

    ``memory://`` and ``cachetools://`` URLs: one in-process store per tenant
    (`per_tenant_stores`). Redis URLs: one key prefix per tenant, one shared client
    (`RedisStore.per_tenant`). ``tiered+`` URLs: per tenant, a near store of its own in front of
    the tenant's far store. A database URL containing ``{tenant}``: one database per tenant
    (`per_tenant_databases`). Any other database URL: one table per tenant, prefixed
    ``{tenant}_`` (`per_tenant_tables`). A scheme registered with
    `failover.stores.register_scheme`: its ``per_tenant`` maker.

    Args:
        url: the engine's ``store`` URL.
        clock: the time source of the stores that measure expiry (cachetools, Redis).

    Returns:
        A factory ``tenant -> store`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: a URL its store refuses; an unknown scheme, or one with no
            per-tenant stores (both named, as `make_store` names an unknown one).
    """
    scheme = _scheme(url)
    url, most = _max_tenants_option(url)
    stores = _per_tenant(url, scheme, clock)
    if most is not None:
        stores.max_tenants = most
    return stores


def _max_tenants_option(url: str) -> tuple[str, int | None]:
    """``url`` without its ``max_tenants`` option, and that option (``None`` when absent)."""
    base, _, query = url.partition("?")
    options = parse_qsl(query, keep_blank_values=True)
    given = [value for key, value in options if key == "max_tenants"]
    if not given:
        return url, None
    shown = masked_url(url)
    if not given[-1].isdigit():
        raise ConfigurationError(
            f"store URL {shown!r}: max_tenants must be a whole number >= 1, got {given[-1]!r}"
        )
    most = check_max_tenants(int(given[-1]), f"store URL {shown!r}")
    rest = urlencode([(key, value) for key, value in options if key != "max_tenants"])
    return base + (f"?{rest}" if rest else ""), most


def _per_tenant(url: str, scheme: str, clock: Callable[[], datetime] | None) -> TenantStores:
    row = schemes.find(scheme)
    if row is not None:
        if row.per_tenant is None:
            raise ConfigurationError(
                f"store URL {masked_url(url)!r}: scheme {scheme!r} has no per-tenant stores; "
                "pass store= a factory tenant -> store, or register the scheme with "
                "per_tenant= (failover.stores.register_scheme)"
            )
        return row.per_tenant(url, clock)
    check_sql_scheme(url, scheme)
    from .backends.sql import per_tenant_databases, per_tenant_tables

    if "{tenant}" in url:
        return per_tenant_databases(url)
    return per_tenant_tables(url)


# -- the library's own schemes ---------------------------------------------------------------


def _memory(url: str, clock: Callable[[], datetime] | None) -> FailoverStore:
    from .backends.memory import InMemoryStore

    return InMemoryStore(**_int_options(url, {"max_entries"}, frozenset({"copy"})))


def _cachetools(url: str, clock: Callable[[], datetime] | None) -> FailoverStore:
    from .backends.ttl import CachetoolsStore

    return CachetoolsStore(**_int_options(url, {"maxsize"}), clock=clock)


def _redis(url: str, clock: Callable[[], datetime] | None) -> FailoverStore:
    store: FailoverStore = _redis_module().RedisStore(url, clock=clock)
    return store


def _redis_per_tenant(url: str, clock: Callable[[], datetime] | None) -> TenantStores:
    stores: TenantStores = _redis_module().RedisStore.per_tenant(url, clock=clock)
    return stores


def _tiered(url: str, clock: Callable[[], datetime] | None) -> FailoverStore:
    from .backends.ttl import CachetoolsStore
    from .layers.tiered import TieredStore

    far_url, hedge = _hedge_option(url[len(_TIERED) :])
    return TieredStore(
        CachetoolsStore(clock=clock), make_store(far_url, clock=clock), hedge_after=hedge
    )


def _tiered_per_tenant(url: str, clock: Callable[[], datetime] | None) -> TenantStores:
    from .backends.ttl import CachetoolsStore
    from .layers.tiered import TieredStore

    far_url, hedge = _hedge_option(url[len(_TIERED) :])
    far = _per_tenant(far_url, _scheme(far_url), clock)
    return tenant_stores.layered(
        far,
        lambda store: TieredStore(CachetoolsStore(clock=clock), store, hedge_after=hedge),
        f"tiered({far!r})",
    )


def _in_process_per_tenant(url: str, clock: Callable[[], datetime] | None) -> TenantStores:
    return per_tenant_stores(url, clock=clock)


REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "redis+cluster")

schemes.builtin(
    Scheme("memory", _memory, _in_process_per_tenant, True, ("mem", "inmemory", "in-memory"))
)
schemes.builtin(Scheme("cachetools", _cachetools, _in_process_per_tenant, True, ("ttl",)))
for _name in REDIS_SCHEMES:
    schemes.builtin(Scheme(_name, _redis, _redis_per_tenant))
schemes.builtin(Scheme(_TIERED, _tiered, _tiered_per_tenant))
