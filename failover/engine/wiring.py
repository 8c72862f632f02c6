"""The runtimes of one engine's failovers: each with its handler chain and execution chain
(its guards in the order of `failover.execution.ORDER`), made on first use."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pybreaker

from ..call import Call
from ..core import Decorated, Runtime
from ..definition import FailoverDefinition
from ..errors import ConfigurationError
from ..events import Events, Observer
from ..execution import (
    ORDER,
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
from ..execution.error_rate import ErrorRate
from ..fleet import Fleet
from ..fleet.flown import FleetFlights, FleetFlownCall
from ..flight import Flights, FlownCall
from ..handlers import Handler, key_of
from ..log_observer import LogObserver
from ..metrics import NULL_METRICS, Metrics, PrometheusMetrics
from ..metrics_observer import MetricsObserver
from ..otel import OpenTelemetry
from ..plain import plain_path
from ..policy import ExceptionPolicy
from ..refresh import RefreshAhead
from ..served import ServedObserver
from ..store_metrics import StoreStates
from ..stores.base import FailoverStore, does_io, writes_async
from ..stores.layers.routing import MultiTenantStore
from .clock import epoch_seconds, utcnow
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
        self.streams: dict[str, Events] = {}  # each failover's event stream, by name
        # The engine's monotonic time in seconds (a rate limit's bucket): the clock's, when
        # given one (a test's fake clock), else the process's.
        self.monotonic: Callable[[], float] = (
            time.monotonic if clock is utcnow else lambda: float(clock().timestamp())
        )
        # The engine's clock as seconds since the epoch (the plain success path, `failover.plain`):
        # the default clock's own float reading, else the clock's reading converted.
        self.seconds: Callable[[], float] = epoch_seconds(clock)
        self.breakers: dict[str, pybreaker.CircuitBreaker] = {}
        # Set by the engine when it neither routes by tenant nor ignores tenants (Runtime.unrouted).
        self.unrouted: str | None = None
        # Set by the engine given ``fleet=``: the breakers made here share their state on it.
        self.fleet: Fleet | None = None

    def forget(self, decorated: Decorated) -> None:
        """Drop the runtime and the event stream of a failover replaced by another of its
        name."""
        self.runtimes.pop(decorated, None)
        self.streams.pop(decorated.definition.name, None)

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
                rt.call_type = Call
                if d.single_flight == "fleet":
                    if self.fleet is None:
                        raise ConfigurationError(
                            f"failover {d.name!r}: single_flight='fleet' needs an engine with "
                            "fleet= (Failover(fleet='redis://...'))"
                        )
                    rt.flights, rt.call_type = FleetFlights(self.fleet), FleetFlownCall
                elif d.single_flight:
                    rt.flights, rt.call_type = Flights(), FlownCall
                rt.bind(self.execution(d))
                if d.refresh_ahead is not None:
                    rt.ahead = RefreshAhead(rt, self.refreshes)
                rt.unstorable = self.registry.unstorable.get(d.name)
                rt.unrouted = self.unrouted
                rt.plain = plain_path(rt, self.seconds)
                self.runtimes[decorated] = rt
            return rt

    def events(self, d: FailoverDefinition) -> Events:
        """The event stream of failover ``d``, made on first use: its health statistics, its
        logs, the metrics (unless off), the stale report of the unit of work and OpenTelemetry
        (when on) observe it."""
        stream = self.streams.get(d.name)
        if stream is not None:
            return stream
        observers: list[Observer] = [self.registry.stats[d.name], LogObserver(d.name, self.clock)]
        if self.metrics is not NULL_METRICS:
            queued = writes_async(self.store) and does_io(self.store)  # the queue counts
            observers.append(MetricsObserver(self.metrics, d.name, self.clock, queued))
        observers.append(ServedObserver(self.clock, d.name))
        if self.otel is not None:
            observers.append(self.otel.observer(d.name, self.clock))
        # Made at once by two threads, one stream is kept: both are alike.
        return self.streams.setdefault(d.name, Events(observers))

    def breaker_changed(self, name: str, state: int) -> None:
        """A breaker's listener: failover ``name``'s breaker is now in ``state``, a fact of its
        stream (on the thread that changed it, a call's or the fleet's)."""
        decorated = self.registry.registered.get(name)
        if decorated is not None:
            self.events(decorated.definition).breaker_state(state)

    def execution(self, d: FailoverDefinition) -> Execution | None:
        """The failover's execution chain: the guards it asks for, in the order of `ORDER`
        (its soft timeout, innermost, runs the upstream)."""
        guards: list[Guard] = []
        timeout = None
        for kind in ORDER:
            if kind.wanted(d):
                made = kind.make(d, self)
                if isinstance(made, SoftTimeout):
                    timeout = made
                else:
                    guards.append(made)
        if not guards and timeout is None:
            return None
        return Execution(tuple(guards), timeout)

    def timeout(self, d: FailoverDefinition) -> SoftTimeout:
        """The soft timeout of failover ``d``: calls of one key share the call in flight."""
        # Routed by tenant, a tenant's call never joins another tenant's call in flight.
        key = _tenant_key if isinstance(self.store, MultiTenantStore) else key_of
        assert d.timeout is not None  # wanted only with timeout= (TIMEOUT.wanted)
        return SoftTimeout(d.name, d.timeout, self.refreshes, Call.late, _late_off_loop, key)

    def breaker(self, d: FailoverDefinition) -> pybreaker.CircuitBreaker:
        """The circuit breaker of failover ``d`` (see `Failover.breaker`)."""
        with self.registry.lock:
            cb: pybreaker.CircuitBreaker | None = None if d.breaker is True else d.breaker
            if cb is None:
                cb = self.breakers.get(d.name)
                if cb is None:
                    settings = dict(self.breaker_defaults)
                    rate = _error_rate(settings, self.monotonic)
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
                    if rate is not None:  # a listener that opens the breaker by its rule
                        cb.add_listener(rate)
                    if self.fleet is not None and shared is not None:
                        self.fleet.attach(cb, shared)
            report = self.breaker_changed  # a fact of the failover's event stream
            if not any(
                isinstance(x, StateListener) and x.name == d.name and x.report == report
                for x in cb.listeners
            ):
                cb.add_listener(StateListener(d.name, report))
            self.events(d).breaker_state(state_code(cb.current_state))
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


def engine_stream(stores: StoreStates, observers: Sequence[Observer]) -> Events:
    """An engine's own stream: the facts of its stores (`Observer.store_state`), told by each
    deadline layer of its chain (``stores`` has them told), to ``stores`` (what its health and
    metrics read) and to ``observers`` (the logs, the health publisher)."""
    return Events([stores, *observers])


def _error_rate(settings: dict[str, Any], clock: Callable[[], float]) -> ErrorRate | None:
    """The error-rate rule of ``breaker_defaults`` (taken out of ``settings``, which pybreaker
    gets), on the engine's clock; with it and no ``fail_max``, failures in a row never open the
    breaker by themselves."""
    if "error_rate" not in settings:
        return None
    rule = ErrorRate(
        settings.pop("error_rate"), settings.pop("min_calls"), settings.pop("period"), clock
    )
    settings.setdefault("fail_max", sys.maxsize)
    return rule
