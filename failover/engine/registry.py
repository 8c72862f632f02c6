"""The failovers registered with one engine, by name, and their health statistics."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from ..core import Decorated, resolve_return_type
from ..definition import FailoverDefinition
from ..execution import Pool, Pools
from ..health import DOWN_MIN, DOWN_RATIO, HealthReport, PoolHealth, StoreHealth, settings_of
from ..metrics import Metrics
from ..policy import ExceptionPolicy
from ..recorder import FailoverStats
from ..scatter import slice_type
from ..serialization.allowlist import allow_annotation
from ..serialization.base import Encoding, type_name
from ..serialization.json_codec import JsonCodec, unencodable
from ..stores.base import FailoverStore
from .clock import epoch_seconds

__all__ = ["Registry", "warn_replaced"]


class Registry:
    """The registered failovers of one engine: one per name, a later one replacing the first.

    Each name keeps its `FailoverStats` when it is registered again.
    """

    def __init__(
        self,
        raw_store: FailoverStore,
        policy: ExceptionPolicy | Callable[..., object],
        pools: Pools,
        metrics: Metrics,
        clock: Any,
    ) -> None:
        self.raw_store = raw_store
        self.policy = policy
        self.pools = pools
        self.metrics = metrics
        self.clock = clock
        self.seconds = epoch_seconds(clock)  # the health recorders' float reading of it
        self.lock = threading.RLock()
        self.registered: dict[str, Decorated] = {}
        self.stats: dict[str, FailoverStats] = {}
        self.unstorable: dict[str, str] = {}  # failover name -> why nothing of it is stored

    def register(self, decorated: Decorated) -> Decorated | None:
        """Register ``decorated``; return the other function of its name it replaced, if any."""
        allow_annotation(decorated.fn)  # its return type may be restored from a serializing store
        definition = decorated.definition
        self.pools.check(definition.name, definition.bulkhead, definition.weight)
        self._check_encodable(decorated)
        with self.lock:
            previous = self.registered.get(definition.name)
            if previous is decorated:
                previous = None
            if previous is not None:
                warn_replaced(previous, decorated)
            self.registered[definition.name] = decorated
            stats = self.stats.get(definition.name)
            if stats is None:
                stats = self.stats[definition.name] = FailoverStats(
                    definition.name, self.clock, self.seconds
                )
                self.metrics.track(stats)
            policy = definition.policy if definition.policy is not None else self.policy
            stats.info = settings_of(definition, policy, self.raw_store)
            self._warn_domain_mismatch(decorated)
            return previous

    def definitions(self) -> list[FailoverDefinition]:
        """Every registered failover's definition, by name."""
        with self.lock:
            return [d.definition for _, d in sorted(self.registered.items())]

    def health(
        self,
        now: datetime,
        pools: Iterable[Pool],
        stores: Iterable[StoreHealth] = (),
        thresholds: tuple[float, int] = (DOWN_RATIO, DOWN_MIN),
    ) -> HealthReport:
        """Each registered failover's health at ``now``, worst first, with the pools' and the
        stores'; ``thresholds``: ``down_ratio`` and ``down_min`` (see `Failover.health`)."""
        with self.lock:
            stats = [self.stats[name] for name in self.registered]
        return HealthReport.of(
            (s.health(now, *thresholds) for s in stats),
            now,
            (PoolHealth.of(p, _rejected(p.name, stats)) for p in pools),
            stores,
        )

    def _check_encodable(self, decorated: Decorated) -> None:
        """Warn when the store can never encode what the function returns (an HTTP response
        object on a JSON store): its calls would answer, and nothing would ever be stored."""
        store = self.raw_store
        if not (isinstance(store, Encoding) and isinstance(store.codec, JsonCodec)):
            return
        d = decorated.definition
        bad = unencodable(resolve_return_type(decorated.fn, d.return_annotation))
        if bad is None:
            return
        reason = f"the store cannot encode {type_name(bad)}"
        self.unstorable[d.name] = reason
        warnings.warn(
            f"failover {d.name!r}: returns {type_name(bad)}, which {self.raw_store!r} cannot "
            "encode: its results would never be stored. Return plain data (a dict, a dataclass, "
            "a pydantic model: e.g. response.json()) instead",
            stacklevel=6,
        )

    def _warn_domain_mismatch(self, decorated: Decorated) -> None:
        definition = decorated.definition
        if definition.domain is None:
            return
        for other in self.registered.values():
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
                stacklevel=6,
            )
            return


def _rejected(pool: str, stats: Iterable[FailoverStats]) -> dict[str, int]:
    """The refusals of ``pool``'s permits, per failover, as the failovers' records counted them
    from their streams (the one count of a refusal)."""
    rejected = {}
    for s in stats:
        with s.lock:
            n = s.refused_pools.get(pool)
        if n:
            rejected[s.name] = n
    return rejected


def _slice_type(decorated: Decorated) -> Any:
    """What each entry of ``decorated`` holds (`failover.scatter.slice_type`)."""
    d = decorated.definition
    return slice_type(d, resolve_return_type(decorated.fn, d.return_annotation))


def warn_replaced(previous: Decorated, new: Decorated, stacklevel: int = 6) -> None:
    """Warn that ``new`` takes a name another function registered."""
    if previous.definition.function != new.definition.function:
        warnings.warn(
            f"failover {new.definition.name!r}: the name was registered by "
            f"{previous.definition.function}; {new.definition.function} replaces it",
            stacklevel=stacklevel,
        )
