"""Browsing a `RedisStore`: a name's keys in key order, its entries as stored.

Each name has, besides its index of keys scored by expiry (``{prefix}i:{N}``, which `find_all`
walks and every write trims), an index of its keys in key order (``{prefix}k:{N}``, every score
0): a page is ``ZRANGE k (after + BYLEX LIMIT 0 n`` then one ``MGET`` of those entries, two
round trips whatever the page's position. Redis expires entries itself and cannot trim the
key-order index as it does so: a key whose entry is gone is skipped by the page that meets it
and removed from the index then (and by `RedisStore.clean_by_expiry`), by a script that removes
it only if its entry is still gone, so a key stored again meanwhile stays listed. A name written
before this index existed gets it on its first page, from the expiry index.
"""

from __future__ import annotations

import time
from typing import Any

from ....serialization.text import as_stored
from ...browsing import PREVIEW, Page, StoredEntry
from .client import Errors, Keys
from .commands import Commands

__all__ = ["CHUNK", "RedisBrowsing"]

CHUNK = 1_000
"""Keys per ``MGET`` (or ``ZADD``, script) when a whole name is read (or indexed, trimmed)."""

# Removes from the key-order index (KEYS[1]) those keys (ARGV[2:]) whose entry (ARGV[1] .. key)
# is gone, atomically: a key stored again between the page's read and this is kept.
_DROP_GONE = """
local removed = 0
for i = 2, #ARGV do
  if redis.call('EXISTS', ARGV[1] .. ARGV[i]) == 0 then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
"""


def _text(member: bytes | str) -> str:
    # A member written by hand may not be UTF-8: with replacement characters it names no entry
    # (a miss, as a key whose entry is gone), where decoding strictly failed the whole read.
    return member.decode(errors="replace") if isinstance(member, bytes) else member


class RedisBrowsing:
    """Pages of a store's names through their key-order indexes.

    Args:
        redis: the store's commands.
        keys: the store's keys.
    """

    def __init__(self, redis: Commands, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        # On a cluster the script cannot run (its keys span slots): see _drop_gone_spread.
        self._drop_gone = None if redis.cluster else redis.client.register_script(_DROP_GONE)

    def page(self, name: str, after: str | None, limit: int) -> Page:
        """Up to ``limit`` entries of ``name`` after the key ``after``, by key."""
        lex = self.keys.lex(name)
        prefix = self.keys.entries(name)
        entries: list[StoredEntry] = []
        cursor = after
        copied = False
        while True:
            want = limit + 1 - len(entries)  # one more than the page: is there a next one?
            start = "-" if cursor is None else f"({cursor}"
            members = self.redis.one("page", "ZRANGE", lex, start, "+", "BYLEX", "LIMIT", 0, want)
            if not members and not copied and cursor is None:
                copied = self._copy_index(name)
                if copied:
                    continue
            if not members:
                break
            keys = [_text(m) for m in members]
            raws = self.redis.mget("page", [prefix + k for k in keys])
            gone = [k for k, raw in zip(keys, raws, strict=True) if raw is None]
            entries += [describe(name, k, r) for k, r in zip(keys, raws, strict=True) if r]
            if gone:
                self.drop_gone(name, gone)
            cursor = keys[-1]
            if len(keys) < want or len(entries) > limit:
                break
        more = len(entries) > limit
        entries = entries[:limit]
        return Page(entries, entries[-1].key if more and entries else None)

    def drop_gone(self, name: str, keys: list[str]) -> int:
        """Remove from ``name``'s key-order index those of ``keys`` whose entry is gone; how
        many went."""
        if self._drop_gone is None:
            return self._drop_gone_spread(name, keys)
        with Errors(self.redis.where, "page"):
            # redis-py's script: EVALSHA, loading the script when the server lacks it.
            removed: Any = self._drop_gone(
                keys=[self.keys.lex(name)], args=[self.keys.entries(name), *keys]
            )
        return int(removed)

    def _drop_gone_spread(self, name: str, keys: list[str]) -> int:
        """`drop_gone` on a cluster, where a script may not read entries in other slots: the
        gone keys are removed, then put back those stored again meanwhile (so a key written
        between the page's read and this stays listed)."""
        lex, prefix = self.keys.lex(name), self.keys.entries(name)
        exists = self.redis.pipelined("page", [("EXISTS", prefix + k) for k in keys])
        gone = [k for k, there in zip(keys, exists, strict=True) if not there]
        if not gone:
            return 0
        removed = self.redis.one("page", "ZREM", lex, *gone)
        again = self.redis.pipelined("page", [("EXISTS", prefix + k) for k in gone])
        back = [x for k, there in zip(gone, again, strict=True) if there for x in (0, k)]
        if back:
            self.redis.one("page", "ZADD", lex, *back)
        return int(removed) - len(back) // 2

    def _copy_index(self, name: str) -> bool:
        """Make ``name``'s key-order index from its expiry index (a name written before the
        key-order index existed); whether there was anything to copy."""
        index, lex = self.keys.index(name), self.keys.lex(name)
        members, expires = self.redis.pipelined(
            "page", [("ZRANGE", index, 0, -1), ("PEXPIRETIME", index)]
        )
        if not members:
            return False
        commands: list[tuple[Any, ...]] = [
            ("ZADD", lex, *[x for m in members[i : i + CHUNK] for x in (0, m)])
            for i in range(0, len(members), CHUNK)
        ]
        if int(expires) > 0:
            commands.append(("PEXPIREAT", lex, int(expires), "GT"))
            commands.append(("PEXPIREAT", lex, int(expires), "NX"))
        self.redis.pipelined("page", commands)
        return True

    # -- whole names (find_all, entries, summaries) -----------------------------------------------

    def keys_of(self, name: str) -> list[str]:
        """The keys in ``name``'s index, sorted, once trimmed of those Redis expired."""
        index = self.keys.index(name)
        now = int(time.time() * 1000)
        members = self.redis.pipelined(
            "find_all", [("ZREMRANGEBYSCORE", index, "-inf", now), ("ZRANGE", index, 0, -1)]
        )[1]
        return sorted(_text(m) for m in members)

    def values(self, name: str, keys: list[str]) -> list[Any]:
        """The stored values of ``keys`` (``None`` where gone), in chunks of one pipeline."""
        prefix = self.keys.entries(name)
        if self.redis.cluster:
            return self.redis.mget("find_all", [prefix + k for k in keys])
        chunks = (
            ("MGET", *[prefix + k for k in keys[i : i + CHUNK]]) for i in range(0, len(keys), CHUNK)
        )
        return [raw for chunk in self.redis.pipelined("find_all", chunks) for raw in chunk]

    def names(self) -> list[str]:
        """Every name that has entries (an index not yet expired), sorted."""
        members = self.redis.one("names", "SMEMBERS", self.keys.names)
        names = sorted(_text(m) for m in members)
        if not names:
            return []
        alive = self.redis.pipelined("names", [("EXISTS", self.keys.index(n)) for n in names])
        return [name for name, exists in zip(names, alive, strict=True) if exists]

    def entries(self, name: str | None) -> list[StoredEntry]:
        """The entries as stored of ``name``, or of every name; by name, then key."""
        listed: list[StoredEntry] = []
        for each in self.names() if name is None else [name]:
            keys = self.keys_of(each)
            for key, raw in zip(keys, self.values(each, keys) if keys else [], strict=True):
                if raw is not None:
                    listed.append(describe(each, key, raw))
        return listed

    def count(self, name: str) -> int:
        """How many entries ``name`` has: its expiry index's size, once trimmed of the keys
        Redis expired (no value is read)."""
        index = self.keys.index(name)
        now = int(time.time() * 1000)
        commands = [("ZREMRANGEBYSCORE", index, "-inf", now), ("ZCARD", index)]
        return int(self.redis.pipelined("count", commands)[1])

    def trim(self) -> None:
        """Trim every name's indexes of the keys whose entries Redis expired: the expiry index
        by score, the key-order index by a script that keeps a key stored again meanwhile."""
        cutoff = int(time.time() * 1000)
        for name in self.names():
            index = self.keys.index(name)
            gone, _ = self.redis.pipelined(
                "clean_by_expiry",
                [
                    ("ZRANGE", index, "-inf", cutoff, "BYSCORE"),
                    ("ZREMRANGEBYSCORE", index, "-inf", cutoff),
                ],
            )
            keys = [_text(m) for m in gone]
            for i in range(0, len(keys), CHUNK):  # bounded scripts: others run between
                self.drop_gone(name, keys[i : i + CHUNK])


def describe(name: str, key: str, raw: bytes | str) -> StoredEntry:
    """The entry as stored (a value with an unreadable header is listed with no times)."""
    as_of, expire_on, payload_type, label, body = as_stored(raw)
    size = len(raw if isinstance(raw, bytes) else raw.encode())
    payload = body[: PREVIEW * 4].decode(errors="replace")[:PREVIEW]
    return StoredEntry(name, key, as_of, expire_on, size, payload_type, payload, label)
