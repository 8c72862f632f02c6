"""Control over entries in a `RedisStore`: every entry of a name deleted (``.invalidate_all()``),
the entries of a tag (``engine.invalidate_tag``), an entry's fresh window ended (``.expire()``).

Tags: a set per tag, ``{prefix}g:{tag}`` (percent-encoded), whose members are the tagged
entries as ``{N}:{key}`` (the name percent-encoded: the first ``:`` ends it). A write with tags
adds its members in the write's own pipeline, before its entries, and the set lives as long as
its longest-lived entry (``PEXPIREAT ... NX|GT``, as the names' indexes); a write without tags
sends nothing more.

On one server each operation is one script, one round trip: the name's entries read from its
expiry index (``{prefix}i:{N}``) and deleted with it; a tag's members deleted with the set.
On a cluster, where a script names the keys of one slot only, the index or the set is read
first (one round trip), then its entries are deleted in one pipeline per node, sent to every
node at once (with the name taken out of the names set, and put back should a write of it
have landed meanwhile). ``expire`` is one script on the entry's key (its slot), which puts
`failover.serialization.rows.ENDED` in front of the payload text, keeping the header (its
``as_of``) and the key's expiry (``KEEPTTL``): an entry deleted meanwhile stays deleted.
"""

from __future__ import annotations

from typing import Any

from ....serialization.rows import ENDED
from .client import Keys
from .commands import Commands
from .tags import tag_key

__all__ = ["RedisControl", "RedisControlMethods"]

# KEYS: the index, the lex index, the names set; ARGV: the entries' prefix, the name.
_DELETE_ALL = """
local keys = redis.call('ZRANGE', KEYS[1], 0, -1)
local n = 0
for _, k in ipairs(keys) do n = n + redis.call('DEL', ARGV[1] .. k) end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[2])
return n
"""

# KEYS: the tag's set; ARGV: the store's prefix.
_DELETE_TAGGED = """
local n = 0
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local i = string.find(m, ':', 1, true)
  if i then
    local name, key = string.sub(m, 1, i - 1), string.sub(m, i + 1)
    n = n + redis.call('DEL', ARGV[1] .. 'e:' .. m)
    redis.call('ZREM', ARGV[1] .. 'i:' .. name, key)
    redis.call('ZREM', ARGV[1] .. 'k:' .. name, key)
  end
end
redis.call('DEL', KEYS[1])
return n
"""

# KEYS: the entry; ARGV: the mark. 1 when the entry is there.
_EXPIRE = """
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local nl = string.find(v, '\\n', 1, true)
if not nl then return 0 end
if string.sub(v, nl + 1, nl + #ARGV[1]) ~= ARGV[1] then
  redis.call('SET', KEYS[1], string.sub(v, 1, nl) .. ARGV[1] .. string.sub(v, nl + 1), 'KEEPTTL')
end
return 1
"""


class RedisControl:
    """The control over entries of one `RedisStore`.

    Args:
        redis: the store's commands.
        keys: the store's keys.
    """

    def __init__(self, redis: Commands, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def delete_all(self, name: str) -> int:
        """Delete every entry of ``name``; the count."""
        keys, redis = self.keys, self.redis
        index, lex, entries = keys.index(name), keys.lex(name), keys.entries(name)
        if not redis.cluster:
            found = redis.one(
                "delete_all", "EVAL", _DELETE_ALL, 3, index, lex, keys.names, entries, name
            )
            return int(found)
        stored = [_text(k) for k in redis.one("delete_all", "ZRANGE", index, 0, -1)]
        commands: list[tuple[Any, ...]] = []
        if stored:
            commands += (
                *(("DEL", entries + k) for k in stored),
                ("ZREM", index, *stored),
                ("ZREM", lex, *stored),
            )
        # The keys read, not the indexes: one written meanwhile stays. The name leaves the
        # names index too, and comes back at once if its index is still there after the
        # deletes (a write landed meanwhile): the index and the names set are on two slots.
        commands += (("SREM", keys.names, name), ("EXISTS", index))
        replies = redis.pipelined("delete_all", commands)
        if int(replies[-1]):
            redis.one("delete_all", "SADD", keys.names, name)
        return sum(int(r) for r in replies[: len(stored)])

    def delete_tagged(self, tag: str) -> int:
        """Delete every entry carrying ``tag``, of every name; the count."""
        redis, prefix = self.redis, self.keys.prefix
        key = tag_key(prefix, tag)
        if not redis.cluster:
            return int(redis.one("delete_tagged", "EVAL", _DELETE_TAGGED, 1, key, prefix))
        members = [_text(m) for m in redis.one("delete_tagged", "SMEMBERS", key)]
        commands: list[tuple[Any, ...]] = []
        for member in members:
            name, sep, entry = member.partition(":")
            if sep:
                commands += (
                    ("DEL", f"{prefix}e:{member}"),
                    ("ZREM", f"{prefix}i:{name}", entry),
                    ("ZREM", f"{prefix}k:{name}", entry),
                )
        if not commands:
            return 0
        # The members read, not the set: one tagged by a write meanwhile stays tagged.
        replies = redis.pipelined("delete_tagged", [*commands, ("SREM", key, *members)])
        return sum(int(r) for r in replies[0 : len(commands) : 3])

    def expire(self, name: str, key: str) -> bool:
        """Mark the entry `ENDED` in place; whether it was there."""
        entry = self.keys.entries(name) + key
        return bool(self.redis.one("expire", "EVAL", _EXPIRE, 1, entry, ENDED))


class RedisControlMethods:
    """The control over entries of `RedisStore` (its ``_control``), as store methods."""

    _control: RedisControl

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``: one script (one round trip; on a cluster, the
        name's index read, then one pipeline per node); the count.

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self._control.delete_all(name)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name: one script (one round trip; on
        a cluster, the tag's set read, then one pipeline per node); the count.

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self._control.delete_tagged(tag)

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window in place: one script; whether there was one.

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self._control.expire(name, key)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
