"""The engine: one store chain, one handler chain, and the failovers registered with it."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pybreaker

from .chain import handler_chain, store_chain
from .cleanup import CleanupScheduler
from .codec import JsonCodec, allow_annotation, type_name, unencodable
from .context import PolicyLike
from .core import Decorated, Runtime, resolve_return_type
from .definition import FailoverDefinition
from .errors import ConfigurationError, SoftTimeoutError
from .execution import (
    BreakerGuard,
    Bulkhead,
    Execution,
    Guard,
    PermitSource,
    Pool,
    Pools,
    Refreshes,
    SoftTimeout,
    StateListener,
    state_code,
)
from .expiry import parse_ttl
from .handlers import Handler, key_of
from .health import FailoverStats, HealthReport, PoolHealth, settings_of
from .metrics import Metrics, resolve_metrics
from .policy import resolve_policy
from .scatter import slice_type
from .stores.base import FailoverStore, does_io, flush, writes_async
from .stores.tenant import MultiTenantStore, TenantStoreFactory

__all__ = ["Failover", "configure", "get_engine", "utcnow"]

log = logging.getLogger(__name__)


utcnow: Callable[[], datetime] = functools.partial(datetime.now, UTC)
"""The default clock: aware UTC now (a partial of a builtin: no Python frame per call)."""


class Failover:
    """An engine: the store chain, the handler chain, and the registered failovers.

    Args:
        store: a `FailoverStore`, or a URL for `make_store` (``"memory://"``, ``"sqlite:///f.db"``).
            With multi-tenancy: a URL (see `failover.stores.factory.per_tenant`) or a factory
            ``tenant -> FailoverStore``; either one turns multi-tenancy on, a URL when it
            contains ``{tenant}``.
        async_writes: write on a background worker (`AsyncWriteStore`); ``None``: on for stores
            that do I/O, off for in-process ones.
        tenant_resolver: returns the current tenant id; enables multi-tenant routing (one store
            chain per tenant). Default with multi-tenancy: `failover.current_tenant`.
        metrics: Prometheus metrics: ``True`` (the default registry), a registry, or ``False``.
        policy: the exception policy of failovers that set none.
        breaker_defaults: the `pybreaker.CircuitBreaker` settings of ``breaker=True``
            failovers (one breaker per name): ``fail_max``, ``reset_timeout``,
            ``success_threshold``, ``exclude``, and ``state_storage``, a callable
            ``name -> pybreaker.CircuitBreakerStorage`` for state shared across processes.
        timeout_workers: threads running sync upstreams past their callers' soft timeout.
        store_interval: write coalescing for failovers that set none: the least time between
            two stores of one key (a success within it returns live, unstored). Bounds a shared
            store's write rate by distinct keys / interval; adds at most the interval of
            staleness. ``None`` (default): every success is stored.
        clock: the time source (aware UTC datetimes); tests pass a fake clock.
        enabled: ``False`` makes every decorated function a plain pass-through.

    Raises:
        ConfigurationError: a setting that cannot work.
    """

    def __init__(
        self,
        store: FailoverStore | str | TenantStoreFactory = "memory://",
        *,
        async_writes: bool | None = None,
        tenant_resolver: Callable[[], str | None] | None = None,
        metrics: Any = True,
        policy: PolicyLike = "rethrow",
        breaker_defaults: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] = utcnow,
        enabled: bool = True,
        timeout_workers: int = 16,
        store_interval: timedelta | float | str | None = None,
    ) -> None:
        if not callable(clock):
            raise ConfigurationError(f"Failover: clock must be callable, got {clock!r}")
        if async_writes not in (None, True, False):
            raise ConfigurationError(
                f"Failover: async_writes must be True, False or None, got {async_writes!r}"
            )
        self.clock = clock
        self.enabled = bool(enabled)
        self.policy = resolve_policy(policy, "Failover")
        self.breaker_defaults = _breaker_defaults(breaker_defaults)
        if isinstance(timeout_workers, bool) or not isinstance(timeout_workers, int):
            raise ConfigurationError(
                f"Failover: timeout_workers must be an int, got {timeout_workers!r}"
            )
        if timeout_workers < 1:
            raise ConfigurationError("Failover: timeout_workers must be at least 1")
        self.metrics: Metrics = resolve_metrics(metrics)
        self.async_writes = async_writes
        self.tenant_resolver = tenant_resolver
        self.raw_store, self.store = store_chain(
            store, tenant_resolver, async_writes, self.metrics, clock
        )
        if isinstance(self.store, MultiTenantStore):
            self.tenant_resolver = self.store.resolver
        interval = None
        if store_interval is not None and store_interval != 0:
            interval = parse_ttl(store_interval, "Failover", "store_interval")
        self.store_interval = interval
        self.handler: Handler = handler_chain(
            self.store, self.metrics, clock, store_interval=interval
        )
        # Only failovers with a splitter pay for the scatter/gather layer.
        self.scatter_handler: Handler = handler_chain(
            self.store, self.metrics, clock, scatter=True, store_interval=interval
        )
        self.refreshes = Refreshes(timeout_workers)
        self._breakers: dict[str, pybreaker.CircuitBreaker] = {}
        self.pools = Pools(self.metrics.track_pool)
        self._unstorable: dict[str, str] = {}  # failover name -> why nothing of it is stored
        self._lock = threading.RLock()
        self._registered: dict[str, Decorated] = {}
        self._runtimes: dict[Decorated, Runtime] = {}
        self._stats: dict[str, FailoverStats] = {}  # per name, kept when a name is re-registered
        self._closed = False
        self._clean_lock = threading.Lock()  # one cleanup at a time: scheduled or by hand
        self._schedulers: list[CleanupScheduler] = []

    def __repr__(self) -> str:
        return f"Failover(store={self.store!r}, enabled={self.enabled})"

    @property
    def blocking(self) -> bool:
        """Whether the store chain does blocking I/O (async shells then read on a thread)."""
        return does_io(self.store)

    @property
    def blocking_writes(self) -> bool:
        """Whether writes block the caller (I/O store without async writes)."""
        return self.blocking and not writes_async(self.store)

    # -- registration -------------------------------------------------------------------------

    def register(self, decorated: Decorated) -> None:
        """Register a decorated function; a second one under the same name replaces the first."""
        allow_annotation(decorated.fn)  # its return type may be restored from a serializing store
        definition = decorated.definition
        self.pools.check(definition.name, definition.bulkhead, definition.weight)
        self._check_encodable(decorated)
        with self._lock:
            previous = self._registered.get(definition.name)
            if previous is not None and previous is not decorated:
                _warn_replaced(previous, decorated)
                self._runtimes.pop(previous, None)
            self._registered[definition.name] = decorated
            stats = self._stats.get(definition.name)
            if stats is None:
                stats = self._stats[definition.name] = FailoverStats(
                    definition.name, self.clock, self.metrics
                )
                self.metrics.track(stats)
            policy = definition.policy if definition.policy is not None else self.policy
            stats.info = settings_of(definition, policy, self.raw_store)
            self._warn_domain_mismatch(decorated)

    def _check_encodable(self, decorated: Decorated) -> None:
        """Warn when the store can never encode what the function returns (an HTTP response
        object on a JSON store): its calls would answer, and nothing would ever be stored."""
        codec = getattr(self.raw_store, "codec", None)
        if not isinstance(codec, JsonCodec):
            return
        d = decorated.definition
        bad = unencodable(resolve_return_type(decorated.fn, d.return_annotation))
        if bad is None:
            return
        reason = f"the store cannot encode {type_name(bad)}"
        self._unstorable[d.name] = reason
        warnings.warn(
            f"failover {d.name!r}: returns {type_name(bad)}, which {self.raw_store!r} cannot "
            "encode: its results would never be stored. Return plain data (a dict, a dataclass, "
            "a pydantic model: e.g. response.json()) instead",
            stacklevel=5,
        )

    def _warn_domain_mismatch(self, decorated: Decorated) -> None:
        definition = decorated.definition
        if definition.domain is None:
            return
        for other in self._registered.values():
            o = other.definition
            if o.domain != definition.domain or o.name == definition.name:
                continue
            if o.ttl != definition.ttl:
                why = f"under a different ttl ({definition.ttl} vs {o.ttl})"
            else:
                mine, theirs = _slice_type(decorated), _slice_type(other)
                if mine is None or theirs is None or mine == theirs:
                    continue
                why = (
                    f"whose entries hold another type ({type_name(mine)} vs "
                    f"{type_name(theirs)}): each would recover values of the other's type"
                )
            warnings.warn(
                f"failover {definition.name!r}: domain {definition.domain!r} is shared with "
                f"{o.name!r} {why}",
                stacklevel=5,
            )
            return

    def definitions(self) -> list[FailoverDefinition]:
        """Every registered failover's definition, by name."""
        with self._lock:
            return [d.definition for _, d in sorted(self._registered.items())]

    def health(self) -> HealthReport:
        """Each registered failover's health over the last minute, worst first.

        ``down``: a call got nothing usable (not recovered); ``degraded``: calls were served
        stale, or the breaker is open; ``up``: calls were answered live; ``idle``: no call. The
        engine's status is the worst of them (``idle`` when none is registered).
        """
        now = self.clock()
        with self._lock:
            stats = [self._stats[name] for name in self._registered]
        pools = (PoolHealth.of(pool) for pool in self.pools.all())
        return HealthReport.of((s.health(now) for s in stats), now, pools)

    def runtime(self, decorated: Decorated) -> Runtime:
        """The runtime of ``decorated`` on this engine, made on first use."""
        rt = self._runtimes.get(decorated)
        if rt is not None:
            return rt
        with self._lock:
            if decorated.definition.name not in self._registered:
                self.register(decorated)  # decorated for another engine, called on this one
            rt = self._runtimes.get(decorated)
            if rt is None:
                d = decorated.definition
                policy = d.policy if d.policy is not None else self.policy
                rt = Runtime(
                    d,
                    decorated.binder,
                    decorated.fn,
                    self.handler if d.splitter is None else self.scatter_handler,
                    policy,
                    self.clock,
                    self.blocking,
                    self.blocking_writes,
                    self.store if isinstance(self.store, MultiTenantStore) else None,
                    self._stats[d.name],
                )
                rt.bind(self._execution(d, rt))
                rt.unstorable = self._unstorable.get(d.name)
                self._runtimes[decorated] = rt
            return rt

    def _execution(self, d: FailoverDefinition, rt: Runtime) -> Execution | None:
        """The failover's execution chain: bulkhead outside breaker outside timeout."""
        guards: list[Guard] = []
        if d.max_concurrency is not None or d.bulkhead is not None:
            guards.append(self.bulkhead(d))
        timeout = None
        if d.timeout is not None:
            timeout = SoftTimeout(d.name, d.timeout, self.refreshes, rt.late, rt.alate, key_of)
        if d.breaker is not None:
            inner = (SoftTimeoutError,) if timeout is not None else ()

            def counts(exc: Exception) -> bool:
                return d.accepts(exc) or isinstance(exc, inner)

            guards.append(BreakerGuard(self.breaker(d), counts))
        if not guards and timeout is None:
            return None
        return Execution(tuple(guards), timeout)

    def breaker(self, d: FailoverDefinition) -> pybreaker.CircuitBreaker:
        """The circuit breaker of failover ``d``: its own, or (``breaker=True``) the engine's
        one for its name, made from ``breaker_defaults``; its state changes reach the metrics."""
        with self._lock:
            cb: pybreaker.CircuitBreaker | None = None if d.breaker is True else d.breaker
            if cb is None:
                cb = self._breakers.get(d.name)
                if cb is None:
                    settings = dict(self.breaker_defaults)
                    storage = settings.pop("state_storage", None)
                    if storage is not None:
                        made = storage(d.name)
                        if not isinstance(made, pybreaker.CircuitBreakerStorage):
                            raise ConfigurationError(
                                f"failover {d.name!r}: breaker_defaults['state_storage'] "
                                f"returned {made!r}, not a pybreaker.CircuitBreakerStorage"
                            )
                        settings["state_storage"] = made
                    cb = self._breakers[d.name] = pybreaker.CircuitBreaker(name=d.name, **settings)
            report = self._stats[d.name].circuit_state  # health, then the metrics
            if not any(
                isinstance(x, StateListener) and x.name == d.name and x.report == report
                for x in cb.listeners
            ):
                cb.add_listener(StateListener(d.name, report))
            report(d.name, state_code(cb.current_state))
            return cb

    def bulkhead(self, d: FailoverDefinition) -> Bulkhead:
        """The bulkhead of failover ``d`` (one per name on this engine): its private pool
        (``max_concurrency``) or the declared pool it names (``bulkhead=``).

        Raises:
            ConfigurationError: ``bulkhead=`` names no declared pool, or one smaller than the
                failover's ``weight``.
        """
        return self.pools.guard(
            d.name,
            pool=d.bulkhead,
            max_concurrency=d.max_concurrency,
            weight=d.weight,
            acquire_timeout=d.acquire_timeout,
            on_reject=self._stats[d.name].bulkhead_rejected,
        )

    def bulkhead_pool(
        self, name: str, permits: int, fair: bool = True, source: PermitSource | None = None
    ) -> Pool:
        """Declare the bulkhead pool ``name``, which failovers share with ``bulkhead=name``.

        Declaring a name again with the same settings returns the same pool.

        Args:
            name: the pool's name.
            permits: permits in all (a call takes its failover's ``weight``).
            fair: waiters are served in arrival order (a newcomer never overtakes them).
            source: where the permits come from: default in-process (`LocalPermits`);
                `failover.RedisPermits` for one pool across every process of a cluster.

        Raises:
            ConfigurationError: a bad setting, or a name declared before with other settings.
        """
        return self.pools.declare(name, permits, fair, source)

    # -- maintenance --------------------------------------------------------------------------

    def clean(self) -> int:
        """Delete expired entries from the store (every tenant); return the count removed.

        Cleanups of one engine never overlap: a call made while another runs (a scheduler's, or
        one by hand on another thread) waits for it to end.
        """
        with self._clean_lock:
            return self.store.clean_by_expiry(self.clock())

    def start_cleanup(
        self, every: timedelta | float | str = timedelta(hours=1)
    ) -> CleanupScheduler:
        """Start a `CleanupScheduler` that runs `clean` now, then every ``every``.

        `close` stops it; so does ``scheduler.stop()``, or leaving ``with engine.start_cleanup():``.

        Args:
            every: the period: a timedelta, seconds, or ``"30s"``/``"15m"``/``"1h"``.

        Returns:
            The running scheduler.

        Raises:
            ConfigurationError: ``every`` is not a positive duration.
            RuntimeError: the engine is closed.
        """
        scheduler = CleanupScheduler(self, every, metrics=self.metrics)
        with self._lock:  # started under the lock: a concurrent close() stops it or refuses it
            if self._closed:
                raise RuntimeError("Failover: cannot start a cleanup on a closed engine")
            self._schedulers.append(scheduler)
            return scheduler.start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write queued by async writes (every tenant's) is written.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Returns:
            ``True`` when everything was written, ``False`` when the timeout came first.
        """
        return flush(self.store, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the cleanup schedulers started here, stop the background refreshes of soft
        timeouts (async ones are cancelled; sync ones get up to ``timeout`` seconds to end and
        be stored), flush pending writes, release the stores.

        Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for scheduler in self._schedulers:
            scheduler.stop()
        if not self.refreshes.close(timeout):
            log.warning("Failover.close: background refreshes still running after %ss", timeout)
        # A cleanup run by hand on another thread ends first: its store is not closed under it.
        with self._clean_lock:
            self.store.close()
        self.pools.close()

    async def aclose(self, timeout: float = 5.0) -> None:
        """`close` for async code: the store's async connections of this event loop are closed
        on it, and the rest (flushing the queued writes included) on a worker thread, so the
        loop is never blocked. Idempotent."""
        closer = getattr(self.store, "aclose", None)  # a tenant router's: whatever the tenant
        if callable(closer) and not self._closed:
            try:
                await closer()
            except Exception:
                log.warning("Failover.aclose: closing the async store client failed", exc_info=True)
        await asyncio.to_thread(self.close, timeout)

    def __enter__(self) -> Failover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_env(
        cls, prefix: str = "FAILOVER_", environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> Failover:
        """An engine configured from environment variables.

        Reads ``{prefix}STORE`` (a URL), ``{prefix}ASYNC_WRITES`` and ``{prefix}ENABLED``
        (``true``/``false``/``1``/``0``), ``{prefix}POLICY`` and ``{prefix}METRICS``.
        Keyword arguments override the environment.
        """
        env = os.environ if environ is None else environ
        kwargs: dict[str, Any] = {}
        store = env.get(f"{prefix}STORE", "").strip()
        if store:  # blank means unset, as for the other variables
            kwargs["store"] = store
        for name in ("ASYNC_WRITES", "ENABLED", "METRICS"):
            raw = env.get(f"{prefix}{name}")
            if raw is not None and raw.strip():
                kwargs[name.lower()] = _env_bool(f"{prefix}{name}", raw)
        if env.get(f"{prefix}POLICY"):
            kwargs["policy"] = env[f"{prefix}POLICY"]
        kwargs.update(overrides)
        return cls(**kwargs)


def _slice_type(decorated: Decorated) -> Any:
    """What each entry of ``decorated`` holds (`failover.scatter.slice_type`)."""
    d = decorated.definition
    return slice_type(d, resolve_return_type(decorated.fn, d.return_annotation))


_BREAKER_SETTINGS = ("fail_max", "reset_timeout", "success_threshold", "exclude", "state_storage")


def _breaker_defaults(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(
            f"Failover: breaker_defaults must be a dict of {', '.join(_BREAKER_SETTINGS)}, "
            f"got {value!r}"
        )
    settings = dict(value or {})
    for key, item in settings.items():
        if key not in _BREAKER_SETTINGS:
            raise ConfigurationError(
                f"Failover: breaker_defaults has unknown setting {key!r}; "
                f"use {', '.join(_BREAKER_SETTINGS)}"
            )
        number = isinstance(item, int | float) and not isinstance(item, bool)
        if key in ("fail_max", "success_threshold") and not (
            number and isinstance(item, int) and item >= 1
        ):
            raise ConfigurationError(
                f"Failover: breaker_defaults[{key!r}] must be an int >= 1, got {item!r}"
            )
        if key == "reset_timeout" and not (number and math.isfinite(item) and item >= 0):
            raise ConfigurationError(
                f"Failover: breaker_defaults['reset_timeout'] must be a finite number of "
                f"seconds >= 0, got {item!r}"
            )
    exclude = settings.get("exclude")
    if exclude is not None:
        items = tuple(exclude) if isinstance(exclude, list | tuple) else (exclude,)
        for item in items:
            if not (isinstance(item, type) and issubclass(item, BaseException)) and (
                isinstance(item, type) or not callable(item)
            ):
                raise ConfigurationError(
                    "Failover: breaker_defaults['exclude'] must be exception types or "
                    f"predicates exc -> bool, got {item!r}"
                )
        settings["exclude"] = items
    storage = settings.get("state_storage")
    if storage is not None and not callable(storage):
        raise ConfigurationError(
            "Failover: breaker_defaults['state_storage'] must be a callable "
            "name -> pybreaker.CircuitBreakerStorage"
        )
    return settings


def _warn_replaced(previous: Decorated, new: Decorated) -> None:
    if previous.definition.function != new.definition.function:
        warnings.warn(
            f"failover {new.definition.name!r}: the name was registered by "
            f"{previous.definition.function}; {new.definition.function} replaces it",
            stacklevel=5,
        )


def _env_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name}: expected true/false, got {raw!r}")


# -- the default engine ---------------------------------------------------------------------------

_default: Failover | None = None
_default_lock = threading.Lock()
_pending: dict[str, Decorated] = {}  # failovers of the default engine, carried over


def get_engine() -> Failover:
    """The process-wide default engine, made on first use (in-memory store)."""
    engine = _default
    if engine is not None:
        return engine
    return _install(None)


def configure(**kwargs: Any) -> Failover:
    """(Re)configure the default engine with `Failover`'s arguments; returns it.

    Failovers already decorated without ``engine=`` carry over to the new engine. The previous
    default engine is closed (its pending writes flushed).
    """
    return _install(Failover(**kwargs))


def _install(engine: Failover | None) -> Failover:
    global _default
    with _default_lock:
        if engine is None:
            if _default is not None:
                return _default
            engine = Failover()
        previous, _default = _default, engine
        for decorated in _pending.values():
            engine.register(decorated)
    if previous is not None:
        previous.close()
    return engine


def register_default(decorated: Decorated) -> None:
    """Record a failover of the default engine; registered now if that engine exists."""
    with _default_lock:
        previous = _pending.get(decorated.definition.name)
        _pending[decorated.definition.name] = decorated
        engine = _default
    if engine is not None:
        engine.register(decorated)
    elif previous is not None and previous is not decorated:
        _warn_replaced(previous, decorated)
