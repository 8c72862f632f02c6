"""The engine: one store chain, one handler chain, and the failovers registered with it."""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .chain import handler_chain, store_chain
from .cleanup import CleanupScheduler
from .codec import allow_annotation
from .context import PolicyLike
from .core import Decorated, Runtime
from .definition import FailoverDefinition
from .errors import ConfigurationError
from .execution import BasicExecution
from .handlers import Handler
from .metrics import Metrics, resolve_metrics
from .policy import resolve_policy
from .stores.async_write import flush_chain
from .stores.base import FailoverStore
from .stores.tenant import MultiTenantStore, TenantStoreFactory

__all__ = ["Failover", "configure", "get_engine", "utcnow"]

log = logging.getLogger("failover")


utcnow: Callable[[], datetime] = functools.partial(datetime.now, UTC)
"""The default clock: aware UTC now (a partial of a builtin: no Python frame per call)."""


class Failover:
    """An engine: the store chain, the handler chain, and the registered failovers.

    Args:
        store: a `FailoverStore`, or a URL for `make_store` (``"memory://"``, ``"sqlite:///f.db"``).
            With multi-tenancy: a URL (see `failover.stores.tenant.per_tenant`) or a factory
            ``tenant -> FailoverStore``; either one turns multi-tenancy on, a URL when it
            contains ``{tenant}``.
        async_writes: write on a background worker (`AsyncWriteStore`); ``None``: on for stores
            that do I/O, off for in-process ones.
        tenant_resolver: returns the current tenant id; enables multi-tenant routing (one store
            chain per tenant). Default with multi-tenancy: `failover.current_tenant`.
        metrics: Prometheus metrics: ``True`` (the default registry), a registry, or ``False``.
        policy: the exception policy of failovers that set none.
        breaker_defaults: ``fail_max`` and ``reset_timeout`` for ``breaker=True``.
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
        self.breaker_defaults = dict(breaker_defaults or {})
        self.metrics: Metrics = resolve_metrics(metrics)
        self.async_writes = async_writes
        self.tenant_resolver = tenant_resolver
        self.raw_store, self.store = store_chain(
            store, tenant_resolver, async_writes, self.metrics, clock
        )
        if isinstance(self.store, MultiTenantStore):
            self.tenant_resolver = self.store.resolver
        self.handler: Handler = handler_chain(self.store, self.metrics, clock)
        # Only failovers with a splitter pay for the scatter/gather layer.
        self.scatter_handler: Handler = handler_chain(self.store, self.metrics, clock, scatter=True)
        self.execution = BasicExecution()
        self._lock = threading.RLock()
        self._registered: dict[str, Decorated] = {}
        self._runtimes: dict[Decorated, Runtime] = {}
        self._closed = False
        self._clean_lock = threading.Lock()  # one cleanup at a time: scheduled or by hand
        self._schedulers: list[CleanupScheduler] = []

    def __repr__(self) -> str:
        return f"Failover(store={self.store!r}, enabled={self.enabled})"

    @property
    def blocking(self) -> bool:
        """Whether the store chain does blocking I/O (async shells then read on a thread)."""
        return bool(getattr(self.store, "does_io", True))

    @property
    def blocking_writes(self) -> bool:
        """Whether writes block the caller (I/O store without async writes)."""
        return self.blocking and not getattr(self.store, "writes_async", False)

    # -- registration -------------------------------------------------------------------------

    def register(self, decorated: Decorated) -> None:
        """Register a decorated function; a second one under the same name replaces the first."""
        allow_annotation(decorated.fn)  # its return type may be restored from a serializing store
        definition = decorated.definition
        with self._lock:
            previous = self._registered.get(definition.name)
            if previous is not None and previous is not decorated:
                _warn_replaced(previous, decorated)
                self._runtimes.pop(previous, None)
            self._registered[definition.name] = decorated
            self._warn_domain_mismatch(definition)

    def _warn_domain_mismatch(self, definition: FailoverDefinition) -> None:
        if definition.domain is None:
            return
        for other in self._registered.values():
            o = other.definition
            if (
                o.domain == definition.domain
                and o.name != definition.name
                and o.ttl != definition.ttl
            ):
                warnings.warn(
                    f"failover {definition.name!r}: domain {definition.domain!r} is shared with "
                    f"{o.name!r} under a different ttl ({definition.ttl} vs {o.ttl})",
                    stacklevel=5,
                )
                return

    def definitions(self) -> list[FailoverDefinition]:
        """Every registered failover's definition, by name."""
        with self._lock:
            return [d.definition for _, d in sorted(self._registered.items())]

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
                    self.execution,
                    policy,
                    self.clock,
                    self.blocking,
                    self.blocking_writes,
                    self.store if isinstance(self.store, MultiTenantStore) else None,
                )
                self._runtimes[decorated] = rt
            return rt

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
        return flush_chain(self.store, timeout)

    def close(self) -> None:
        """Stop the cleanup schedulers started here, flush pending writes, release the stores.

        Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for scheduler in self._schedulers:
            scheduler.stop()
        # A cleanup run by hand on another thread ends first: its store is not closed under it.
        with self._clean_lock:
            self.store.close()

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
