"""The engine: one store chain, one handler chain, and the failovers registered with it."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..chain import handler_chain, store_chain
from ..context import PolicyLike
from ..core import Decorated, Runtime
from ..definition import FailoverDefinition
from ..entries import EntryControl
from ..entry_metrics import EntryMetrics
from ..errors import ConfigurationError
from ..events import Observer
from ..execution import Pools, Refreshes
from ..fleet import LABEL as FLEET_LABEL
from ..fleet import Fleet, make_fleet
from ..fleet.observers import FleetHealth, fleet_observers
from ..handlers import Handler
from ..health import DOWN_MIN, DOWN_RATIO, HealthReport, down_thresholds
from ..log_observer import EntryLog, StoreLog
from ..metrics import Metrics, PrometheusMetrics, resolve_metrics
from ..otel import resolve_opentelemetry
from ..policy import resolve_policy
from ..publish import HealthPublisher, publish_interval
from ..store_metrics import StoreMetrics, StoreStates
from ..stores.base import FailoverStore, does_io, writes_async
from ..stores.layers.routing import MultiTenantStore, TenantStoreFactory
from . import validation
from .clock import utcnow
from .guards import Guards
from .lifecycle import Lifecycle
from .maintenance import Maintenance
from .registry import Registry
from .wiring import Wiring, engine_stream

__all__ = ["Failover"]


class Failover(Guards, Lifecycle):
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
        store_timeout: the most a caller waits for one store operation (a read while
            recovering, a write on its own thread): seconds, ``"500ms"`` or a timedelta (default
            0.5 s); past it a read is a miss and a write is dropped, and the store is skipped
            for ``store_breaker_reset`` once ``store_breaker_after`` operations in a row timed
            out or were refused (`failover.stores.layers.deadline.DeadlineStore`). ``None``:
            no deadline.
        store_breaker_reset: how long the store breaker skips a store that is out before it
            lets one operation through as a trial: a duration (default 5 s, on ``clock``).
        store_breaker_after: how many store operations in a row must time out or be refused
            at the connection for the store breaker to open (default 3): one slow read is
            not an outage; meanwhile ``failover_store_up`` is 0 and health is ``degraded``.
        clock: the time source (aware UTC datetimes); tests pass a fake clock.
        enabled: ``False`` makes every decorated function a plain pass-through.
        opentelemetry: ``True`` sends spans and metrics to the global OpenTelemetry providers,
            a `failover.otel.OpenTelemetry` to its own; ``False`` (default): none.
        ignore_tenant: on an engine without tenant routing, a call made inside
            `failover.tenant` raises `ConfigurationError` (tenants would share entries);
            ``True`` allows it (code shared by tenant-aware and plain engines).
        publish_health: write this engine's health summary to the shared store (a SQL table or
            Redis keys, a row per process, expiring), for the cluster view of ``failover
            dashboard --store URL``: ``True`` (every 15 s) or an interval (``"30s"``);
            ``False`` (default): off. See `failover.publish`.
        fleet: where the processes of one service coordinate: a Redis URL
            (``"redis://redis.internal:6379/0"``, ``?prefix=`` for the keys) or a `redis.Redis`
            / `redis.asyncio.Redis` client (its settings copied into a client of the fleet's
            own). The breakers made here (``breaker=True``) share their state through it: a
            trip in one process keeps every process off the upstream within about a second,
            and half-open lets one trial through for the whole fleet. Calls read the state
            from memory; a background thread keeps it current, within ``store_timeout`` per
            socket operation. While it is unreachable, each breaker works in its process
            alone (``failover_store_up{store="fleet"}`` 0). See `failover.fleet`.

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
        opentelemetry: Any = False,
        store_timeout: timedelta | float | str | None = 0.5,
        ignore_tenant: bool = False,
        publish_health: bool | timedelta | float | str = False,
        store_breaker_reset: timedelta | float | str = 5.0,
        fleet: object = None,
        store_breaker_after: int = 3,
    ) -> None:
        validation.check_engine(
            clock,
            async_writes,
            timeout_workers,
            {"enabled": enabled, "ignore_tenant": ignore_tenant},
        )
        publish_every = publish_interval(publish_health, "Failover")
        self.clock = clock
        self.enabled = enabled
        self.policy = resolve_policy(policy, "Failover")
        self.breaker_defaults = validation.breaker_defaults(breaker_defaults)
        self.metrics: Metrics = resolve_metrics(metrics)
        self.async_writes = async_writes
        self.tenant_resolver = tenant_resolver
        self.store_timeout = validation.store_timeout(store_timeout)
        self.store_breaker_reset = validation.store_breaker_reset(store_breaker_reset)
        self.store_breaker_after = validation.store_breaker_after(store_breaker_after)
        # Every setting is checked before the store is made: a refused engine leaves none open.
        self.store_interval = interval = validation.store_interval(store_interval)
        otel = resolve_opentelemetry(opentelemetry)
        validation.fleet_breakers(fleet, self.breaker_defaults)
        self.fleet: Fleet | None = make_fleet(fleet, self.store_timeout)
        try:
            self.raw_store, self.store = store_chain(
                store,
                tenant_resolver,
                async_writes,
                self.metrics,
                clock,
                self.store_timeout,
                self.store_breaker_reset,
                self.store_breaker_after,
                None if self.fleet is None else self.fleet.backplane,
            )
        except BaseException:
            if self.fleet is not None:
                self.fleet.stop(0)
            raise
        # The stores' states, as their facts on the engine's stream tell them (`events`).
        self.stores = StoreStates(self.store)
        if isinstance(self.metrics, PrometheusMetrics):  # the store's health beside them
            StoreMetrics.for_registry(self.metrics.registry).track(self.stores)
        if isinstance(self.store, MultiTenantStore):
            self.tenant_resolver = self.store.resolver
        self.handler: Handler = handler_chain(self.store, clock, store_interval=interval)
        # Only failovers with a splitter pay for the scatter/gather layer.
        self.scatter_handler: Handler = handler_chain(
            self.store, clock, scatter=True, store_interval=interval
        )
        self.refreshes = Refreshes(timeout_workers)
        self.pools = Pools(self.metrics.track_pool)
        self.registry = Registry(self.raw_store, self.policy, self.pools, self.metrics, clock)
        self.wiring = Wiring(
            self.registry,
            self.store,
            (self.handler, self.scatter_handler),
            self.policy,
            clock,
            self.refreshes,
            self.pools,
            self.breaker_defaults,
            self.metrics,
            otel,
        )
        self.wiring.fleet = self.fleet
        self.ignore_tenant = ignore_tenant
        if not self.ignore_tenant and not isinstance(self.store, MultiTenantStore):
            self.wiring.unrouted = f"engine {self!r} does not route by tenant"
        self.maintenance = Maintenance(
            self.store, clock, self.metrics, self.refreshes, self.pools, self.fleet
        )
        self._observe(publish_every)

    def _observe(self, publish_every: timedelta | None) -> None:
        """The engine's own stream (`events`): its stores' facts, to their record (health,
        metrics), the logs and the health publisher (started here, with ``publish_every``)."""
        owner = f"Failover(store={self.raw_store!r})"
        self.publisher: HealthPublisher | None = None
        if publish_every is not None:
            try:
                self.publisher = HealthPublisher(
                    self.store, self.health, self.clock, publish_every, owner
                )
            except Exception:
                self.store.close()
                raise
        watchers: list[Observer] = [StoreLog(owner), EntryLog()]
        if isinstance(self.metrics, PrometheusMetrics):  # failover_invalidations_total
            metrics = self.metrics
            watchers.append(EntryMetrics.for_registry(metrics.registry, metrics.max_names))
        if self.publisher is not None:
            watchers.append(self.publisher)
        # The fleet's facts (its state, flights, messages, resyncs, cleanup turns), observed.
        self.fleet_health: FleetHealth | None = None
        if self.fleet is not None:
            self.fleet_health = FleetHealth(self.fleet, FLEET_LABEL)
            watchers += fleet_observers(self.fleet, self.fleet_health, self.metrics)
        self.events = engine_stream(self.stores, watchers)
        if self.fleet is not None:
            self.fleet.observe(self.events)
        if self.publisher is not None:
            self.maintenance.background.append(self.publisher.start())

    def __repr__(self) -> str:
        return f"Failover(store={self.store!r}, enabled={self.enabled})"

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self.maintenance.closed

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
        with self.registry.lock:
            previous = self.registry.register(decorated)
            if previous is not None:
                self.wiring.forget(previous)

    def definitions(self) -> list[FailoverDefinition]:
        """Every registered failover's definition, by name."""
        return self.registry.definitions()

    def health(self, *, down_ratio: float = DOWN_RATIO, down_min: int = DOWN_MIN) -> HealthReport:
        """Each registered failover's health over the last minute, worst first.

        ``down``: at least ``down_ratio`` of the calls, and at least ``down_min``, got nothing
        usable (not recovered); ``degraded``: fewer did, calls were served stale, the breaker is
        open, or a store is down; ``up``: calls were answered live; ``idle``: no call. The
        engine's status is the worst of them (``idle`` when none is registered).

        Raises:
            ConfigurationError: a threshold out of range.
        """
        thresholds = down_thresholds(down_ratio, down_min, "Failover.health")
        stores = self.stores.health()
        if self.fleet_health is not None:
            stores.append(self.fleet_health.health())
        return self.registry.health(self.clock(), self.pools.all(), stores, thresholds)

    @functools.cached_property
    def entries(self) -> EntryControl:
        """The control over the entries of this engine's store chain: the one place that
        ``.invalidate_all()``, ``.expire()`` and `invalidate_tag` go through."""
        return EntryControl(self.store, self.events)

    def invalidate_tag(self, tag: str) -> int:
        """Delete every stored entry carrying ``tag`` (a failover's ``tags=``), whatever its
        failover: one statement on SQL, one round trip per node on Redis. With tenant routing,
        the current tenant's entries only (inside ``failover.tenant(...)``, or the default
        tenant). Returns how many entries were removed.

        Raises:
            ValueError: ``tag`` is not a tag (a string of 1 to 200 printable characters).
            ConfigurationError: the store keeps no tags (a store of your own without a
                ``delete_tagged`` method).
        """
        return self.entries.invalidate_tag(tag)

    def runtime(self, decorated: Decorated) -> Runtime:
        """The runtime of ``decorated`` on this engine, made on first use."""
        return self.wiring.runtime(decorated, self.register)

    @classmethod
    def from_env(
        cls, prefix: str = "FAILOVER_", environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> Failover:
        """An engine configured from environment variables.

        Reads ``{prefix}STORE`` (a URL), ``{prefix}ASYNC_WRITES`` and ``{prefix}ENABLED``
        (``true``/``false``/``1``/``0``), ``{prefix}POLICY``, ``{prefix}METRICS``, the durations
        ``{prefix}STORE_TIMEOUT`` and ``{prefix}STORE_BREAKER_RESET`` (``"500ms"``),
        ``{prefix}STORE_BREAKER_AFTER`` (an int), ``{prefix}PUBLISH_HEALTH`` (true/false or an
        interval, ``"30s"``), ``{prefix}FLEET`` (a Redis URL, see ``fleet``). Keyword arguments
        override the environment. A blank variable is unset.

        Raises:
            ConfigurationError: a bad value, naming its variable.
        """
        read = validation.env_settings(prefix, os.environ if environ is None else environ)
        try:
            return cls(**{**read, **overrides})
        except ConfigurationError as exc:
            # The store (made here) or settings together: name the variables in force, not
            # their values (a store URL may hold a password).
            used = [f"{prefix}{name.upper()}" for name in read if name not in overrides]
            if not used:
                raise
            raise ConfigurationError(f"Failover.from_env (with {', '.join(used)}): {exc}") from exc
