"""Tags in Redis: a set per tag, ``{prefix}g:{tag}`` (percent-encoded), whose members are the
tagged entries as ``{N}:{key}`` (see `failover.stores.backends.redis.control`), and the
commands a write with tags adds to its pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from ....payload import ReferentialPayload

__all__ = ["tag_commands", "tag_key"]


def tag_key(prefix: str, tag: str) -> str:
    """The set of a tag's entries: ``{prefix}g:{tag}``."""
    return f"{prefix}g:{quote(tag, safe='')}"


def tag_commands(
    prefix: str, payloads: Sequence[ReferentialPayload[Any]], expiries: Sequence[int]
) -> list[tuple[Any, ...]]:
    """The commands that tag ``payloads`` (none for entries without tags): each tag's set gets
    its members, and lives as long as its longest-lived entry (``expiries``: when Redis
    expires each entry, ms)."""
    members: dict[str, dict[str, None]] = {}
    last: dict[str, int] = {}
    for payload, at in zip(payloads, expiries, strict=True):
        if not payload.tags:
            continue
        member = f"{quote(payload.name, safe='')}:{payload.key}"
        for tag in payload.tags:
            members.setdefault(tag, {})[member] = None
            last[tag] = max(last.get(tag, 0), at)
    commands: list[tuple[Any, ...]] = []
    for tag, some in members.items():
        key = tag_key(prefix, tag)
        commands += (
            ("SADD", key, *some),
            ("PEXPIREAT", key, last[tag], "NX"),
            ("PEXPIREAT", key, last[tag], "GT"),
        )
    return commands
