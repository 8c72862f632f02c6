"""The commands of a `RedisStore` write: each entry ``SET ... PXAT`` its expiry, unless the
stored entry is newer, and the upkeep of its name's indexes (``{prefix}i:{N}`` by expiry,
``{prefix}k:{N}`` by key, the ``{prefix}names`` set), sent as one pipeline.

Entries only move forward: the entries are written by one Lua script (`FORWARD`), which reads
each stored value's ``as_of`` (the start of its header: `failover.serialization.text`) and
leaves it when it is after the new one's, atomically; it returns how many it left. One script
call per batch on one server; on a cluster, where a script names the keys of one slot only,
one per entry, in the pipeline per node. The script is called by its SHA (``EVALSHA``), and by
its text (``EVAL``, which loads it) where a server does not have it yet (`forward_fallback`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from ....serialization.text import EntryText
from ...base import Payload
from .client import Keys
from .tags import tag_commands

__all__ = ["FORWARD", "FORWARD_SHA", "Writes", "forward_fallback", "write_commands"]

# KEYS: the entries' keys; ARGV: for each, its as_of (µs), its value, when it expires (PXAT).
# Only the header's start is read (GETRANGE), not the whole value.
FORWARD = """
local kept = 0
for i, key in ipairs(KEYS) do
  local j = 3 * i
  local was = string.match(redis.call('GETRANGE', key, 0, 31), '^(%-?%d+) ')
  if was and tonumber(was) > tonumber(ARGV[j - 2]) then
    kept = kept + 1
  else
    redis.call('SET', key, ARGV[j - 1], 'PXAT', ARGV[j])
  end
end
return kept
"""
FORWARD_SHA = hashlib.sha1(FORWARD.encode()).hexdigest()


class Writes:
    """The commands of one write: the tags (``tagging`` commands, none for entries without
    tags: first, so that no entry is stored untagged), the scripts (``scripts`` of them: their
    replies add up to the entries left for a newer one), then the index upkeep."""

    __slots__ = ("commands", "scripts", "tagging")

    def __init__(self, commands: list[tuple[Any, ...]], scripts: int, tagging: int = 0) -> None:
        self.commands = commands
        self.scripts = scripts
        self.tagging = tagging

    def kept(self, replies: Sequence[Any]) -> int:
        """How many entries a newer stored one kept out, from the pipeline's replies."""
        first = self.tagging
        return sum(int(r) for r in replies[first : first + self.scripts])


def write_commands(
    keys: Keys, values: EntryText, payloads: Sequence[Payload], cluster: bool
) -> Writes:
    """The commands that write ``payloads`` and their indexes (none for no payloads); one script
    call per entry on a ``cluster``, else one for them all."""
    if not payloads:
        return Writes([], 0)
    offset = values.offset_ms()
    entries: list[str] = []
    arguments: list[Any] = []
    indexes: dict[str, dict[str, int]] = {}
    tagged = False
    for payload in payloads:
        value, expires = values.value(payload)
        at = max(expires + offset, 1)  # 0 and below are refused: long expired, gone at once
        name, key = payload.name, payload.key
        if payload.tags:
            tagged = True
        entries.append(keys.entries(name) + key)
        arguments += (value[: value.index(" ")], value, at)  # the header starts with as_of
        members = indexes.get(name)
        if members is None:
            members = indexes[name] = {}
        members[key] = at
    tagging: list[tuple[Any, ...]] = []
    if tagged:
        tagging = tag_commands(keys.prefix, payloads, arguments[2::3])
    if cluster:
        commands: list[tuple[Any, ...]] = [
            *tagging,
            *(
                ("EVALSHA", FORWARD_SHA, 1, entry, *arguments[3 * i : 3 * i + 3])
                for i, entry in enumerate(entries)
            ),
        ]
    else:
        commands = [*tagging, ("EVALSHA", FORWARD_SHA, len(entries), *entries, *arguments)]
    scripts = len(commands) - len(tagging)
    now = int(time.time() * 1000)
    for name, members in indexes.items():
        index, lex = keys.index(name), keys.lex(name)
        # GT: an entry's score only grows, so that a write kept out for a newer entry never
        # moves its key's expiry earlier (the key would leave the index while its entry lives).
        scored: list[Any] = [index, "GT"]
        ordered: list[Any] = [lex]
        for key, at in members.items():
            scored += (at, key)
            ordered += (0, key)
        last = max(members.values())
        commands += (
            ("ZADD", *scored),
            ("ZREMRANGEBYSCORE", index, "-inf", now),
            ("ZADD", *ordered),
            # The indexes live as long as their longest-lived entry: set when they have no
            # expiry yet (new ones), pushed later when this batch outlives them.
            ("PEXPIREAT", index, last, "NX"),
            ("PEXPIREAT", index, last, "GT"),
            ("PEXPIREAT", lex, last, "NX"),
            ("PEXPIREAT", lex, last, "GT"),
        )
    commands.append(("SADD", keys.names, *indexes))
    return Writes(commands, scripts, len(tagging))


def forward_fallback(
    commands: Sequence[tuple[Any, ...]], replies: Sequence[Any]
) -> tuple[list[int], list[tuple[Any, ...]]]:
    """The script calls a server refused for not having the script (``NOSCRIPT``: a restart, a
    ``SCRIPT FLUSH``, a new cluster node), by their place, and the same calls by the script's
    text (``EVAL`` loads it for the next ``EVALSHA``)."""
    places = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    return places, [("EVAL", FORWARD, *commands[i][2:]) for i in places]
