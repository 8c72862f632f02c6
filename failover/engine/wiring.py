"""The runtimes of one engine's failovers: each with its handler chain and execution chain
(bulkhead, breaker, soft timeout), made on first use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pybreaker

from ..call import Call
from ..core import Decorated, Runtime
from ..definition import FailoverDefinition
from ..errors import ConfigurationError, SoftTimeoutError
from ..events import Events, Observer
from ..execution import (
    BreakerGuard,
    Bulkhead,
    Execution,
    Guard,
    Pools,
    Refreshes,
    SoftTimeout,
    StateListener,
    state_code,
)
from ..execution.circuit import Circuit
from ..fleet import Fleet
from ..flight import Flights, FlownCall
from ..handlers import Handler, key_of
from ..log_observer import LogObserver
from ..metrics import NULL_METRICS, Metrics, PrometheusMetrics
from ..metrics_observer import MetricsObserver
from ..otel import OpenTelemetry
from ..policy import ExceptionPolicy
from ..refresh import RefreshAhead
from ..served import ServedObserver
from ..stores.base import FailoverStore, does_io, writes_async
from ..stores.routing import MultiTenantStore
from .registry import Registry

__all__ = ["Wiring"]


class Wiring:
    """Makes and keeps each registered failover's `Runtime` on one engine.

    Args:
        registry: the engine's registered failovers (their lock is shared).
        store: the engine's store chain.
        handlers: the handler chain of plain failovers and the one of scatter/gather ones.
        policy: the engine's exception policy.
        clock: the engine's clock.
        refreshes: the threads running sync upstreams past their soft timeout.
        pools: the engine's bulkhead pools.
        breaker_defaults: the settings of ``breaker=True`` breakers.
        metrics: the engine's metrics, an observer of each failover's calls unless off.
        otel: the engine's OpenTelemetry spans and metrics, an observer when given.
    """

    def __init__(
        self,
        registry: Registry,
        store: FailoverStore,
        handlers: tuple[Handler, Handler],
        policy: ExceptionPolicy | Callable[..., object],
        clock: Any,
        refreshes: Refreshes,
        pools: Pools,
        breaker_defaults: Mapping[str, Any],
        metrics: Metrics,
        otel: OpenTelemetry | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.handler, self.scatter_handler = handlers
        self.policy = policy
        self.clock = clock
        self.refreshes = refreshes
        self.pools = pools
        self.breaker_defaults = breaker_defaults
        self.metrics = metrics
        self.otel = otel
        self.runtimes: dict[Decorated, Runtime] = {}
        self.breakers: dict[str, pybreaker.CircuitBreaker] = {}
        # Set by the engine when it neither routes by tenant nor ignores tenants (Runtime.unrouted).
        self.unrouted: str | None = None
        # Set by the engine given ``fleet=``: the breakers made here share their state on it.
        self.fleet: Fleet | None = None

    def forget(self, decorated: Decorated) -> None:
        """Drop the runtime of a failover replaced by another of its name."""
        self.runtimes.pop(decorated, None)

    def runtime(self, decorated: Decorated, register: Callable[[Decorated], None]) -> Runtime:
        """The runtime of ``decorated``, made on first use (``register`` called first when it
        was decorated for another engine)."""
        rt = self.runtimes.get(decorated)
        if rt is not None:
            return rt
        with self.registry.lock:
            if decorated.definition.name not in self.registry.registered:
                register(decorated)  # decorated for another engine, called on this one
            rt = self.runtimes.get(decorated)
            if rt is None:
                d = decorated.definition
                policy = d.policy if d.policy is not None else self.policy
                blocking = does_io(self.store)
                rt = Runtime(
                    d,
                    decorated.binder,
                    decorated.fn,
                    self.handler if d.splitter is None else self.scatter_handler,
                    policy,
                    self.clock,
                    blocking,
                    blocking and not writes_async(self.store),
                    self.events(d),
                    self.store if isinstance(self.store, MultiTenantStore) else None,
                )
                if d.single_flight:
                    rt.flights = Flights()
                rt.call_type = FlownCall if d.single_flight else Call
                rt.bind(self.execution(d))
                if d.refresh_ahead is not None:
                    rt.ahead = RefreshAhead(rt, self.refreshes)
                rt.unstorable = self.registry.unstorable.get(d.name)
                rt.unrouted = self.unrouted
                self.runtimes[decorated] = rt
            return rt

    def events(self, d: FailoverDefinition) -> Events:
        """The event stream of failover ``d``: its health statistics, its logs, the metrics
        (unless off), the stale report of the unit of work and OpenTelemetry (when on) observe
        it."""
        observers: list[Observer] = [self.registry.stats[d.name], LogObserver(d.name, self.clock)]
        if self.metrics is not NULL_METRICS:
            queued = writes_async(self.store) and does_io(self.store)  # the queue counts
            observers.append(MetricsObserver(self.metrics, d.name, self.clock, queued))
        observers.append(ServedObserver(self.clock, d.name))
        if self.otel is not None:
            observers.append(self.otel.observer(d.name, self.clock, self.breaker_state(d)))
        return Events(observers)

    def breaker_state(self, d: FailoverDefinition) -> Callable[[], str | None]:
        """Reads the state of failover ``d``'s breaker (``None`` without one), made later."""

        def state() -> str | None:
            cb = d.breaker if isinstance(d.breaker, pybreaker.CircuitBreaker) else None
            cb = cb or self.breakers.get(d.name)
            return None if cb is None else str(cb.current_state)

        return state

    def execution(self, d: FailoverDefinition) -> Execution | None:
        """The failover's execution chain: bulkhead outside breaker outside timeout."""
        guards: list[Guard] = []
        if d.max_concurrency is not None or d.bulkhead is not None:
            guards.append(self.bulkhead(d))
        timeout = None
        if d.timeout is not None:
            # Routed by tenant, a tenant's call never joins another tenant's call in flight.
            key = _tenant_key if isinstance(self.store, MultiTenantStore) else key_of
            timeout = SoftTimeout(d.name, d.timeout, self.refreshes, Call.late, _late_off_loop, key)
        if d.breaker is not None:
            inner = (SoftTimeoutError,) if timeout is not None else ()

            def counts(exc: Exception) -> bool:
                return d.accepts(exc) or isinstance(exc, inner)

            guards.append(BreakerGuard(self.breaker(d), counts))
        if not guards and timeout is None:
            return None
        return Execution(tuple(guards), timeout)

    def breaker(self, d: FailoverDefinition) -> pybreaker.CircuitBreaker:
        """The circuit breaker of failover ``d`` (see `Failover.breaker`)."""
        with self.registry.lock:
            cb: pybreaker.CircuitBreaker | None = None if d.breaker is True else d.breaker
            if cb is None:
                cb = self.breakers.get(d.name)
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
                    shared = None
                    if self.fleet is not None:
                        shared = settings["state_storage"] = self.fleet.breaker_storage(d.name)
                    cb = self.breakers[d.name] = pybreaker.CircuitBreaker(name=d.name, **settings)
                    if self.fleet is not None and shared is not None:
                        self.fleet.attach(cb, shared)
            report = self.registry.stats[d.name].circuit_state  # health, then the metrics
            if not any(
                isinstance(x, StateListener) and x.name == d.name and x.report == report
                for x in cb.listeners
            ):
                cb.add_listener(StateListener(d.name, report))
            report(d.name, state_code(cb.current_state))
            if isinstance(self.metrics, PrometheusMetrics):  # the gauge read at scrape time
                self.metrics.circuit_probe(d.name, Circuit(cb).gauge_state)
            return cb

    def bulkhead(self, d: FailoverDefinition) -> Bulkhead:
        """The bulkhead of failover ``d`` (see `Failover.bulkhead`)."""
        return self.pools.guard(
            d.name,
            pool=d.bulkhead,
            max_concurrency=d.max_concurrency,
            weight=d.weight,
            acquire_timeout=d.acquire_timeout,
        )


async def _late_off_loop(call: Call, result: Any) -> None:
    """`Call.late` for an ``async def`` upstream's soft timeout: off the event loop when the
    runtime's store writes block."""
    await call.rt.off_loop(call.late, result)


def _tenant_key(call: Call) -> Any:
    """The soft timeout's flight key of a call on an engine routed by tenant:
    ``(tenant, key)``, the tenant resolved on the caller's thread (`Runtime.flight_key`)."""
    return call.rt.flight_key(key_of(call))
