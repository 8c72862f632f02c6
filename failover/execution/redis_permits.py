"""`RedisPermits`: one pool of permits for every process of a cluster, in Redis.

Permits are held as leases that expire: a process that dies holding permits (``SIGKILL``, a
lost host) gives them back when its leases run out, while a living holder renews its leases
(every third of the lease time, one round trip for all of them) for as long as its calls run.
Waiters queue in Redis by arrival; a fair pool serves them in that order. Every decision is one
Lua script, run atomically by Redis, with Redis's own clock (``TIME``): the processes' clocks
never matter. The keys and the scripts are `failover.stores.backends.redis.permits`'s;
this module holds the permit logic and reaches Redis only through its `PermitScripts`.

Redis unreachable (down, partitioned, too slow for ``socket_timeout``): the caller's choice,
``unavailable="refuse"`` (the call is refused, `failover.BulkheadFull`, and served from the
store) or ``"local"`` (this process falls back to in-process permits of the same size), never a
wait past the call's deadline plus one ``socket_timeout`` (for a task, whose asks run on worker
threads, plus the larger of 1 s and four ``socket_timeout``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from time import monotonic

from ..errors import ConfigurationError
from ..expiry import parse_ttl
from ..forks import AfterFork
from .permits import LocalPermits, remaining
from .redis_waits import AsyncAsks

try:
    from redis.exceptions import TimeoutError as _RedisTimeout

    from ..stores.backends.redis.permits import PermitScripts, RedisClient, Unreachable, unanswered
except ImportError as exc:  # pragma: no cover - exercised where redis-py is not installed
    raise ImportError(
        f"RedisPermits needs redis-py: pip install 'failover[redis]' ({exc})"
    ) from exc

__all__ = ["RedisPermits"]

log = logging.getLogger(__name__)

_UNAVAILABLE = ("refuse", "local")
_PLACE_MS = 1_000  # a waiter's place lapses this long after its last ask (or 3 polls)
_RECOUNT = 1.0  # seconds between two counts asked of a Redis that is down (metrics scrapes)
_DOUBTS = 10_000  # asks given up on, kept to forget in Redis (older ones lapse there)
_FORGET_BATCH = 1_000  # lease ids per round trip when forgetting them


class RedisPermits(AsyncAsks):
    """A cluster-wide permit source: pools declared with it, under one name, against one Redis,
    share their permits across every process.

    Declare the pool with the same name and size in every process::

        engine.bulkhead_pool("exports", permits=10, source=RedisPermits(url, lease="30s"))

    Args:
        url_or_client: a ``redis://``, ``rediss://`` or ``unix://`` URL, or a `redis.Redis`
            client to share (the store's, the shared breaker's: either reply type works).
        lease: how long a permit outlives a holder that stopped renewing it (a crashed
            process): seconds, a timedelta or ``"30s"``. Holders renew every third of it.
        prefix: put before every key.
        unavailable: when Redis cannot answer: ``"refuse"`` (the call is refused with
            `failover.BulkheadFull` and served from the store) or ``"local"`` (in-process
            permits of the same size, for this process alone, until Redis answers again).
        socket_timeout: seconds before a connect, a read or a write gives up (with a URL).
        poll: the longest pause between two asks of a waiting call (it starts at 2 ms and
            doubles): seconds, a timedelta or ``"50ms"``.

    Raises:
        ConfigurationError: a bad setting (nothing is connected).
    """

    kind = "redis"
    store_label = "permits"
    """The ``store`` label of the source's Redis in ``failover_store_up`` and
    ``failover_store_errors_total``."""

    def __init__(
        self,
        url_or_client: str | RedisClient,
        lease: timedelta | float | str = "30s",
        *,
        prefix: str = "failover:permits:",
        unavailable: str = "refuse",
        socket_timeout: float = 0.25,
        poll: timedelta | float | str = "50ms",
    ) -> None:
        owner = "RedisPermits"
        self.lease = parse_ttl(lease, owner, "lease").total_seconds()
        self.poll = parse_ttl(poll, owner, "poll").total_seconds()
        self._place_ms = max(_PLACE_MS, round(self.poll * 3000))
        if not isinstance(socket_timeout, int | float) or not 0 < socket_timeout < 60:
            raise ConfigurationError(
                f"{owner}: socket_timeout must be a positive number of seconds under 60, "
                f"got {socket_timeout!r}"
            )
        # A task gives an ask up this long past its deadline (the thread's own round trip is
        # bounded by socket_timeout; this bounds the wait for a free worker too).
        self._margin = max(1.0, 4 * socket_timeout)
        if unavailable not in _UNAVAILABLE:
            raise ConfigurationError(
                f"{owner}: unavailable must be 'refuse' or 'local', got {unavailable!r}"
            )
        if not isinstance(prefix, str):
            raise ConfigurationError(f"{owner}: prefix must be a string, got {prefix!r}")
        self._redis = PermitScripts(url_or_client, prefix, socket_timeout, owner)
        self.client: RedisClient = self._redis.client
        self.prefix = prefix
        self.unavailable = unavailable
        self.pool: str | None = None
        self.permits = 0
        self.fair = True
        self._local: LocalPermits | None = None
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # lease id -> weight, renewed while held
        # Asks given up on without an answer (and gives back that failed): Redis may have run
        # them, or run them late (a stopped Redis reads them when it resumes). Forgotten in
        # Redis at the next ask, for their permits not to stay taken for a whole lease.
        self._doubtful: dict[str, None] = {}
        self._waiting = 0
        self._closed = threading.Event()
        self._renewer: threading.Thread | None = None
        self._healthy()

    def _healthy(self) -> None:
        """The source's Redis as the engine sees a store: ``up`` while its latest exchange was
        answered (its changes told to the watchers: `watch`), ``errors`` counted per operation
        and reason."""
        self.up = True
        self.errors: Counter[tuple[str, str]] = Counter()
        self._tried = 0.0  # when a count was last asked of a Redis that was down
        self._watchers: list[Callable[[bool], None]] = []

    @property
    def meanwhile(self) -> str:
        """What the pool's callers get while its Redis is out (said by the logs)."""
        if self.unavailable == "local":
            return f"pool {self.pool!r} uses in-process permits of its size until it answers"
        return f"calls of pool {self.pool!r} are refused (served from the store) until it answers"

    def watch(self, watcher: Callable[[bool], None]) -> None:
        """Have ``watcher(up)`` called each time the source's Redis stops answering
        (``False``: the callers refuse or fall back to in-process permits, as ``unavailable``
        says) or answers again (``True``), on the thread whose exchange changed it, under the
        source's lock (watchers hear the changes in their order): a watcher records or wakes,
        it never waits. One that raises is logged. A Redis out already is told at once."""
        with self._lock:
            self._watchers.append(watcher)
            if not self.up:
                self._tell(watcher, False)

    def _tell(self, watcher: Callable[[bool], None], up: bool) -> None:
        try:
            watcher(up)
        except Exception:  # a watcher's bug is never the exchange's outcome
            log.warning("%r: a watcher of its state failed", self, exc_info=True)

    def _answered(self) -> None:
        """An exchange was answered: up again, told (the usual case, up already, reads one
        attribute)."""
        if self.up:
            return
        with self._lock:
            if not self.up:
                self.up = True
                for watcher in self._watchers:
                    self._tell(watcher, True)

    def __repr__(self) -> str:
        lease = f"lease={self.lease:g}s"
        return f"RedisPermits({self.pool!r}, permits={self.permits}, {lease})"

    def bind(self, pool: str, permits: int, fair: bool) -> RedisPermits:
        """The source of pool ``pool``: the same client and settings, its own keys."""
        bound = object.__new__(RedisPermits)
        bound.__dict__.update(self.__dict__)
        bound.pool, bound.permits, bound.fair = pool, permits, fair
        bound._redis = self._redis.for_pool(pool)
        bound._local = LocalPermits(permits, fair)
        bound._lock = threading.Lock()
        bound._held = {}
        bound._doubtful = {}
        bound._closed = threading.Event()
        bound._renewer = None
        bound._healthy()
        _FORKS.add(bound)
        return bound

    def forked(self) -> None:
        """In a forked child: the leases held, and the asks in doubt, are the parent's (it
        gives them back, or they lapse); the child holds none and renews none, its renewal
        thread starts with its own first lease. Its in-process fall-back permits start free."""
        closed = self._closed.is_set()
        self._lock = threading.Lock()
        self._held, self._doubtful, self._waiting = {}, {}, 0
        self._closed = threading.Event()
        if closed:
            self._closed.set()
        self._renewer = None

    # -- one ask: the decision, made by Redis ------------------------------------------------

    def _ask(self, lease: str, weight: int, queue: bool) -> bool:
        lease_ms, fair = round(self.lease * 1000), int(self.fair)
        args = (self.permits, lease_ms, fair, int(queue), self._place_ms)
        try:
            if self._doubtful:
                self._forget(lease_ms)
            granted = self._redis.acquire(lease, weight, *args)
        except Unreachable as exc:
            self._doubt(lease)
            self._failed("acquire", exc)
            raise
        self._answered()
        if granted:
            with self._lock:
                self._held[lease] = weight
            self._renewing()
        return granted

    def _leave(self, lease: str) -> None:
        """Give a lease or a waiter's place back; Redis unreachable, it lapses there."""
        with self._lock:
            self._held.pop(lease, None)
        try:
            self._redis.release(lease)
        except Unreachable as exc:
            self._doubt(lease)
            self._failed("release", exc)
            self._warn("giving permits back", exc)
            return
        self._answered()

    def _doubt(self, lease: str) -> None:
        """``lease``'s ask or give-back went unanswered: forget it in Redis at the next ask."""
        with self._lock:
            self._doubtful[lease] = None
            if len(self._doubtful) > _DOUBTS:  # the oldest lapses in Redis on its own
                del self._doubtful[next(iter(self._doubtful))]

    def _forget(self, lease_ms: int) -> None:
        """Forget the asks given up on in Redis (raises when Redis still cannot answer)."""
        with self._lock:
            doubtful = list(self._doubtful)
        for start in range(0, len(doubtful), _FORGET_BATCH):
            self._redis.forget(lease_ms, doubtful[start : start + _FORGET_BATCH])
        with self._lock:
            for lease in doubtful:
                self._doubtful.pop(lease, None)

    # -- acquire: one loop of asks, two ways to pause between them ---------------------------

    def acquire(self, weight: int, deadline: float | None) -> object | None:
        """Take ``weight`` permits, asking Redis again (2 ms, doubling up to ``poll``) until
        ``deadline``; a thread waits."""
        lease, pause, queued = uuid.uuid4().hex, 0.002, False
        self._enter_wait()
        try:
            while True:
                queue = deadline is None or deadline > monotonic()
                if self._ask(lease, weight, queue):
                    return lease, weight
                queued = queued or queue
                left = remaining(deadline)
                if not queue or left == 0:
                    if queued:  # a place held in the queue would hold up the waiters behind
                        self._leave(lease)
                    return None
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, self.poll)
        except Unreachable as exc:
            local = self._fall_back(exc).acquire(weight, deadline)
            return None if local is None else (None, local)
        finally:
            self._exit_wait()

    def _fall_back(self, exc: Unreachable) -> LocalPermits:
        """Redis could not answer: the in-process permits, or (``"refuse"``) ``exc`` again.
        A place the call may hold in the queue lapses there."""
        assert self._local is not None
        if self.unavailable == "refuse":
            self._warn("taking permits", exc)
            raise exc
        self._warn("taking permits (in-process permits meanwhile)", exc)
        return self._local

    def release(self, lease: object) -> None:
        """Give the permits of ``lease`` back (in Redis, or in-process after a fall-back)."""
        assert isinstance(lease, tuple)
        ident, weight = lease
        if ident is None:
            assert self._local is not None
            self._local.release(weight)
        else:
            self._leave(ident)

    # -- counts -------------------------------------------------------------------------------

    def in_use(self) -> int:
        """Permits taken now by every process (one round trip; raises when Redis is down).

        While the latest exchange with Redis failed, raises at once, without a round trip,
        but once a second: a metrics scrape never waits on a Redis that hangs."""
        used, _ = self._count()
        return used

    def queued(self) -> int:
        """Calls of every process waiting now (one round trip; as `in_use` while Redis is
        down)."""
        _, queued = self._count()
        return queued

    def _count(self) -> tuple[int, int]:
        if not self.up:
            now = monotonic()
            if now - self._tried < _RECOUNT:
                raise unanswered(f"permit pool {self.pool!r}: Redis is down")
            self._tried = now
        try:
            counts = self._redis.count()
        except Unreachable as exc:
            self._failed("count", exc)
            raise
        self._answered()
        return counts

    def waiting(self) -> int:
        """Calls of this process waiting now."""
        return self._waiting

    def _enter_wait(self) -> None:
        with self._lock:
            self._waiting += 1

    def _exit_wait(self) -> None:
        with self._lock:
            self._waiting -= 1

    # -- renewal ------------------------------------------------------------------------------

    def _renewing(self) -> None:
        """Start the renewal thread at the first lease, and again in a forked child (a fork
        keeps the thread object, not the thread)."""
        renewer = self._renewer
        if renewer is not None and renewer.is_alive():
            return
        with self._lock:
            renewer = self._renewer
            if (renewer is None or not renewer.is_alive()) and not self._closed.is_set():
                self._renewer = threading.Thread(
                    target=self._renew_loop, name=f"failover-permits-{self.pool}", daemon=True
                )
                self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._closed.wait(self.lease / 3):
            with self._lock:
                held = list(self._held)
            if not held:
                continue
            try:
                lost = self._redis.renew(round(self.lease * 1000), held)
            except Unreachable as exc:
                self._failed("renew", exc)
                self._warn("renewing leases", exc)
                continue
            self._answered()
            if lost:
                log.warning(
                    "permit pool %r: %d lease(s) expired before renewal (paused longer than "
                    "lease=%gs?); their permits may be in use twice",
                    self.pool,
                    len(lost),
                    self.lease,
                )

    def _failed(self, operation: str, exc: BaseException) -> None:
        """An exchange with Redis failed: down until one is answered (told when it goes
        down), and counted."""
        reason = "timeout" if isinstance(exc, TimeoutError | _RedisTimeout) else "error"
        with self._lock:
            self.errors[(operation, reason)] += 1
            if self.up:
                self.up = False
                for watcher in self._watchers:
                    self._tell(watcher, False)

    def _warn(self, doing: str, exc: BaseException) -> None:
        """Redis's trouble, each time at debug with its traceback: the outage itself is told to
        the watchers (`watch`: the engine's stream, whose logs say it once, and its end)."""
        log.debug("permit pool %r: Redis failed %s: %s", self.pool, doing, exc, exc_info=exc)

    def close(self) -> None:
        """Stop renewing (held leases then lapse after ``lease``); close an own client."""
        self._closed.set()
        renewer = self._renewer
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(timeout=5)
        self._redis.close()


_FORKS = AfterFork(RedisPermits.forked)
