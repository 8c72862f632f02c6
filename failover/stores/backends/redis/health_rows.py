"""The health rows of a `RedisStore`: one key per publishing process, which Redis expires.

Under the store's prefix:

- ``{prefix}health:{process}``, a string: the row as JSON text, which Redis deletes at the
  row's ``expire_on`` (``SET ... PXAT``): a process that dies leaves nothing behind.
- ``{prefix}health``, a sorted set: the processes, scored by the time Redis expires their row
  (milliseconds), so that reading the rows needs no ``KEYS``/``SCAN``; every publish trims the
  processes expired since, and the set itself expires with its last row.

A publish is one pipeline (one round trip); a read two (the set, then one ``MGET``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from urllib.parse import quote

from ...health_rows import ProcessHealth, decoded
from .commands import Commands

__all__ = ["RedisHealthRows"]


class RedisHealthRows:
    """`failover.stores.health_rows.HealthRows` in a `RedisStore`'s keys.

    Args:
        commands: the store's commands (its client, its errors).
        prefix: the store's key prefix.
        offset_ms: Redis's clock minus the store's, in milliseconds (a fake clock in tests).
    """

    def __init__(self, commands: Commands, prefix: str, offset_ms: Callable[[], int]) -> None:
        self.commands = commands
        self.index = f"{prefix}health"
        self._row_prefix = f"{prefix}health:"
        self._offset_ms = offset_ms

    def _key(self, process: str) -> str:
        return self._row_prefix + quote(process, safe="")

    def publish_health(self, row: ProcessHealth) -> None:
        """Replace the process's row, expiring at its ``expire_on`` (one round trip).

        Raises:
            StoreError: Redis cannot be reached, or refused.
        """
        at = max(round(row.expire_on.timestamp() * 1000) + self._offset_ms(), 1)
        now = int(time.time() * 1000)
        self.commands.pipelined(
            "publish_health",
            [
                ("SET", self._key(row.process), row.to_json(), "PXAT", at),
                ("ZADD", self.index, at, row.process),
                ("ZREMRANGEBYSCORE", self.index, "-inf", now),
                ("PEXPIREAT", self.index, at, "NX"),
                ("PEXPIREAT", self.index, at, "GT"),
            ],
        )

    def health_rows(self, now: datetime) -> list[ProcessHealth]:
        """The rows not expired at ``now`` (two round trips).

        Raises:
            StoreError: Redis cannot be reached.
        """
        since = int(time.time() * 1000)
        processes = self.commands.one("health_rows", "ZRANGE", self.index, since, "+inf", "BYSCORE")
        if not processes:
            return []
        keys = [self._key(p.decode() if isinstance(p, bytes) else p) for p in processes]
        texts = self.commands.mget("health_rows", keys)
        return decoded(self.commands.where, (t for t in texts if t is not None), now)

    def remove_health(self, process: str) -> None:
        """Delete the process's row (one round trip).

        Raises:
            StoreError: Redis cannot be reached.
        """
        self.commands.pipelined(
            "remove_health", [("DEL", self._key(process)), ("ZREM", self.index, process)]
        )
