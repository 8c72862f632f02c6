"""A Redis Cluster's batched reads and writes, each node asked once on its own connection.

redis-py's cluster client meets a node out (killed, before a replica takes over) with its
retries (10 by default), each re-reading the slot map: with one master out a 40-key read took
0.08-0.3 s, enough to pass a loaded host's ``store_timeout`` and miss the other nodes' keys too.
Here each node gets one pipeline (of its slots' ``MGET``s, or of a write's commands); a node
that refuses is remembered as out, and its keys miss (its commands are not sent) without
asking it again until a short back-off passes or the slot map (read again once when a node
goes out) gives its slots to another node.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import redis
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisClusterException,
    TryAgainError,
)

__all__ = ["BACKOFF", "UNSENT", "ClusterNodes", "Read", "Sent"]

BACKOFF = 1.0
"""Seconds a node that refused is not asked again (its keys miss meanwhile)."""

_NODE_ERRORS = (redis.RedisError, RedisClusterException)
_SCRIPT_CALLS = ("EVALSHA", "EVAL")
# Replies saying another node serves the slot now, or the cluster is settling: followed by
# redis-py's cluster client (which reads the slot map again).
_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)

UNSENT: Any = object()
"""`ClusterNodes.send`'s reply of a command whose node is out."""
_UNSENT = UNSENT


class Read(NamedTuple):
    """What a batched read found."""

    values: list[Any]
    """Each key's value, ``None`` where missing or unread."""
    unread: int
    """How many keys were not read (their node out, or their slot without an owner)."""
    answered: bool
    """Whether any node answered, or a master not asked is not known out."""
    error: Exception | None
    """Why the unread keys were not read."""


class Sent(NamedTuple):
    """What `ClusterNodes.send` got."""

    replies: list[Any]
    """Each command's reply (its error if refused), `UNSENT` where its node is out."""
    answered: bool
    """Whether any node answered, or a master not asked is not known out (the cluster is out
    as a whole only when every master is)."""
    error: Exception | None
    """Why some commands were not sent (``None`` when all were)."""


class ClusterNodes:
    """Batched reads and writes on a Redis Cluster, a node out failing only its own keys, at
    the cost of one refused connection per back-off.

    Args:
        client: the cluster's redis-py client (or a `LazyCluster`).
        clock: the time the back-off is measured on (the store's); default: the monotonic
            clock.
        backoff: seconds a node that refused is not asked again.
    """

    def __init__(
        self,
        client: Any,
        clock: Callable[[], datetime] | None = None,
        backoff: float = BACKOFF,
    ) -> None:
        self._client = client
        self._now: Callable[[], float] = (
            time.monotonic if clock is None else (lambda: clock().timestamp())
        )
        self._backoff = backoff
        self._lock = threading.Lock()
        self._out: dict[str, tuple[float, Exception]] = {}  # node -> (asked again from, why)

    def mget(self, keys: list[str]) -> Read:
        """The values of ``keys``: one pipeline per node, one ``MGET`` per slot in it."""
        client = self._client
        values: list[Any] = [None] * len(keys)
        slots: dict[int, list[int]] = {}
        unread = 0
        error: Exception | None = None
        for place, key in enumerate(keys):
            try:
                slot = client.keyslot(key)
            except _NODE_ERRORS as exc:
                unread, error = unread + 1, exc
                continue
            slots.setdefault(slot, []).append(place)
        groups = list(slots.values())
        sent = self.send([("MGET", *[keys[p] for p in places]) for places in groups])
        for places, reply in zip(groups, sent.replies, strict=True):
            if reply is _UNSENT:
                unread += len(places)
                continue
            for place, value in zip(places, reply, strict=True):
                values[place] = value
        return Read(values, unread, sent.answered, sent.error or error)

    def send(self, commands: Sequence[tuple[Any, ...]]) -> Sent:
        """The replies of ``commands`` (each naming the keys of one slot: the first, or a
        script call's first key), one pipeline per node; a command refused its reply is its
        error, as redis-py's ``execute(raise_on_error=False)``; one whose node is out is not
        sent (`UNSENT`)."""
        client = self._client
        replies: list[Any] = [_UNSENT] * len(commands)
        nodes: dict[str, tuple[Any, list[int]]] = {}
        error: Exception | None = None
        for place, command in enumerate(commands):
            key = command[3] if command[0] in _SCRIPT_CALLS else command[1]
            try:
                node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
            except _NODE_ERRORS as exc:  # its slot has no owner in the map just now
                error = exc
                continue
            nodes.setdefault(node.name, (node, []))[1].append(place)
        answered = False
        moved: list[int] = []
        now = self._now()
        for name, (node, places) in nodes.items():
            out = self._out.get(name)
            if out is not None and 0 <= out[0] - now <= self._backoff:
                error = out[1]
                continue
            try:
                pipe = client.get_redis_connection(node).pipeline(transaction=False)
                for place in places:
                    pipe.execute_command(*commands[place])
                got: list[Any] = pipe.execute(raise_on_error=False)
            except _NODE_ERRORS as exc:
                self._went_out(name, now, exc)
                error = exc
                continue
            answered = True
            if out is not None:
                self._out.pop(name, None)
            for place, reply in zip(places, got, strict=True):
                if isinstance(reply, _REDIRECTS):  # redis-py's cluster client follows those
                    moved.append(place)
                else:
                    replies[place] = reply
        if moved:
            try:
                pipe = client.pipeline(transaction=False)
                for place in moved:
                    pipe.execute_command(*commands[place])
                again: list[Any] = pipe.execute(raise_on_error=False)
            except _NODE_ERRORS as exc:
                error = exc
            else:
                answered = True
                for place, reply in zip(moved, again, strict=True):
                    replies[place] = reply
        if not answered and nodes:
            # Only the nodes this batch named were asked: the store is out as a whole only
            # when every master is out (a write or read of one node's keys proves no more).
            answered = not self._all_out(now)
        return Sent(replies, answered, error)

    def _all_out(self, now: float) -> bool:
        """Whether every master of the slot map is remembered out (within its back-off)."""
        try:
            cache = self._client.nodes_manager.nodes_cache
            masters = [n.name for n in list(cache.values()) if n.server_type == "primary"]
        except (*_NODE_ERRORS, AttributeError):
            return True
        with self._lock:
            out = dict(self._out)
        return all(
            (gone := out.get(name)) is not None and 0 <= gone[0] - now <= self._backoff
            for name in masters
        )

    def _went_out(self, name: str, now: float, error: Exception) -> None:
        """Remember node ``name`` out; the first to see it read the slot map again (a replica
        may have taken its slots), once per back-off however many readers saw it refuse."""
        with self._lock:
            out = self._out.get(name)
            fresh = out is not None and 0 <= out[0] - now <= self._backoff
            self._out[name] = (now + self._backoff, error)
        if fresh:
            return
        # No node answering: the next read after the back-off tries again.
        with contextlib.suppress(*_NODE_ERRORS):
            self._client.nodes_manager.initialize()
