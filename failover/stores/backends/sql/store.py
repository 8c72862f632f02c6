"""`SqlStore`: entries in one SQL table, through SQLAlchemy.

The table is `table`'s; the engine `make_engine`'s. Every operation is one
statement, or one batch sent at once, run by the driver path's `Statements` (SQLAlchemy Core on
every database, psycopg directly on ``postgresql+psycopg``): ``store_many`` is one batch,
``find_many`` one select.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ....errors import StoreError
from ....masking import masked_url
from ....serialization.base import Codec
from ....serialization.crypto import Cipher
from ....serialization.row_options import (
    DEFAULT_MAX_ROW_BYTES,
    merged_row_options,
)
from ....serialization.rows import SerializedStore, Serializer
from ....serialization.times import micros
from ...base import Capabilities, Payload, older
from ...browsing import Page, Summary
from ...health_rows import KeepsHealthRows
from ...layers import tenant_stores
from ...layers.bounded import until
from ...layers.tenant_stores import TenantStores
from .async_methods import AsyncSqlMethods
from .browsing import SqlBrowsing
from .caller_reads import CallerReads
from .control import SqlControl, make_tags_table
from .engine import first_line, is_memory, make_engine, prepares, shared_engine
from .health_rows import SqlHealthRows
from .psycopg import PsycopgStatements, supported
from .statements import CoreStatements, Statements
from .table import create_table as create_missing_table
from .table import label_column, label_of, make_table, split_prefix
from .urls import check_settings, row_options, url_settings

__all__ = ["SqlStore"]

log = logging.getLogger(__name__)


class SqlStore(SerializedStore, KeepsHealthRows, AsyncSqlMethods, Capabilities):
    """Entries in a SQL table: the durable store, shared by processes and instances.

    SQLite (a file) is the embedded default; PostgreSQL for many instances sharing one store;
    any database SQLAlchemy supports works. Values go through ``codec`` (JSON by default, see
    `failover.serialization`), then through ``cipher`` when one is set.

    Reading a row that cannot be decoded (a type off the allowlist, corrupt text, an unknown
    codec, a signature or a decryption that fails) raises `SerializationError` from `find`,
    which the engine counts as a recover ``error`` and treats as a miss; `find_many` and
    `find_all` skip such rows with a warning.

    Args:
        url_or_engine: a SQLAlchemy URL, or an `sqlalchemy.Engine` to share (the store then
            never disposes it).
        table_prefix: prepended to the table name: ``[A-Za-z0-9_]*`` (at most 32), optionally
            after a schema and a dot (``"tenants.acme_"``).
        codec: turns values into text and back; default `JsonCodec`. Rows written as JSON stay
            readable with any codec.
        cipher: encrypts the payloads written (e.g. `FernetCipher`); encrypted rows need it to be
            read.
        allowed_types: more types the JSON codec may restore (see `JsonCodec`).
        create_table: create the table (and on PostgreSQL the schema) when missing.
        accept_plain: with a ``cipher`` or a signing ``codec``, read rows that are neither
            encrypted nor signed too (refused by default: anyone able to write the table can
            forge them). For a migration only. The URL's ``?accept_plain=true`` says the same.
        max_row_bytes: a payload longer than this is a miss, refused before it is decoded or
            decrypted, and a value that encodes longer is not written (default 8 MiB; the URL's
            ``?max_row_bytes=`` says the same).
        tenant: the tenant this store serves; a tenant router sets it on the stores it makes.
            Encrypted and signed rows are bound to it, to the table and to their entry.

    Raises:
        ConfigurationError: a bad table prefix (before any SQL runs), URL, codec, cipher or
            ``max_row_bytes``.

    Attributes:
        does_io: ``True``: ``async def`` failovers reach it from a worker thread.
        isolating: ``True``: values are encoded as they are stored and decoded anew on every
            read, so the engine puts no copying layer in front (unless writes are queued).
    """

    does_io = True
    isolating = True
    browsable = True
    keeps_tags = True
    clean_batch = 10_000
    """Expired rows deleted per transaction by `clean_by_expiry` (SQLite, PostgreSQL)."""

    def __init__(
        self,
        url_or_engine: str | sa.URL | Engine,
        table_prefix: str = "",
        codec: Codec | None = None,
        cipher: Cipher | None = None,
        allowed_types: Iterable[Any] = (),
        create_table: bool = True,
        *,
        accept_plain: bool = False,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        tenant: str | None = None,
    ) -> None:
        schema, prefix = split_prefix(table_prefix)
        settings: dict[str, Any] = {"accept_plain": accept_plain, "max_row_bytes": max_row_bytes}
        if isinstance(url_or_engine, str | sa.URL):
            url_or_engine, from_url = row_options(url_or_engine)
            settings = merged_row_options("SqlStore", settings, from_url)
        table = make_table(schema, prefix)
        self._rows = Serializer(
            codec,
            cipher,
            allowed_types,
            owner="SqlStore",
            place=f"sql:{table.fullname}",
            **settings,
        )
        if tenant is not None:
            self._rows.bind_tenant(tenant)
        self.serializer = self._rows  # how its rows are encoded, bound, sealed and checked
        self.codec, self.cipher = self._rows.codec, self._rows.cipher
        self._owns_engine = not isinstance(url_or_engine, Engine)
        self.engine: Engine = (
            url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)
        )
        self._schema, self._prefix = schema, prefix
        self._bind(table)
        self._create_table = create_table
        self._where = f"SqlStore({masked_url(self.engine.url)}, table={self.table.fullname!r})"
        self._control = SqlControl(
            self.engine, self.table, make_tags_table(schema, prefix), self._where
        )
        self._rows.where = self._where
        # The processes' health rows (Failover(publish_health=...)), in a table beside.
        self.health = SqlHealthRows(self.engine, schema, prefix, self._where, create_table)
        self._aio: Any = None  # psycopg's async connections, for async callers
        if supported(self.engine):
            from .aio import AsyncConnections  # psycopg is there: the statements use it

            self._aio = AsyncConnections(self.engine.url, prepare=prepares(self.engine))
        self._ready = False
        self._ready_lock = threading.Lock()
        self._here: CallerReads | None = None  # reads on callers' threads (`reads_here`)
        try:
            self._prepare()
        except StoreError as exc:
            # A database down while the service starts must not keep it from starting.
            log.warning("%s; retried on first use", first_line(exc))

    def __repr__(self) -> str:
        return self._where

    # -- schema ---------------------------------------------------------------------------------

    def _bind(self, table: sa.Table) -> None:
        """Make the statements of ``table`` (with or without the ``label`` column)."""
        self.table = table
        self._labels = bool(label_of(table))
        self._core = CoreStatements(self.engine, table)
        self.browsing = SqlBrowsing(self._core.single, table)
        # postgresql+psycopg: the statements past SQLAlchemy's execution layer (sql.psycopg).
        self._statements: Statements = (
            PsycopgStatements(self.engine, table) if supported(self.engine) else self._core
        )

    def _prepare(self) -> None:
        """Create the table (with ``create_table``; a table of an earlier version gets the
        ``label`` column, or is used without it) and learn SQLite's parameter limit: once, at
        construction or, when the database could not be reached then, on first use."""
        with self._ready_lock:
            if self._ready:
                return
            if self._create_table:
                self.create_table()
            if not label_column(self.engine, self.table, self._where, self._create_table):
                self._bind(make_table(self._schema, self._prefix, label=False))
                self._control.table = self.table
            self._core.learn_limits(self._where)
            if self._here is not None:
                self._here.bind(self._core)
            self._ready = True

    def create_table(self) -> None:
        """Create the table and its index when missing (and the schema, on PostgreSQL).

        Safe to run from several processes at once.

        Raises:
            StoreError: the database refused or could not be reached.
        """
        create_missing_table(self.engine, self.table, self._where)
        self._control.create()

    # -- rows -----------------------------------------------------------------------------------

    def _row(self, payload: Payload) -> dict[str, Any]:
        text, payload_type, as_of, expire_on = self._rows.stored(payload)
        row = {
            "name": payload.name,
            "key": payload.key,
            "as_of": as_of,
            "expire_on": expire_on,
            "payload": text,
            "payload_type": payload_type,
        }
        if self._labels:
            row["label"] = payload.label
        return row

    def _payload(self, name: str, key: str, row: Any) -> Payload:
        # A row written by hand (NULL, out of range, or text in SQLite's untyped column) is as
        # corrupt as a bad payload: a miss from find, skipped by find_many and find_all.
        return self._rows.envelope(name, key, *row)

    def _decoded(self, name: str, rows: Iterable[Any]) -> Iterable[tuple[str, Payload]]:
        return self._rows.each(name, rows)

    # -- FailoverStore --------------------------------------------------------------------------

    def store(self, payload: Payload) -> int:
        """Insert one entry, or replace the stored one unless it is newer, in one statement;
        1 when a newer one kept it out.

        Raises:
            SerializationError: the codec cannot encode the value (nothing is written).
        """
        if payload.tags:
            self._tag((payload,))
        return self._write([self._row(payload)])

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Insert or replace several entries (each unless the stored one is newer), in one
        transaction and one batch; how many a newer entry kept out.

        Raises:
            SerializationError: the codec cannot encode one of the values (nothing is written).
        """
        # Of two writes of a key, the newer wins (the later one on a tie), as one store() after
        # another would; sorted, so that concurrent batches lock rows in one order and cannot
        # deadlock.
        newest: dict[tuple[str, str], Payload] = {}
        for p in payloads:
            if not older(p, newest.get((p.name, p.key))):
                newest[p.name, p.key] = p
        if not newest:
            return 0
        rows = [self._row(newest[k]) for k in sorted(newest)]
        tagged = [p for p in newest.values() if p.tags]
        if tagged:
            self._tag(tagged)
        return len(payloads) - len(newest) + self._write(rows)

    def _tag(self, payloads: Iterable[Payload]) -> None:
        """Keep the tags of ``payloads`` before the entries: never an entry stored untagged."""
        if not self._ready:
            self._prepare()
        self._control.tag((t, p.name, p.key) for p in payloads for t in p.tags or ())

    def _write(self, rows: list[dict[str, Any]]) -> int:
        if not self._ready:
            self._prepare()
        return self._statements.upsert(rows)

    @property
    def caller_reads(self) -> CallerReads | None:
        """The reads made on callers' threads (`reads_here`), or ``None``."""
        return self._here

    def reads_here(self, timeout: float) -> bool:
        """Read on callers' threads within ``timeout`` seconds (`CallerReads`) when the store
        is a SQLite file whose engine it made from a URL without options: a read then waits on
        nothing it cannot bound. Not for a subclass with reads of its own (they may wait on
        anything)."""
        url = self.engine.url
        kind = type(self)
        if (
            kind.find is not SqlStore.find
            or kind.find_many is not SqlStore.find_many
            or not self._owns_engine
            or url.get_backend_name() != "sqlite"
            or is_memory(url)
            or url.query  # a URI's options (read-only, a VFS): SQLAlchemy's connections only
            or not url.database
        ):
            return False
        with self._ready_lock:
            if self._here is None:  # one store under two deadlines: the first one's bounds
                self._here = CallerReads(url.database, timeout)
                if self._ready:
                    self._here.bind(self._core)
        return True

    def find(self, name: str, key: str) -> Payload | None:
        """The entry, expired or not, or ``None``.

        Raises:
            SerializationError: the row cannot be decoded.
        """
        if self._here is not None and until() is not None:
            row = self._here.find(name, key)
        else:
            if not self._ready:
                self._prepare()
            row = self._statements.find(name, key)
        return None if row is None else self._payload(name, key, row)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``, in one statement (chunked only past the
        database's parameter limit); undecodable rows are skipped with a warning."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows: Sequence[Any]
        if self._here is not None and until() is not None:
            rows = self._here.find_many(name, wanted)
        else:
            if not self._ready:
                self._prepare()
            rows = self._statements.find_many(name, wanted)
        return dict(self._decoded(name, rows))

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``, expired ones included, by key; undecodable rows are skipped
        with a warning."""
        if not self._ready:
            self._prepare()
        rows = self._statements.find_all(name)
        return [payload for _, payload in self._decoded(name, rows)]

    @classmethod
    def per_tenant(
        cls,
        url_or_engine: str | sa.URL | sa.Engine,
        prefixes: Mapping[str, str] | None = None,
        **store_kwargs: Any,
    ) -> TenantStores:
        """A factory ``tenant -> SqlStore``: one table per tenant, one shared engine.

        See `failover.stores.backends.sql.tenants.per_tenant_tables`, which calls this.
        """
        if isinstance(url_or_engine, str | sa.URL):
            url_or_engine, store_kwargs = url_settings(
                "per_tenant_tables", url_or_engine, store_kwargs
            )
        check_settings("per_tenant_tables", store_kwargs)
        return tenant_stores.tables(
            cls, shared_engine, split_prefix, url_or_engine, prefixes, **store_kwargs
        )

    def names(self) -> list[str]:
        """Every name that has entries, sorted."""
        if not self._ready:
            self._prepare()
        return self.browsing.names()

    def page(self, name: str, after: str | None = None, limit: int = 50) -> Page:
        """Up to ``limit`` entries of ``name`` after the key ``after``, by key, as stored (not
        decoded): one select on the primary key, as fast for the last page as the first."""
        if not self._ready:
            self._prepare()
        return self.browsing.page(name, after, limit)

    def count(self, name: str) -> int:
        """How many entries ``name`` has: one count over a range of the primary key."""
        if not self._ready:
            self._prepare()
        return self.browsing.count(name)

    def summary(self, name: str, now: datetime) -> Summary:
        """``name``'s entries counted (those expired at ``now`` among them), their ``as_of``
        range and the payloads' total length: one aggregate."""
        if not self._ready:
            self._prepare()
        return self.browsing.summary(name, now)

    def delete(self, name: str, key: str) -> None:
        """Remove the entry if present."""
        if not self._ready:
            self._prepare()
        self._statements.delete(name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries of ``name`` under ``keys`` that are present, in one statement."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return
        if not self._ready:
            self._prepare()
        self._statements.delete_many(name, wanted)

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``: one statement; the count."""
        if not self._ready:
            self._prepare()
        return self._control.delete_all(name)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name: one statement; the count."""
        if not self._ready:
            self._prepare()
        return self._control.delete_tagged(tag)

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window in place: one statement; whether there was one."""
        if not self._ready:
            self._prepare()
        return self._control.expire(name, key)

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove every entry whose ``expire_on`` is at or before ``now``, or NULL; return the
        count.

        On SQLite and PostgreSQL the expired rows go in batches of `clean_batch`, each its own
        short transaction: a million expired rows never make one transaction, and writers get
        the table between batches. Elsewhere, one indexed delete.
        """
        if not self._ready:
            self._prepare()
        removed = self._core.clean(micros(now), self.clean_batch)
        self._control.clean()  # tag rows whose entry is gone: not entries, not counted
        return removed

    def close(self) -> None:
        """Dispose the engine's connections, when the store made the engine."""
        if self._aio is not None:
            self._aio.close()
        if self._owns_engine:
            self._statements.close()
            self.engine.dispose()
        if self._here is not None:
            self._here.close()
