"""Where both chains are assembled, in the order of the design diagram.

Store chain, outermost first (per tenant under the router)::

    MultiTenantStore -> CopyingStore -> DeadlineStore -> AsyncWriteStore -> raw store

(the deadline layer only over stores that do I/O).

Handler chain, outermost first::

    ScatterGatherHandler -> DefaultHandler -> store chain
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from .closeable import Closeable
from .errors import ConfigurationError
from .handlers import DefaultHandler, Handler, ScatterGatherHandler
from .metrics import NULL_METRICS, Metrics
from .stores.base import FailoverStore, declared, does_io, isolating, walk, writes_async
from .stores.factory import make_store, per_tenant
from .stores.layers.async_write import AsyncWriteStore
from .stores.layers.copying import CopyingStore
from .stores.layers.deadline import DeadlineStore
from .stores.layers.routing import MultiTenantStore, TenantStoreFactory
from .stores.layers.tiered import TieredStore
from .tenant import current_tenant, pinned

__all__ = ["handler_chain", "store_chain"]


def store_chain(
    store: object,
    tenant_resolver: Callable[[], str | None] | None,
    async_writes: bool | None,
    metrics: Metrics,
    clock: Callable[[], datetime],
    store_timeout: float | None = None,
    store_breaker_reset: float = 5.0,
    store_breaker_after: int = 3,
    backplane: Any = None,
) -> tuple[FailoverStore, FailoverStore]:
    """The engine's raw store and the chain over it, from `Failover`'s ``store=`` setting;
    ``backplane`` (the engine's fleet's) keeps the near copies of tiered stores coherent.

    Raises:
        ConfigurationError: a store setting that cannot work.
    """

    def layers(raw: FailoverStore, tenant: str | None = None) -> FailoverStore:
        """The layers over one raw store (``tenant``'s, with multi-tenancy), outermost first:
        copying, the deadline, async writes, then the raw store."""
        if isinstance(raw, MultiTenantStore):
            return raw  # a router stays outermost: its tenants' chains are its own
        for layer in walk(raw):
            if backplane is not None and isinstance(layer, TieredStore):
                backplane.attach(layer, tenant)
            # A queue the store brought along (a tiered store's, one given by the user)
            # reports to the engine's metrics, unless it was given its own.
            if isinstance(layer, AsyncWriteStore):
                layer.clock = clock  # its log limits on the engine's time
                if layer.metrics is NULL_METRICS:
                    layer.metrics = metrics
        chain = raw
        queued = _queues_writes(raw, async_writes)
        if queued:
            chain = AsyncWriteStore(chain, metrics=metrics)
            chain.clock = clock
        # Over the queue, so that a queued write passes through without a thread hop; only
        # over I/O: an in-process store cannot hang.
        # Not over a tiered store: its near copy answers while far fails, and a breaker over
        # both would skip near too.
        if store_timeout is not None and does_io(raw) and not isinstance(raw, TieredStore):
            chain = DeadlineStore(
                chain, store_timeout, clock, open_for=store_breaker_reset, after=store_breaker_after
            )
        elif store_timeout is not None and isinstance(raw, TieredStore):
            # far's own; reads hedge
            raw.guard_far(store_timeout, clock, store_breaker_reset, store_breaker_after)
        # Copy before the queue, so that a caller mutating its result while the write waits
        # changes nothing; a queued write is not encoded yet, so even an isolating store needs it.
        if queued or _needs_copy(raw):
            chain = CopyingStore(chain)
        return chain

    factory = _tenant_factory(store, tenant_resolver, clock)
    if factory is not None:
        chains = _TenantChains(factory, layers, async_writes is not False)
        # The router is outermost; each tenant's raw store is under its own layers.
        router = MultiTenantStore(chains, tenant_resolver or current_tenant)
        return router, router
    raw = make_store(store, clock=clock) if isinstance(store, str) else store
    if not isinstance(raw, FailoverStore):
        raise ConfigurationError(
            f"Failover: store must be a URL or a FailoverStore (or, for multi-tenancy, "
            f"a factory tenant -> store), got {store!r}"
        )
    return raw, layers(raw)


def handler_chain(
    store: FailoverStore,
    clock: Callable[[], datetime],
    scatter: bool = False,
    store_interval: timedelta | None = None,
) -> Handler:
    """The handler chain over ``store``; ``scatter`` adds the scatter/gather layer (only
    failovers with a splitter get it)."""
    tenant = None
    if isinstance(store, MultiTenantStore):
        router = store

        def tenant() -> str:
            pin = pinned.get()
            return router.resolve() if pin is None else pin

    default = DefaultHandler(store, clock, store_interval, tenant)
    return ScatterGatherHandler(default) if scatter else default


def _queues_writes(raw: FailoverStore, async_writes: bool | None) -> bool:
    if writes_async(raw):
        return False  # queued already (or never blocking: a tiered store)
    if async_writes is None:
        return does_io(raw)
    return async_writes


def _needs_copy(store: FailoverStore) -> bool:
    # A store that encodes on the caller's thread, or a copying layer given as the store, says
    # it isolates already: a copying layer in front would only copy everything twice. One that
    # shares its results on purpose (InMemoryStore(copy=False)) asked for none.
    return not isolating(store) and not declared(store).shares_results


def _tenant_factory(
    store: object, resolver: object, clock: Callable[[], datetime]
) -> TenantStoreFactory | None:
    """What makes each tenant's raw store when multi-tenancy is on (``None``: it is off).

    It is on with a ``tenant_resolver``, a factory ``tenant -> store``, or a URL with
    ``{tenant}``.
    """
    if resolver is not None and not callable(resolver):
        raise ConfigurationError(f"Failover: tenant_resolver must be callable, got {resolver!r}")
    if isinstance(store, str):
        if resolver is None and "{tenant}" not in store:
            return None
        return per_tenant(store, clock=clock)
    if isinstance(store, FailoverStore):
        if resolver is not None:
            raise ConfigurationError(
                "Failover: with tenant_resolver, store must be a URL or a factory "
                f"(tenant -> store), not one store every tenant would share: {store!r}"
            )
        return None
    return store if callable(store) else None


class _TenantChains:
    """Makes a tenant's store chain: the tenant's raw store under the engine's layers."""

    def __init__(
        self,
        factory: TenantStoreFactory,
        chain: Callable[[FailoverStore, str], FailoverStore],
        writes_async: bool,
    ) -> None:
        self.factory = factory
        self.chain = chain
        # With async_writes=None, stores that do I/O get a queue and the others never block:
        # either way a write does not block the caller.
        self.writes_async = writes_async

    def __repr__(self) -> str:
        return f"{self.factory!r} (each under the engine's layers)"

    @property
    def does_io(self) -> bool:
        """The tenants' raw stores do I/O (assumed when the factory does not say)."""
        return does_io(self.factory)

    @property
    def max_tenants(self) -> int | None:
        """The stores the router keeps open at once, as the factory declares (``None``: the
        router's default)."""
        most: int | None = getattr(self.factory, "max_tenants", None)
        return most

    def __call__(self, tenant: str) -> FailoverStore:
        return self.chain(self.factory(tenant), tenant)

    def close(self) -> None:
        """Close the factory, when it holds resources (a shared connection pool)."""
        if isinstance(self.factory, Closeable):
            self.factory.close()
