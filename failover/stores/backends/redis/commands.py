"""A store's Redis commands, run on one server's client or a cluster's, with their errors
turned into `StoreError`s naming the store."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ....errors import PartialWrite
from ....logs import LogLimiter
from .client import Errors
from .cluster_nodes import UNSENT, ClusterNodes
from .topology import Client
from .writes import forward_fallback

__all__ = ["Commands"]

log = logging.getLogger(__name__)

_SCRIPT_CALLS = ("EVALSHA", "EVAL")
_NODE_ERRORS = (redis.RedisError, RedisClusterException)


class Commands:
    """Runs a store's commands, its errors turned into `StoreError` naming the store.

    Args:
        client: the redis-py client.
        where: the store, as error messages name it.
        cluster: ``client`` is a Redis Cluster's.
        clock: the store's clock, which measures the back-off of a cluster node out
            (`ClusterNodes`); default: the monotonic clock.
    """

    def __init__(
        self,
        client: Client,
        where: str,
        cluster: bool = False,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.where = where
        self.cluster = cluster
        """Whether the keys spread over a Redis Cluster's slots: a command may name the keys
        of one slot only."""
        self._said = LogLimiter(log)  # a node out: one line, then one per interval
        self._reads = ClusterNodes(client, clock) if cluster else None

    def one(self, operation: str, *command: Any) -> Any:
        """One command's reply."""
        with Errors(self.where, operation):  # a cluster's client is made on first use
            execute: Callable[..., Any] = self.client.execute_command  # untyped in redis-py
            return execute(*command)

    def pipelined(self, operation: str, commands: Iterable[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands``, sent in one round trip (not a transaction)."""
        with Errors(self.where, operation):
            pipe = self.client.pipeline(transaction=False)
            queue: Callable[..., Any] = pipe.execute_command  # untyped in redis-py
            for command in commands:
                queue(*command)
            replies: list[Any] = pipe.execute()
            return replies

    def scripted(self, operation: str, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """`pipelined`, for a write whose script calls (``EVALSHA``) a server may not know
        yet: those are sent again by the script's text (`forward_fallback`).

        On a cluster the commands go in one pipeline per node (`ClusterNodes.send`): a node
        out leaves its own commands unsent, the others are written, and the write fails as a
        store error that says so, not as the store being out (the store breaker stays
        closed; a queued write is tried again). Only when no node answers is it the store
        out."""
        with Errors(self.where, operation):
            if self._reads is not None:
                sent = self._reads.send(commands)
                replies = sent.replies
                unsent = sum(reply is UNSENT for reply in replies)
                if unsent and not sent.answered and sent.error is not None:
                    raise sent.error
            else:
                replies, unsent = self._execute(commands), 0
            places, again = forward_fallback(commands, replies)
            if again:
                for place, reply in zip(places, self._execute(again), strict=True):
                    replies[place] = reply
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            if unsent:
                raise PartialWrite(
                    f"{self.where}: {operation}: {unsent} of {len(commands)} commands unsent "
                    f"(their cluster node is out: {sent.error}); the other nodes' were written"
                )
            return replies

    def _execute(self, commands: Iterable[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands`` in one round trip, a refused command's error among
        them."""
        client: Any = self.client
        pipe = client.pipeline(transaction=False)
        queue: Callable[..., Any] = pipe.execute_command  # untyped in redis-py
        for command in commands:
            if self.cluster and command[0] in _SCRIPT_CALLS:
                # Routed here by its one key: redis-py's cluster pipeline would otherwise ask a
                # node for the keys of each script call (COMMAND GETKEYS, a round trip each).
                queue(*command, target_nodes=client.get_node_from_key(command[3]))
            else:
                queue(*command)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies

    def mget(self, operation: str, keys: list[str]) -> list[Any]:
        """The values of ``keys`` (``None`` where missing): one ``MGET``; on a cluster one per
        slot, sent in one pipeline per node (`ClusterNodes`).

        On a cluster, a node out (killed, before its replica takes over) fails only its own
        keys: they read ``None`` (a miss), the other nodes' are answered. Only when no node
        answers does the read fail."""
        with Errors(self.where, operation):
            if self._reads is not None:
                read = self._reads.mget(keys)
                if read.unread and read.error is not None:
                    if not read.answered:
                        raise read.error
                    self._partial(operation, read.unread, len(keys), read.error)
                return read.values
            execute: Callable[..., Any] = self.client.execute_command
            found: list[Any] = execute("MGET", *keys)
            return found

    def get(self, operation: str, key: str) -> Any:
        """``GET key``. On a cluster, a key whose node is out while another node answers is a
        miss (``None``), as in `mget`: a point read and a batched one tell the same, and one
        node out does not read as the whole store failing."""
        with Errors(self.where, operation):
            if self._reads is None:
                execute: Callable[..., Any] = self.client.execute_command  # untyped in redis-py
                return execute("GET", key)
            read = self._reads.mget([key])
            if read.unread and read.error is not None:
                if not self._others_answer(key):
                    raise read.error
                self._partial(operation, 1, 1, read.error)
            return read.values[0]

    def _others_answer(self, key: str) -> bool:
        """Whether a master other than ``key``'s answers (one ``PING`` each, until one does)."""
        client: Any = self.client
        try:
            out = client.get_node_from_key(key).name
        except _NODE_ERRORS:
            out = None
        try:
            masters = client.get_primaries()
        except _NODE_ERRORS:
            return False
        for node in masters:
            if node.name == out:
                continue
            try:
                if client.execute_command("PING", target_nodes=node):
                    return True
            except _NODE_ERRORS:
                continue
        return False

    def _partial(self, operation: str, failed: int, asked: int, error: Exception) -> None:
        self._said.report(
            ("partial", operation),
            "failover: %s: %s: %d of %d keys unread (their cluster node is out: %s); "
            "the other nodes' keys were answered",
            self.where,
            operation,
            failed,
            asked,
            error,
        )

    def spread(
        self, command: str, first: Iterable[Any], keys: Iterable[str]
    ) -> list[tuple[Any, ...]]:
        """``command`` over ``keys`` as commands to pipeline: one, or one per key on a cluster
        (a command names the keys of one slot only)."""
        if self.cluster:
            return [(command, *first, k) for k in keys]
        return [(command, *first, *keys)]
