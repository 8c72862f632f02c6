"""Bulkhead: calls take permits from a pool; a call that finds none in time is served stale.

A `Pool` is private to one failover (``max_concurrency=N``) or named and shared by several
(``engine.bulkhead_pool("exports", permits=10)`` and ``bulkhead="exports"``). Its permits come
from a `PermitSource` (`LocalPermits` in this process by default). Each failover's `Bulkhead` is
the guard: it takes ``weight`` permits per call, waits up to ``acquire_timeout`` (``0`` refuses at
once, ``None`` waits without limit), and gives them back when the call ends. Threads and tasks
make the same decision (`Bulkhead.admit`); only the wait differs (`Wait.block` or `Wait.wait`: the
source's ``acquire`` or ``aacquire``).

A call already holding permits of a pool (a nested call in the same context, into the same
failover or another one of the pool) takes no more, which would deadlock a pool of size 1: the
outer call's ticket covers it, as a Bitbucket ``Ticket`` on a named resource does, for as long
as the outer call lasts (a task it started that goes on after it takes permits of its own).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from functools import partial
from time import monotonic
from typing import Any, ClassVar

from ..closeable import Closeable
from ..errors import BulkheadFull, ConfigurationError
from .base import Guard, Kind, Wait, run_through
from .permits import Kinded, LocalPermits, PermitSource, SupportsTake

__all__ = ["BULKHEAD", "Bulkhead", "Pool", "Pools"]

log = logging.getLogger(__name__)

# The permits the calling context's calls hold (for nested calls): the record ``[pools, outer]``
# of the innermost call that took permits, ``pools`` those it and the calls around it hold,
# ``outer`` the record of the call around it. A call's end empties its ``pools`` as well as
# resetting the variable: a task or a thread given a copy of the context during the call keeps
# the record, and must see the permits given back (it held them for ever otherwise).
_held: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "failover_bulkheads", default=None
)
# What `Bulkhead._ahead` holds when the lock-free take is never the way (weights, other sources).
_NEVER = (None,)


def _nothing() -> None:
    pass


class Pool:
    """Permits shared by the failovers that draw from it.

    Args:
        name: the pool's name (a private pool is named after its failover).
        permits: permits in all.
        fair: waiters are served in arrival order.
        source: where the permits come from; default: `LocalPermits` (this process).
        private: made by ``max_concurrency=`` for one failover, not declared by name.
    """

    def __init__(
        self,
        name: str,
        permits: int,
        fair: bool = True,
        source: PermitSource | None = None,
        private: bool = False,
    ) -> None:
        self.name = name
        self.permits = permits
        self.fair = fair
        self.declared = source  # as declared: a redeclaration must name the same
        self.private = private
        self.source: PermitSource = (LocalPermits() if source is None else source).bind(
            name, permits, fair
        )
        self.kind = (
            str(self.source.kind) if isinstance(self.source, Kinded) else type(self.source).__name__
        )

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, permits={self.permits}, source={self.kind})"

    @property
    def free(self) -> int:
        """Permits not taken now."""
        return self.permits - self.source.in_use()

    @property
    def waiting(self) -> int:
        """Calls of this process waiting for permits now."""
        return self.source.waiting()

    def close(self) -> None:
        """Release what the source holds on to (a Redis source's renewal thread)."""
        if isinstance(self.source, Closeable):
            self.source.close()


class Bulkhead(Guard):
    """One failover's guard on a pool: ``weight`` permits per call.

    Args:
        name: the failover's name (for messages).
        limit: the permits of a private pool (``max_concurrency``); ignored with ``pool``.
        acquire_timeout: seconds a call waits for permits; ``0`` refuses at once, ``None``
            waits without limit.
        weight: permits per call.
        pool: a shared pool; default: a private in-process pool of ``limit`` permits.
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = (BulkheadFull,)

    def __init__(
        self,
        name: str,
        limit: int = 1,
        acquire_timeout: float | None = 0.0,
        *,
        weight: int = 1,
        pool: Pool | None = None,
    ) -> None:
        self.name = name
        self.pool = Pool(name, limit, private=True) if pool is None else pool
        self.source = self.pool.source
        # A source's non-blocking take, if it has one: permits free now cost no wait, no I/O
        # and, for a task, no coroutine. Decided here, once: `admit` reads the attribute.
        self._take: Callable[[int], object | None] | None = (
            self.source.take if isinstance(self.source, SupportsTake) else None
        )
        self._release = self.source.release
        # One permit of an in-process pool: taken and given back inline (`admit`, `exit`).
        self._alone = (self.pool,)
        self._inline = weight == 1 and type(self.source) is LocalPermits
        self._free: list[None] = []
        self._waiters: Any = ()
        self._fair = True
        self._hand_over: Callable[[], None] = _nothing
        if self._inline:
            local: LocalPermits = self.source  # type: ignore[assignment]  # checked just above
            self._free, self._waiters = local.lock_free()
            self._fair = local.fair
            self._hand_over = local.hand_over
        # What a lock-free take must not jump (one attribute read on the hot path): a fair
        # pool's waiters; nothing for an unfair pool; `_NEVER` when the take is not inline.
        self._ahead: Any = (self._waiters if self._fair else ()) if self._inline else _NEVER
        self.limit = self.pool.permits
        self.acquire_timeout = acquire_timeout
        self.fail_fast = acquire_timeout == 0
        self.weight = weight

    def __repr__(self) -> str:
        weight = "" if self.weight == 1 else f", weight={self.weight}"
        pool = "" if self.pool.private else f", pool={self.pool.name!r}"
        # A shared source's count is a round trip: a repr does no I/O.
        free = f", free={self.free}" if self.pool.kind == "local" else f", {self.pool.kind}"
        return f"Bulkhead({self.name!r}, limit={self.limit}{pool}{weight}{free})"

    @property
    def free(self) -> int:
        """Permits of the pool not taken now."""
        return self.pool.free

    @property
    def waiting(self) -> int:
        """Calls waiting for permits of the pool now."""
        return self.pool.waiting

    # -- the guard ----------------------------------------------------------------------------

    def _deadline(self) -> float | None:
        timeout = self.acquire_timeout
        return None if timeout is None else monotonic() + timeout

    def admit(self) -> Any:
        """Take the permits if they are free now, or ask to wait for them up to
        ``acquire_timeout`` (a `Wait` whose end raises `BulkheadFull` if none came)."""
        held = _held.get()
        while held is not None and not held[0]:  # a call that ended (a copied context's)
            held = held[1]
        if held is not None and self.pool in held[0]:
            return None  # nested call: the outer one holds the permits
        if not self._ahead:
            # `LocalPermits.take(1)`, inlined, without a lock: `list.pop` is one atomic step
            # under the GIL, so two threads never get the same permit, and a thread that finds
            # the list empty goes the slow way (a `Wait`). A waiter that queued just after the
            # check above is served by the release of this permit (`exit`), as with `take`.
            try:
                self._free.pop()
            except IndexError:
                pass
            else:
                mark = [self._alone if held is None else (*held[0], self.pool), held]
                return mark, _held.set(mark)  # one permit: nothing else to keep
        lease = None if self._take is None else self._take(self.weight)
        if lease is None:  # a fail-fast call reads no clock (deadline 0.0: already past)
            deadline = 0.0 if self.fail_fast else self._deadline()
            return Wait(self.source, self.weight, deadline, partial(self._waited, held))
        return self._marked(held, lease)

    def _marked(self, held: list[Any] | None, lease: object) -> tuple[Any, ...]:
        """The token of a call given ``lease`` of this pool's source, nested in ``held``'s
        call (or in none): its record, set in the calling context (`_held`), and the lease."""
        mark = [self._alone if held is None else (*held[0], self.pool), held]
        return mark, _held.set(mark), lease

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call on this thread (`Guard.run`): one permit of an in-process pool free now is
        taken and given back around it as `admit` and `exit` do, in one frame; any other
        call goes through them."""
        held = _held.get()
        while held is not None and not held[0]:  # as in `admit`
            held = held[1]
        if held is not None and self.pool in held[0]:
            return fn(*args, **kwargs)  # nested call: the outer one holds the permits
        if not self._ahead:
            try:
                self._free.pop()  # as in `admit`
            except IndexError:
                pass
            else:
                mark = [self._alone if held is None else (*held[0], self.pool), held]
                token = _held.set(mark)
                try:
                    return fn(*args, **kwargs)
                finally:
                    mark[0] = ()  # for the copies of this context (`_held`)
                    _held.reset(token)  # this frame's context: the token is its own
                    self._free.append(None)  # as in `exit`
                    if self._waiters:
                        self._hand_over()
        return run_through(self.admit, self.exit, fn, args, kwargs)

    def _waited(
        self, held: list[Any] | None, lease: object | None, error: BaseException | None
    ) -> Any:
        if error is not None:
            if isinstance(error, Exception):  # a source that cannot answer refuses: recovered
                raise self._refuse(error) from error
            raise error  # cancelled, interrupted: not a refusal
        if lease is None:
            raise self._refuse()
        return self._marked(held, lease)

    def exit(self, token: Any, exc: BaseException | None) -> None:
        """Give the permits back (to the first waiters, if any)."""
        if token is None:
            return
        token[0][0] = ()  # the call ended, for the copies of its context too (`_held`)
        # Exited in another context than entered: the permits still go back.
        try:  # noqa: SIM105  (contextlib.suppress costs more than the rest of the exit)
            _held.reset(token[1])
        except ValueError:
            pass
        if len(token) == 2:  # one permit of an in-process pool (`admit`)
            # `LocalPermits.release(1)`, inlined: the permit goes back (an atomic append),
            # then any waiter gets it; a waiter queues itself before it looks at the free
            # permits, under the source's lock, so it sees this one or this check sees it.
            self._free.append(None)
            if self._waiters:
                self._hand_over()
            return
        try:
            self._release(token[2])
        except Exception:  # a lease the source cannot take back expires there
            log.warning("failover %r: releasing permits of pool %r failed", self.name,
                        self.pool.name, exc_info=True)  # fmt: skip

    def _refuse(self, cause: Exception | None = None) -> BulkheadFull:
        pool = self.pool
        wait = "None" if self.acquire_timeout is None else f"{self.acquire_timeout:g}s"
        if cause is not None:
            error = BulkheadFull(
                f"failover {self.name!r}: the permits of pool {pool.name!r} could not be had "
                f"({pool.kind}: {type(cause).__name__}: {cause})"
            )
        elif pool.private:
            error = BulkheadFull(
                f"failover {self.name!r}: all {self.limit} permits in use "
                f"(max_concurrency={self.limit}, acquire_timeout={wait})"
            )
        else:
            error = BulkheadFull(
                f"failover {self.name!r}: {self.weight} of the {self.limit} permits of pool "
                f"{pool.name!r} not free (weight={self.weight}, acquire_timeout={wait})"
            )
        # The refusal's pool: `failover_bulkhead_rejected_total`'s label, the pool's health.
        error.pool = pool.name
        return error


class Pools:
    """An engine's pools: the named ones it declared, and each failover's guard.

    Args:
        on_pool: called with each pool made (the metrics track it).
    """

    def __init__(self, on_pool: Callable[[Pool], None] | None = None) -> None:
        self.on_pool = on_pool
        self._lock = threading.Lock()
        self.named: dict[str, Pool] = {}
        self._guards: dict[str, Bulkhead] = {}

    def declare(
        self, name: str, permits: int, fair: bool = True, source: PermitSource | None = None
    ) -> Pool:
        """The pool ``name``: made on the first declaration; a later one must say the same.

        Raises:
            ConfigurationError: a bad setting, or a declaration that differs from the first.
        """
        owner = f"bulkhead_pool({name!r})"
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"bulkhead_pool: name must be a non-empty string, got {name!r}"
            )
        if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
            raise ConfigurationError(f"{owner}: permits must be a positive int, got {permits!r}")
        if not isinstance(fair, bool):
            raise ConfigurationError(f"{owner}: fair must be True or False, got {fair!r}")
        if source is not None and not isinstance(source, PermitSource):
            raise ConfigurationError(
                f"{owner}: source must be a PermitSource (bind, acquire, aacquire, release, "
                f"in_use, waiting), got {source!r}"
            )
        with self._lock:
            pool = self.named.get(name)
            if pool is None:
                pool = self.named[name] = self._made(Pool(name, permits, fair, source))
                return pool
        mine = (permits, fair, source)
        theirs = (pool.permits, pool.fair, pool.declared)
        if mine[:2] != theirs[:2] or mine[2] is not theirs[2]:
            raise ConfigurationError(
                f"{owner}: already declared with permits={pool.permits}, fair={pool.fair}, "
                f"source={pool.declared!r}; now permits={permits}, fair={fair}, "
                f"source={source!r}. One name is one pool: use another name"
            )
        return pool

    def check(self, failover: str, pool: str | None, weight: int) -> None:
        """Refuse a ``weight`` above the permits of the declared pool ``pool``."""
        found = None if pool is None else self.named.get(pool)
        if found is not None and weight > found.permits:
            raise ConfigurationError(
                f"failover {failover!r}: weight={weight} is more than the {found.permits} "
                f"permits of pool {pool!r}: no call could ever run"
            )

    def guard(
        self,
        failover: str,
        *,
        pool: str | None,
        max_concurrency: int | None,
        weight: int,
        acquire_timeout: float | None,
    ) -> Bulkhead:
        """The guard of ``failover`` (one per name; remade when its settings change).

        Raises:
            ConfigurationError: ``pool`` was never declared, or is smaller than ``weight``.
        """
        with self._lock:
            guard = self._guards.get(failover)
            if pool is not None:
                shared = self.named.get(pool)
                if shared is None:
                    raise ConfigurationError(
                        f"failover {failover!r}: bulkhead={pool!r} names no pool of this "
                        f"engine; declare it first: engine.bulkhead_pool({pool!r}, permits=N)"
                    )
                self.check(failover, pool, weight)
            elif guard is not None and guard.pool.private and guard.limit == max_concurrency:
                shared = guard.pool  # the same private pool: permits in use carry over
            else:
                assert max_concurrency is not None
                shared = self._made(Pool(failover, max_concurrency, private=True))
            if (
                guard is None
                or guard.pool is not shared
                or guard.weight != weight
                or guard.acquire_timeout != acquire_timeout
            ):
                guard = self._guards[failover] = Bulkhead(
                    failover, shared.permits, acquire_timeout, weight=weight, pool=shared
                )
            return guard

    def _made(self, pool: Pool) -> Pool:
        if self.on_pool is not None:
            try:
                self.on_pool(pool)
            except Exception:  # metrics never break a declaration
                log.warning("tracking permit pool %r failed", pool.name, exc_info=True)
        return pool

    def all(self) -> list[Pool]:
        """Every pool in use or declared: the named ones, then the private ones, by name."""
        with self._lock:
            private = {g.pool.name: g.pool for g in self._guards.values() if g.pool.private}
            return [*sorted(self.named.values(), key=lambda p: p.name),
                    *(private[n] for n in sorted(private))]  # fmt: skip

    def close(self) -> None:
        """Close every named pool's source."""
        for pool in list(self.named.values()):
            try:
                pool.close()
            except Exception:
                log.warning("closing permit pool %r failed", pool.name, exc_info=True)


def _shown(d: Any) -> str:
    what = [repr(d.bulkhead) if d.bulkhead else str(d.max_concurrency)]
    if d.weight != 1:
        what.append(f"weight {d.weight}")
    if d.acquire_timeout is None:
        what.append("wait")
    elif d.acquire_timeout:
        what.append(f"wait {d.acquire_timeout:g}s")
    return f"bulkhead({', '.join(what)})"


BULKHEAD = Kind(
    "bulkhead",
    wanted=lambda d: d.max_concurrency is not None or d.bulkhead is not None,
    shown=_shown,
    make=lambda d, wiring: wiring.bulkhead(d),
)
"""The bulkhead in the guards' order: ``max_concurrency=`` or ``bulkhead=``."""
