"""The commands of a `RedisStore` write: each entry ``SET ... PXAT`` its expiry, and the
upkeep of its name's indexes (``{prefix}i:{N}`` by expiry, ``{prefix}k:{N}`` by key, the
``{prefix}names`` set), sent as one pipeline."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..base import Payload
from .client import Keys
from .values import Values

__all__ = ["write_commands"]


def write_commands(
    keys: Keys, values: Values, payloads: Sequence[Payload]
) -> list[tuple[Any, ...]]:
    """The commands that write ``payloads`` and their indexes (none for no payloads)."""
    if not payloads:
        return []
    offset = values.offset_ms()
    commands: list[tuple[Any, ...]] = []
    indexes: dict[str, dict[str, int]] = {}
    for payload in payloads:
        value, expires = values.value(payload)
        at = max(expires + offset, 1)  # 0 and below are refused: long expired, gone at once
        name, key = payload.name, payload.key
        commands.append(("SET", keys.entries(name) + key, value, "PXAT", at))
        members = indexes.get(name)
        if members is None:
            members = indexes[name] = {}
        members[key] = at
    now = int(time.time() * 1000)
    for name, members in indexes.items():
        index, lex = keys.index(name), keys.lex(name)
        scored: list[Any] = [index]
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
    return commands
