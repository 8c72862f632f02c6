"""The Redis side of `failover.RedisPermits`: its keys, its Lua scripts and the client that
runs them. The permit logic (waiting, renewing, falling back) lives in
`failover.execution.redis_permits` and reaches Redis only through `PermitScripts`.

For a pool ``P`` (percent-encoded) under the prefix (``failover:permits:``), in one hash slot
(``{P}``) so that a Redis Cluster can run the scripts:

- ``{prefix}{P}:h``, a sorted set: the leases held, scored by when each expires (milliseconds);
- ``{prefix}{P}:w``, a hash: each lease's weight (permits in use = their sum);
- ``{prefix}{P}:q``, a sorted set: the waiters, scored by arrival (``{prefix}{P}:n``, a counter);
- ``{prefix}{P}:a``, a sorted set: when each waiter's place lapses unless it asks again (a waiter
  that died leaves the queue within a second);
- ``{prefix}{P}:x``, a sorted set: asks given up on without an answer (Redis stopped, too slow),
  scored by when that is forgotten: Redis may still run such an ask, late, and grants it nothing.

Every decision is one script, run atomically by Redis, with Redis's own clock (``TIME``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import redis

from ....errors import ConfigurationError
from .client import make_client

__all__ = ["PermitScripts", "RedisClient", "Unreachable", "unanswered"]

RedisClient = redis.Redis
"""The client type `RedisPermits` accepts (a store's, a shared breaker's)."""

Unreachable = redis.RedisError
"""What a script raises when Redis cannot answer (down, partitioned, too slow)."""


def unanswered(message: str) -> redis.TimeoutError:
    """The error of an ask given up on (no answer in time): an `Unreachable`."""
    return redis.TimeoutError(message)


_PURGE = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[3], id)
end
local used = 0
for _, w in ipairs(redis.call('HVALS', KEYS[2])) do used = used + tonumber(w) end
"""

# KEYS: held, weights, queue, alive, arrivals, given up.
# ARGV: lease id, weight, permits, lease ms, fair (1/0), queue when refused (1/0), place ms.
# Returns 1 when the lease is granted, 0 when not (queued when asked to).
_ACQUIRE = (
    _PURGE
    + """
local id, weight = ARGV[1], tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
if redis.call('ZSCORE', KEYS[6], id) then return 0 end
local lease, place = tonumber(ARGV[4]), tonumber(ARGV[7])
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local ahead = ARGV[5] == '1' and first ~= nil and first ~= id
if not ahead and used + weight <= tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + lease, id)
  redis.call('HSET', KEYS[2], id, weight)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('PEXPIRE', KEYS[1], lease * 2)
  redis.call('PEXPIRE', KEYS[2], lease * 2)
  return 1
end
if ARGV[6] == '1' then
  if not redis.call('ZSCORE', KEYS[3], id) then
    redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), id)
  end
  redis.call('ZADD', KEYS[4], now + place, id)
  for i = 3, 5 do redis.call('PEXPIRE', KEYS[i], lease + place * 2) end
end
return 0
"""
)

# ARGV: lease ms, then the lease ids to renew. Returns the ids no longer held (expired).
_RENEW = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lease, lost = tonumber(ARGV[1]), {}
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, ARGV[i]) == 0
     and not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    table.insert(lost, ARGV[i])
  end
end
redis.call('PEXPIRE', KEYS[1], lease * 2)
redis.call('PEXPIRE', KEYS[2], lease * 2)
return lost
"""

# ARGV: a lease id. Gives the lease back, or the waiter's place in the queue.
_RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return 0
"""

# KEYS: held, weights, queue, alive, given up. ARGV: lease ms, then lease ids whose asks were
# given up on without an answer: whatever they got goes back, and an ask of theirs that Redis
# runs later (sent before it stopped, read after) is refused for a lease's time.
_FORGET = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lease = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('ZREM', KEYS[3], ARGV[i])
  redis.call('ZREM', KEYS[4], ARGV[i])
  redis.call('ZADD', KEYS[5], now + lease, ARGV[i])
end
redis.call('PEXPIRE', KEYS[5], lease)
return 0
"""

# Returns {permits in use, waiters queued}, leases and places that lapsed removed first.
_COUNT = _PURGE + "return {used, redis.call('ZCARD', KEYS[3])}"


class PermitScripts:
    """The scripts of the permit pools under ``prefix``, on one client: `for_pool` gives the
    same client and scripts bound to one pool's keys.

    Args:
        url_or_client: a ``redis://``, ``rediss://`` or ``unix://`` URL, or a `redis.Redis`
            client to share (never closed here).
        prefix: put before every key.
        socket_timeout: seconds before a connect, a read or a write gives up (with a URL).
        owner: what error messages name (``"RedisPermits"``).

    Raises:
        ConfigurationError: neither a Redis URL nor a `redis.Redis`.
    """

    def __init__(
        self, url_or_client: object, prefix: str, socket_timeout: float, owner: str
    ) -> None:
        if isinstance(url_or_client, str):
            self.client: redis.Redis = make_client(url_or_client, socket_timeout)
            self.owns = True
        elif isinstance(url_or_client, redis.Redis):
            self.client, self.owns = url_or_client, False
        else:
            raise ConfigurationError(
                f"{owner}: url_or_client must be a Redis URL or a redis.Redis, "
                f"got {url_or_client!r}"
            )
        self.prefix = prefix
        self._keys: list[str] = []
        self._acquire = self.client.register_script(_ACQUIRE)
        self._renew = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        self._count = self.client.register_script(_COUNT)
        self._forget = self.client.register_script(_FORGET)

    def for_pool(self, pool: str) -> PermitScripts:
        """The same client and scripts on the keys of pool ``pool`` (the client not owned: it
        is closed by whoever made it)."""
        bound = object.__new__(PermitScripts)
        bound.__dict__.update(self.__dict__)
        tag = f"{self.prefix}{{{quote(pool, safe='')}}}"
        bound._keys = [f"{tag}:{part}" for part in ("h", "w", "q", "a", "n", "x")]
        bound.owns = False
        return bound

    def acquire(self, lease: str, weight: int, *args: Any) -> bool:
        """Whether ``lease`` is granted ``weight`` permits; ``args`` are the script's rest:
        permits, lease ms, fair, queue when refused, place ms (all numbers)."""
        return bool(self._acquire(keys=self._keys, args=(lease, weight, *args)))

    def release(self, lease: str) -> None:
        """Give back ``lease``, or its waiter's place in the queue."""
        self._release(keys=self._keys[:4], args=[lease])

    def forget(self, lease_ms: int, leases: Sequence[str]) -> None:
        """Give back what ``leases``, asks given up on without an answer, got, and refuse them
        for ``lease_ms`` should Redis run them late."""
        self._forget(keys=[*self._keys[:4], self._keys[5]], args=[lease_ms, *leases])

    def renew(self, lease_ms: int, leases: Sequence[str]) -> list[Any]:
        """Renew ``leases`` for ``lease_ms``: those no longer held (expired)."""
        lost: list[Any] = self._renew(keys=self._keys[:2], args=[lease_ms, *leases])
        return lost

    def count(self) -> tuple[int, int]:
        """Permits in use and waiters queued now (lapsed leases and places removed first)."""
        used, queued = self._count(keys=self._keys[:4])
        return int(used), int(queued)

    def close(self) -> None:
        """Close the client, when this made it."""
        if self.owns:
            self.client.close()
