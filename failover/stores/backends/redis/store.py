"""`RedisStore`: entries in Redis, which expires them itself.

The keys under the store's prefix (``"failover:"`` by default), for a failover name ``N``
(percent-encoded, so that a ``:`` in a name can never make two entries share a key):

- ``{prefix}e:{N}:{key}``, a string: one entry, a header line then the payload text (see
  `failover.serialization.text`). Redis deletes it at its ``expire_on`` (``SET ... PXAT``):
  the store has nothing to clean.
- ``{prefix}i:{N}``, a sorted set: the keys of ``N``'s entries, scored by the time Redis expires
  each (milliseconds). `RedisStore.find_all` walks it instead of ``KEYS``/``SCAN`` over the
  database. Every write trims the keys expired since, and the index itself expires with its
  last entry.
- ``{prefix}k:{N}``, a sorted set: the same keys, every score 0, so that they are read in key
  order (``BYLEX``): the pages of `RedisStore.page` (see `failover.stores.backends.redis.browsing`).
  It expires with its last entry too.
- ``{prefix}names``, a set: the names that have entries (`RedisStore.names`, ``failover
  inspect``).

One operation is one command, or one pipeline (one round trip): ``find`` is ``GET``,
``find_many`` one ``MGET``, ``store`` and ``store_many`` one pipeline of ``SET``\\ s and the index
updates (`failover.stores.backends.redis.writes`). Needs Redis 7.0 or later
(``PEXPIREAT ... NX|GT``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import redis
from redis.cluster import RedisCluster

from ....errors import ConfigurationError
from ....masking import masked_url
from ....serialization.base import Codec
from ....serialization.crypto import Cipher
from ....serialization.row_options import (
    DEFAULT_MAX_ROW_BYTES,
    merged_row_options,
    split_row_options,
)
from ....serialization.rows import SerializedStore, Serializer
from ....serialization.text import EntryText
from ...base import Capabilities, Payload
from ...browsing import Page, StoredEntry, Summary, summary_of
from ...health_rows import KeepsHealthRows
from ...layers import tenant_stores
from ...layers.tenant_stores import TenantStores
from .aio import AsyncClients, AsyncRedisMethods, async_url
from .browsing import RedisBrowsing
from .client import DEFAULT_PREFIX, Keys, checked_prefix, split_url
from .commands import Commands
from .control import RedisControl, RedisControlMethods
from .health_rows import RedisHealthRows
from .sharing import shared_client
from .topology import Client, LazyCluster, store_client
from .writes import write_commands

__all__ = ["RedisStore"]

log = logging.getLogger(__name__)


class RedisStore(
    SerializedStore, KeepsHealthRows, AsyncRedisMethods, RedisControlMethods, Capabilities
):
    """Entries in Redis: shared by every instance, expired by Redis itself.

    Values go through the same `Serializer` as `SqlStore`'s (the JSON codec and its allowlist
    by default, signed pickle as the opt-in, optional encryption); an entry that cannot be
    decoded is a miss (`find` raises `SerializationError`, which the engine counts as a recover
    ``error``; `find_many` and `find_all` skip it with a warning), and never runs code.

    Connections are made on first use: a service starts while Redis is down, its calls answer
    live meanwhile (their writes fail and are counted), and recoveries find nothing until Redis
    is back. Every socket operation gives up after ``socket_timeout``.

    Args:
        url_or_client: a ``redis://``, ``rediss://`` or ``unix://`` URL, a
            ``redis+sentinel://host:port,.../master`` URL (the master the sentinels name, found
            again after a failover) or a ``redis+cluster://host:port,...`` URL (a Redis
            Cluster); its ``prefix`` option sets ``prefix``; redis-py's options pass through.
            Or a `redis.Redis` / `redis.cluster.RedisCluster` client to share (the store then
            never closes it, and its own timeouts apply).
        prefix: put before every key the store writes; stores with different prefixes share
            one database without seeing each other's entries.
        codec: turns values into text and back; default `JsonCodec`.
        cipher: encrypts the payloads written (e.g. `FernetCipher`).
        allowed_types: more types the JSON codec may restore.
        socket_timeout: seconds before a connect, a read or a write gives up (with a URL).
        clock: the time ``expire_on`` is measured on (the engine passes its own): each entry
            lives ``expire_on - clock()`` on Redis's clock. Default: the wall clock, and the
            entry expires at ``expire_on`` exactly.
        cluster: the ``redis://`` URL names one node of a Redis Cluster (as
            ``redis+cluster://`` does). On a cluster, a name's entries spread over the slots
            (a key each); `find_many` and batched writes send one pipeline per node, to every
            node at once.
        accept_plain: with a ``cipher`` or a signing ``codec``, read entries that are neither
            encrypted nor signed too (refused by default: anyone able to write the database can
            forge them). For a migration only. The URL's ``?accept_plain=true`` says the same.
        max_row_bytes: a stored value longer than this is a miss, refused before it is decoded
            or decrypted, and a value that encodes longer is not written (default 8 MiB; the
            URL's ``?max_row_bytes=`` says the same).
        tenant: the tenant this store serves; a tenant router sets it on the stores it makes.
            Encrypted and signed entries are bound to it, to the key prefix and to their entry.

    Raises:
        ConfigurationError: a bad URL, option, prefix, codec, cipher or ``max_row_bytes``
            (nothing is connected).
    """

    does_io = True
    isolating = True
    browsable = True
    keeps_tags = True

    def __init__(
        self,
        url_or_client: str | Client,
        prefix: str = DEFAULT_PREFIX,
        codec: Codec | None = None,
        cipher: Cipher | None = None,
        *,
        allowed_types: Iterable[Any] = (),
        socket_timeout: float = 1.0,
        clock: Callable[[], datetime] | None = None,
        cluster: bool = False,
        accept_plain: bool = False,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        tenant: str | None = None,
    ) -> None:
        settings: dict[str, Any] = {"accept_plain": accept_plain, "max_row_bytes": max_row_bytes}
        if isinstance(url_or_client, str):
            url, url_prefix = split_url(url_or_client)
            url, from_url = split_row_options(url, masked_url(url))
            settings = merged_row_options("RedisStore", settings, from_url)
            if url_prefix is not None:
                if prefix not in (DEFAULT_PREFIX, url_prefix):
                    raise ConfigurationError(
                        f"RedisStore: prefix {prefix!r} and the URL's prefix={url_prefix!r} "
                        "disagree; give one"
                    )
                prefix = url_prefix
            prefix = checked_prefix(prefix, "RedisStore")
            self.client: Client = store_client(url, socket_timeout, cluster)
            self._owns_client = True
            shown = masked_url(url)
            aio_url = async_url(url, cluster)
        elif isinstance(url_or_client, redis.Redis | RedisCluster | LazyCluster):
            prefix = checked_prefix(prefix, "RedisStore")
            self.client = url_or_client
            self._owns_client = False
            shown = repr(url_or_client)
            aio_url = None  # its options are the caller's: async callers use a worker
        else:
            raise ConfigurationError(
                f"RedisStore: expected a redis:// URL, a redis.Redis client or a RedisCluster, "
                f"got {url_or_client!r}"
            )
        if clock is not None and not callable(clock):
            raise ConfigurationError(f"RedisStore: clock must be callable, got {clock!r}")
        self.prefix = prefix
        self._where = f"RedisStore({shown}, prefix={prefix!r})"
        self.serializer = Serializer(
            codec, cipher, allowed_types, owner=self._where, place=f"redis:{prefix}", **settings
        )
        if tenant is not None:
            self.serializer.bind_tenant(tenant)
        self._values = EntryText(self.serializer, clock)
        self._keys = Keys(prefix)
        cluster = isinstance(self.client, RedisCluster | LazyCluster)
        self._redis = Commands(self.client, self._where, cluster, clock)
        self._owns_aio = aio_url is not None  # per_tenant's stores share the factory's
        self._aio = None if aio_url is None else AsyncClients(aio_url, socket_timeout, self._where)
        self.browsing = RedisBrowsing(self._redis, self._keys)
        self._control = RedisControl(self._redis, self._keys)
        # The processes' health rows (Failover(publish_health=...)), a key each.
        self.health = RedisHealthRows(self._redis, prefix, self._values.offset_ms)

    def __repr__(self) -> str:
        return self._where

    @property
    def codec(self) -> Codec:
        """The codec values are written with."""
        return self.serializer.codec

    @property
    def cipher(self) -> Cipher | None:
        """The cipher payloads are encrypted with, if any."""
        return self.serializer.cipher

    # -- FailoverStore ----------------------------------------------------------------------------

    def store(self, payload: Payload) -> int:
        """Insert one entry, or replace the stored one unless it is newer (one round trip); 1
        when a newer one kept it out.

        Raises:
            SerializationError: the codec cannot encode the value (nothing is written).
            StoreError: Redis cannot be reached, or refused.
        """
        return self.store_many((payload,))

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Insert or replace several entries (each unless the stored one is newer: one script,
        atomic), in one pipeline (one round trip); of two writes of one key, the newer wins
        (the later on a tie). How many a newer entry kept out.

        Raises:
            SerializationError: the codec cannot encode one of the values (nothing is written).
            StoreError: Redis cannot be reached, or refused.
        """
        writes = write_commands(self._keys, self._values, payloads, self._redis.cluster)
        if not writes.commands:
            return 0
        return writes.kept(self._redis.scripted("store", writes.commands))

    def find(self, name: str, key: str) -> Payload | None:
        """The entry, or ``None`` (Redis has removed expired ones; on a cluster, also when the
        key's node is out while the others answer: only the out node's keys miss).

        Raises:
            SerializationError: the entry cannot be decoded.
            StoreError: Redis cannot be reached.
        """
        raw = self._redis.get("find", self._keys.entries(name) + key)
        return None if raw is None else self._values.load(name, key, raw)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``, in one ``MGET`` (on a cluster, one per slot, in one
        pipeline per node sent to every node at once); entries that cannot be decoded are
        skipped with a warning. On a cluster with a node out, the keys of the nodes that answer
        are found and the out node's miss (logged once, then once per interval).

        Raises:
            StoreError: Redis cannot be reached (on a cluster: no node answers).
        """
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        prefix = self._keys.entries(name)
        raws = self._redis.mget("find_many", [prefix + k for k in wanted])
        return self._values.decoded(name, zip(wanted, raws, strict=True))

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``, by key, read through the name's index (two round trips);
        entries that cannot be decoded are skipped with a warning.

        Raises:
            StoreError: Redis cannot be reached.
        """
        keys = self.browsing.keys_of(name)
        if not keys:
            return []
        found = self._values.decoded(name, zip(keys, self.browsing.values(name, keys), strict=True))
        return list(found.values())

    def delete(self, name: str, key: str) -> None:
        """Remove the entry if present (one round trip).

        Raises:
            StoreError: Redis cannot be reached.
        """
        self._redis.pipelined(
            "delete",
            [
                ("DEL", self._keys.entries(name) + key),
                ("ZREM", self._keys.index(name), key),
                ("ZREM", self._keys.lex(name), key),
            ],
        )

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries of ``name`` under ``keys`` that are present (one round trip).

        Raises:
            StoreError: Redis cannot be reached.
        """
        wanted = list(dict.fromkeys(keys))
        if wanted:
            prefix = self._keys.entries(name)
            self._redis.pipelined(
                "delete",
                [
                    *self._redis.spread("DEL", (), [prefix + k for k in wanted]),
                    ("ZREM", self._keys.index(name), *wanted),
                    ("ZREM", self._keys.lex(name), *wanted),
                ],
            )

    def clean_by_expiry(self, now: datetime) -> int:
        """Nothing to delete: Redis removes each entry at its ``expire_on``. Trims the names'
        indexes of the keys it removed, and returns 0.

        Raises:
            StoreError: Redis cannot be reached.
        """
        self.browsing.trim()
        return 0

    def close(self) -> None:
        """Close the client's connections, when the store made the client."""
        if self._owns_client:
            self.client.close()
        if self._aio is not None and self._owns_aio:
            self._aio.close()

    # -- beyond the protocol ----------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every name that has entries, sorted.

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self.browsing.names()

    def entries(self, name: str | None = None) -> list[StoredEntry]:
        """The entries as stored, not decoded (their types need no allowlist): of ``name``, or
        of every name; by name, then key.

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self.browsing.entries(name)

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """Up to ``limit`` entries of ``name`` after the key ``after``, by key, as stored (not
        decoded): two round trips (``ZRANGE ... BYLEX``, ``MGET``) wherever the page is.

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self.browsing.page(name, after, limit)

    def count(self, name: str) -> int:
        """How many entries ``name`` has: its expiry index's size, once trimmed of the keys
        Redis expired (no value is read).

        Raises:
            StoreError: Redis cannot be reached.
        """
        return self.browsing.count(name)

    def summary(self, name: str, now: datetime) -> Summary:
        """``name``'s entries counted (those expired at ``now`` among them), their ``as_of``
        range and total size: Redis has no aggregate over values, so every entry of the name
        is read (their headers give the times).

        Raises:
            StoreError: Redis cannot be reached.
        """
        return summary_of(name, self.entries(name), now)

    @classmethod
    def per_tenant(
        cls,
        url_or_client: str | Client,
        prefixes: Mapping[str, str] | None = None,
        **store_kwargs: Any,
    ) -> TenantStores:
        """A factory ``tenant -> RedisStore`` for `MultiTenantStore`: one key prefix per
        tenant, one shared client (connection pool).

        Args:
            url_or_client: a Redis URL (its ``prefix`` option is the base prefix), or a client
                (never closed here).
            prefixes: the key prefix of each tenant; a tenant not listed is refused with
                `StoreError`. ``None``: ``f"{prefix}t:{tenant}:"`` for tenant ids matching
                `failover.stores.layers.routing.TENANT_ID`, which no key of an untenanted store with
                the same base prefix can start with.
            **store_kwargs: passed to each `RedisStore` (``prefix``, ``codec``, ``cipher``,
                ``socket_timeout``, ``clock``...).

        Raises:
            ConfigurationError: a bad URL or prefix, or two tenants sharing a prefix.
        """
        shared = shared_client(url_or_client, store_kwargs, "RedisStore.per_tenant")
        return tenant_stores.key_prefixes(cls, shared, checked_prefix, prefixes, **store_kwargs)
