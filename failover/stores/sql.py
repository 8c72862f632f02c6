"""`SqlStore`: entries in one SQL table, through SQLAlchemy Core.

The table ``{prefix}failover_store``: ``name``, ``key`` (the primary key), ``as_of`` and
``expire_on`` (microseconds since the Unix epoch, UTC: exact, indexable and the same on every
database), ``payload`` (the codec's text, with its marker, possibly encrypted) and
``payload_type`` (the stored value's type name), with an index on ``expire_on``.

Every operation is one statement, or one batch sent at once: upserts are
``INSERT ... ON CONFLICT (name, key) DO UPDATE`` on SQLite and PostgreSQL (an update-then-insert
transaction elsewhere), ``store_many`` is one executemany, ``find_many`` one select (on
PostgreSQL with the keys as one array parameter).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from ..errors import ConfigurationError, StoreError
from ..serialization.base import Codec
from ..serialization.crypto import Cipher
from ..serialization.rows import Serializer, micros
from .base import Capabilities, FailoverStore, Payload
from .sql_psycopg import PsycopgStatements, ping_when_idle, supported
from .tenant import SHOWN, TenantStores, safe_tenant_id

__all__ = ["SqlStore", "make_engine", "per_tenant_databases", "per_tenant_tables"]

log = logging.getLogger(__name__)

# A schema part, then the table prefix; lengths keep every identifier (the index name is the
# longest) within PostgreSQL's 63 characters, past which it would silently truncate them.
_PREFIX = re.compile(r"(?:([A-Za-z_][A-Za-z0-9_]{0,62})\.)?([A-Za-z0-9_]{0,32})")
_TABLE = "failover_store"
_BUSY_TIMEOUT_MS = 5_000
_CONNECT_TIMEOUT_S = 10
_SQLITE_POOL = {"pool_size": 8, "max_overflow": 8}
_SERVER_POOL = {"pool_size": 10, "max_overflow": 10, "pool_pre_ping": True}
_IN_CHUNK = 1_000  # keys per IN (...) list where the database's parameter limit is unknown
_MASK = re.compile(r"(://[^:/@]*:)[^@]*@")


def _masked(url: object) -> str:
    if isinstance(url, sa.URL):
        return url.render_as_string(hide_password=True)
    return _MASK.sub(r"\1***@", str(url))


def _first_line(exc: BaseException) -> str:
    # SQLAlchemy's messages go on with the SQL and a documentation link.
    return str(exc).split("\n", 1)[0]


# -- engines --------------------------------------------------------------------------------------


def _is_memory(url: sa.URL) -> bool:
    return url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    # Several processes share one file: readers never wait for the writer (WAL), and a writer
    # waits for another one instead of failing at once (busy timeout). synchronous=NORMAL is
    # safe with WAL (a crash loses at most the last commits, never the file).
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


_PID = "failover.pid"  # the process that opened a pooled connection, in its record's info
_inherited: list[Any] = []  # a forked child's connections of its parent: never used nor closed


def _opened_here(dbapi_connection: Any, record: Any) -> None:
    record.info[_PID] = os.getpid()


def _checked_out_here(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """A pool ``checkout`` listener: a connection the parent of a forked process opened is
    replaced, never used (its socket is the parent's: two processes talking on one session
    corrupt both) nor closed (that would end the parent's session, or drop its file locks).

    Raises:
        sqlalchemy.exc.DisconnectionError: a parent's connection: the pool opens a new one.
    """
    pid = record.info.get(_PID)
    if pid is None or pid == os.getpid():
        return
    _inherited.append(dbapi_connection)  # kept referenced: a driver's collection may close it
    record.dbapi_connection = proxy.dbapi_connection = None
    raise sa_exc.DisconnectionError(f"connection opened by process {pid} before a fork")


def make_engine(url: str | sa.URL, **engine_kwargs: Any) -> Engine:
    """A SQLAlchemy engine set up as `SqlStore` sets up its own.

    Use it to share one pool between several stores (one per ``table_prefix``). Connections are
    pooled (a pool sized for threads; pre-ping on database servers). SQLite files get WAL mode and
    a 5 s busy timeout on every connection, so several processes can share one file; an in-memory
    SQLite database is one connection that threads take in turn. Fork-safe: a process forked
    after connections were opened (a preforking server's workers) opens its own, and never uses
    nor closes its parent's.

    Args:
        url: a SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``).
        **engine_kwargs: passed to `sqlalchemy.create_engine`, over these defaults.

    Raises:
        ConfigurationError: not a URL, an unknown database, or its driver is not installed.
    """
    try:
        parsed = sa.make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        raise ConfigurationError(
            f"store URL {_masked(url)!r} is not a SQLAlchemy URL (e.g. 'sqlite:///failover.db')"
        ) from None
    kwargs: dict[str, Any]
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite and _is_memory(parsed):
        kwargs = {
            "poolclass": sa.QueuePool,
            "pool_size": 1,
            "max_overflow": 0,
            "connect_args": {"check_same_thread": False},
        }
    elif sqlite:
        folder = Path(parsed.database or "").parent
        if not parsed.query.get("uri") and not folder.is_dir():
            raise ConfigurationError(
                f"store URL {_masked(parsed)!r}: the folder {str(folder)!r} does not exist"
            )
        kwargs = {"poolclass": sa.QueuePool, **_SQLITE_POOL}
    else:
        kwargs = dict(_SERVER_POOL)
        if parsed.get_backend_name() == "postgresql":
            # An unreachable server fails in seconds, not after the system's TCP timeout.
            kwargs["connect_args"] = {"connect_timeout": _CONNECT_TIMEOUT_S}
    kwargs.update(engine_kwargs)
    fast = not sqlite and _is_psycopg(parsed)
    if fast and "pool_pre_ping" not in engine_kwargs:
        # A ping per checkout costs as much as a point read: idle connections only, below.
        kwargs["pool_pre_ping"] = False
    if fast and "pool_use_lifo" not in engine_kwargs:
        kwargs["pool_use_lifo"] = True  # busy connections stay busy, with their prepared plans
    shown = _masked(parsed)
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except sa_exc.NoSuchModuleError:
        raise ConfigurationError(
            f"store URL {shown!r}: unknown database or driver {parsed.drivername!r}"
        ) from None
    except ImportError as exc:
        hint = ""
        if parsed.get_backend_name() == "postgresql":
            hint = " (pip install failover[postgresql])"
            if parsed.get_driver_name() != "psycopg":  # psycopg2, the default of postgresql://
                hint = " (use postgresql+psycopg://, with pip install failover[postgresql])"
        raise ConfigurationError(
            f"store URL {shown!r}: the driver of {parsed.drivername!r} is not installed: "
            f"{exc}{hint}"
        ) from None
    except (sa_exc.ArgumentError, TypeError) as exc:
        raise ConfigurationError(f"store URL {shown!r}: {exc}") from None
    if not (sqlite and _is_memory(parsed)):  # one in-memory database: the child's own copy
        # First of the checkout listeners: nothing may run on a parent's connection.
        sa.event.listen(engine, "connect", _opened_here)
        sa.event.listen(engine, "checkout", _checked_out_here)
    if sqlite:
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    if fast:
        sa.event.listen(engine, "checkout", ping_when_idle)
    return engine


def _is_psycopg(url: sa.URL) -> bool:
    try:
        return url.get_backend_name() == "postgresql" and url.get_driver_name() == "psycopg"
    except (sa_exc.NoSuchModuleError, sa_exc.ArgumentError):
        return False  # create_engine says what is wrong with it


# -- the table ------------------------------------------------------------------------------------


def _split_prefix(table_prefix: object) -> tuple[str | None, str]:
    match = _PREFIX.fullmatch(table_prefix) if isinstance(table_prefix, str) else None
    if match is None:
        raise ConfigurationError(
            f"SqlStore: table_prefix must be letters, digits and underscores (at most 32), "
            f"optionally after 'schema.', got {table_prefix!r}"
        )
    return match.group(1), match.group(2)


def _table(schema: str | None, prefix: str) -> sa.Table:
    name = f"{prefix}{_TABLE}"
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        # NOT NULL since rows are bound to their times; a table made before (NULL allowed) is
        # read as it is, a NULL time being a corrupt row.
        sa.Column("as_of", sa.BigInteger, nullable=False),
        sa.Column("expire_on", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("payload_type", sa.String(255), nullable=False),
        sa.Index(f"{name}_expire_on", "expire_on"),
        schema=schema,
    )


_VALUES = ("as_of", "expire_on", "payload", "payload_type")


def _upsert(table: sa.Table, dialect: str) -> sa.Executable | None:
    """The single-statement upsert of ``dialect``, or ``None`` where there is none portable."""
    from sqlalchemy.dialects import postgresql, sqlite

    inserts: dict[str, Any] = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}
    if dialect not in inserts:
        return None
    stmt = inserts[dialect](table)
    upsert: sa.Executable = stmt.on_conflict_do_update(
        index_elements=[table.c.name, table.c.key],
        set_={c: stmt.excluded[c] for c in _VALUES},
    )
    return upsert


class SqlStore(Capabilities):
    """Entries in a SQL table: the durable store, shared by processes and instances.

    SQLite (a file) is the embedded default; PostgreSQL for many instances sharing one store;
    any database SQLAlchemy supports works. Values go through ``codec`` (JSON by default, see
    `failover.codec`), then through ``cipher`` when one is set.

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
            read, plain rows are read either way.
        allowed_types: more types the JSON codec may restore (see `JsonCodec`).
        create_table: create the table (and on PostgreSQL the schema) when missing.

    Raises:
        ConfigurationError: a bad table prefix (before any SQL runs), URL, codec or cipher.

    Attributes:
        does_io: ``True``: ``async def`` failovers reach it from a worker thread.
        isolating: ``True``: values are encoded as they are stored and decoded anew on every
            read, so the engine puts no copying layer in front (unless writes are queued).
    """

    does_io = True
    isolating = True

    def __init__(
        self,
        url_or_engine: str | sa.URL | Engine,
        table_prefix: str = "",
        codec: Codec | None = None,
        cipher: Cipher | None = None,
        allowed_types: Iterable[Any] = (),
        create_table: bool = True,
    ) -> None:
        schema, prefix = _split_prefix(table_prefix)
        self._rows = Serializer(codec, cipher, allowed_types, owner="SqlStore")
        self.codec, self.cipher = self._rows.codec, self._rows.cipher
        self._owns_engine = not isinstance(url_or_engine, Engine)
        self.engine: Engine = (
            url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)
        )
        self.table = table = _table(schema, prefix)
        self._create_table = create_table
        self._where = f"SqlStore({_masked(self.engine.url)}, table={table.fullname!r})"
        self._rows.where = self._where
        dialect = self.engine.dialect.name
        c = table.c
        self._upsert = _upsert(table, dialect)
        self._update = table.update().where(
            c.name == sa.bindparam("b_name"), c.key == sa.bindparam("b_key")
        )
        columns = (c.payload, c.payload_type, c.as_of, c.expire_on)
        by_name = c.name == sa.bindparam("n")
        self._find = sa.select(*columns).where(by_name, c.key == sa.bindparam("k"))
        self._find_all = sa.select(c.key, *columns).where(by_name).order_by(c.key)
        self._names = sa.select(c.name).distinct().order_by(c.name)
        self._delete = table.delete().where(by_name, c.key == sa.bindparam("k"))
        self._clean = table.delete().where(c.expire_on <= sa.bindparam("now"))
        # A NULL expiry (possible only in a table of an earlier version) is a corrupt row. Its
        # own statement: OR-ed into the range, SQLite scans the table instead of the index.
        self._clean_null = table.delete().where(c.expire_on.is_(None))
        self._single = self.engine  # for operations that are one statement
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import ARRAY

            # The keys travel as one array parameter. Each is looked up in the primary key
            # (LIMIT 1 keeps the planner from turning the lookups into a scan of every entry of
            # the name, which `key = ANY(:keys)` gets from a generic plan: 100x slower).
            keys = sa.bindparam("keys", type_=ARRAY(sa.String))
            wanted = sa.func.unnest(keys).table_valued("key").render_derived(name="wanted")
            found = (
                sa.select(c.key, *columns)
                .where(by_name, c.key == wanted.c.key)
                .limit(1)
                .lateral("found")
            )
            self._find_many = sa.select(found).select_from(wanted.join(found, sa.true()))
            self._chunk = 0  # one array parameter: no limit
            # One statement is atomic by itself: autocommit spares the round trips of BEGIN and
            # COMMIT (or ROLLBACK, after a read).
            self._single = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            keys = sa.bindparam("keys", expanding=True)
            self._find_many = sa.select(c.key, *columns).where(by_name, c.key.in_(keys))
            self._chunk = _IN_CHUNK
        # postgresql+psycopg: the statements past SQLAlchemy's execution layer (sql_psycopg).
        self._fast = PsycopgStatements(self.engine, table) if supported(self.engine) else None
        self._ready = False
        self._ready_lock = threading.Lock()
        try:
            self._prepare()
        except StoreError as exc:
            # A database down while the service starts must not keep it from starting.
            log.warning("%s; retried on first use", _first_line(exc))

    def __repr__(self) -> str:
        return self._where

    # -- schema ---------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Create the table (with ``create_table``) and learn SQLite's parameter limit: once,
        at construction or, when the database could not be reached then, on first use."""
        with self._ready_lock:
            if self._ready:
                return
            if self._create_table:
                self.create_table()
            if self.engine.dialect.name == "sqlite":
                self._chunk = self._sqlite_variable_limit() - 1  # one parameter is the name
            self._ready = True

    def create_table(self) -> None:
        """Create the table and its index when missing (and the schema, on PostgreSQL).

        Safe to run from several processes at once.

        Raises:
            StoreError: the database refused or could not be reached.
        """
        table = self.table
        dialect = self.engine.dialect.name
        try:
            with self.engine.begin() as conn:
                if dialect == "postgresql":
                    # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog.
                    lock = zlib.crc32(table.fullname.encode())
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock})
                    if table.schema:
                        conn.execute(sa.schema.CreateSchema(table.schema, if_not_exists=True))
                if dialect in ("postgresql", "sqlite"):
                    conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
                    for index in table.indexes:
                        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
                else:
                    table.metadata.create_all(conn, checkfirst=True)
        except sa_exc.SQLAlchemyError as exc:
            raise StoreError(f"{self._where}: cannot create the table: {_first_line(exc)}") from exc

    def _sqlite_variable_limit(self) -> int:
        import sqlite3

        try:
            with self.engine.connect() as conn:
                dbapi_connection: Any = conn.connection.dbapi_connection
                return int(dbapi_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
        except sa_exc.SQLAlchemyError as exc:
            raise StoreError(f"{self._where}: cannot connect: {_first_line(exc)}") from exc

    # -- rows -----------------------------------------------------------------------------------

    def _row(self, payload: Payload) -> dict[str, Any]:
        text, payload_type, as_of, expire_on = self._rows.stored(payload)
        return {
            "name": payload.name,
            "key": payload.key,
            "as_of": as_of,
            "expire_on": expire_on,
            "payload": text,
            "payload_type": payload_type,
        }

    def _payload(self, name: str, key: str, row: Any) -> Payload:
        # A row written by hand (NULL, out of range, or text in SQLite's untyped column) is as
        # corrupt as a bad payload: a miss from find, skipped by find_many and find_all.
        return self._rows.envelope(name, key, *row)

    def _decoded(self, name: str, rows: Iterable[Any]) -> Iterable[tuple[str, Payload]]:
        return self._rows.each(name, rows)

    # -- FailoverStore --------------------------------------------------------------------------

    def store(self, payload: Payload) -> None:
        """Insert or replace one entry, in one statement.

        Raises:
            SerializationError: the codec cannot encode the value (nothing is written).
        """
        self._write(self._row(payload))

    def store_many(self, payloads: Sequence[Payload]) -> None:
        """Insert or replace several entries, in one transaction and one batch.

        Raises:
            SerializationError: the codec cannot encode one of the values (nothing is written).
        """
        # The last write of a key wins, as one store() after another would; sorted, so that
        # concurrent batches lock rows in one order and cannot deadlock.
        rows = {(p.name, p.key): self._row(p) for p in payloads}
        if rows:
            self._write([rows[k] for k in sorted(rows)])

    def _write(self, rows: dict[str, Any] | list[dict[str, Any]]) -> None:
        if not self._ready:
            self._prepare()
        if self._fast is not None:
            self._fast.upsert(rows if isinstance(rows, list) else [rows])
            return
        if self._upsert is not None:
            # A batch is many statements on some drivers: one transaction.
            with (self.engine if isinstance(rows, list) else self._single).begin() as conn:
                conn.execute(self._upsert, rows)
            return
        batch = rows if isinstance(rows, list) else [rows]
        try:
            self._portable_upsert(batch)
        except sa_exc.IntegrityError:
            self._portable_upsert(batch)  # another writer inserted one of the keys meanwhile

    def _portable_upsert(self, rows: list[dict[str, Any]]) -> None:
        """Update each row, then insert those that were not there, in one transaction."""
        with self.engine.begin() as conn:
            missing = []
            for row in rows:
                values = {c: row[c] for c in _VALUES}
                result = conn.execute(
                    self._update, {"b_name": row["name"], "b_key": row["key"], **values}
                )
                if result.rowcount == 0:
                    missing.append(row)
            if missing:
                conn.execute(self.table.insert(), missing)

    def find(self, name: str, key: str) -> Payload | None:
        """The entry, expired or not, or ``None``.

        Raises:
            SerializationError: the row cannot be decoded.
        """
        if not self._ready:
            self._prepare()
        if self._fast is not None:
            row = self._fast.find(name, key)
        else:
            with self._single.connect() as conn:
                row = conn.execute(self._find, {"n": name, "k": key}).first()
        return None if row is None else self._payload(name, key, row)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``, in one statement (chunked only past the
        database's parameter limit); undecodable rows are skipped with a warning."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        if not self._ready:
            self._prepare()
        if self._fast is not None:
            return dict(self._decoded(name, self._fast.find_many(name, wanted)))
        size = self._chunk or len(wanted)
        with self._single.connect() as conn:
            rows = [
                row
                for i in range(0, len(wanted), size)
                for row in conn.execute(self._find_many, {"n": name, "keys": wanted[i : i + size]})
            ]
        return dict(self._decoded(name, rows))

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``, expired ones included, by key; undecodable rows are skipped
        with a warning."""
        if not self._ready:
            self._prepare()
        rows: Sequence[Any]
        if self._fast is not None:
            rows = self._fast.find_all(name)
        else:
            with self._single.connect() as conn:
                rows = conn.execute(self._find_all, {"n": name}).all()
        return [payload for _, payload in self._decoded(name, rows)]

    @classmethod
    def per_tenant(
        cls,
        url_or_engine: str | sa.URL | sa.Engine,
        prefixes: Mapping[str, str] | None = None,
        **store_kwargs: Any,
    ) -> Callable[[str], FailoverStore]:
        """A factory ``tenant -> SqlStore``: one table per tenant, one shared engine.

        See `per_tenant_tables`, which this is.
        """
        return per_tenant_tables(url_or_engine, prefixes, **store_kwargs)

    def names(self) -> list[str]:
        """Every name that has entries, sorted."""
        if not self._ready:
            self._prepare()
        with self._single.connect() as conn:
            return list(conn.execute(self._names).scalars())

    def delete(self, name: str, key: str) -> None:
        """Remove the entry if present."""
        if not self._ready:
            self._prepare()
        if self._fast is not None:
            self._fast.delete(name, key)
            return
        with self._single.begin() as conn:
            conn.execute(self._delete, {"n": name, "k": key})

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove every entry whose ``expire_on`` is at or before ``now``, or NULL (two indexed
        deletes, one transaction); return the count."""
        if not self._ready:
            self._prepare()
        with self.engine.begin() as conn:
            removed = conn.execute(self._clean, {"now": micros(now)}).rowcount
            return int(removed + conn.execute(self._clean_null).rowcount)

    def close(self) -> None:
        """Dispose the engine's connections, when the store made the engine."""
        if self._owns_engine:
            if self._fast is not None:
                self._fast.close()
            self.engine.dispose()


# -- one store per tenant -------------------------------------------------------------------------


def per_tenant_tables(
    url_or_engine: str | sa.URL | Engine,
    prefixes: Mapping[str, str] | None = None,
    **store_kwargs: Any,
) -> TenantStores:
    """One table per tenant, in one database, through one shared SQLAlchemy engine.

    Args:
        url_or_engine: a SQLAlchemy URL, or an `sqlalchemy.Engine` (never disposed here).
        prefixes: the table prefix of each tenant, e.g. ``{"acme": "acme_"}``; a tenant not listed
            is refused with `StoreError`. ``None``: the prefix is ``f"{tenant}_"``, for tenant ids
            matching `failover.stores.tenant.TENANT_ID`.
        **store_kwargs: passed to each `SqlStore` (``codec``, ``cipher``, ``allowed_types``...).

    Returns:
        A factory ``tenant -> SqlStore`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: a prefix `SqlStore` refuses (checked here, for every tenant, before
            any SQL runs), two tenants whose tables would be one table, or a bad URL.
    """
    if prefixes is not None:
        prefixes = dict(prefixes)
        seen: dict[str, str] = {}
        for tenant, prefix in prefixes.items():
            try:
                _split_prefix(prefix)
            except ConfigurationError as exc:
                raise ConfigurationError(f"per_tenant_tables: tenant {tenant!r}: {exc}") from None
            # SQLite table names ignore case: two prefixes differing only by case are one table.
            other = seen.setdefault(prefix.lower(), tenant)
            if other != tenant:
                raise ConfigurationError(
                    f"per_tenant_tables: tenants {other!r} and {tenant!r} would share a table "
                    f"(prefixes {prefixes[other]!r} and {prefix!r})"
                )
    owned = not isinstance(url_or_engine, Engine)
    engine = url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)

    def prefix_of(tenant: str) -> str:
        if prefixes is None:
            return f"{safe_tenant_id(tenant)}_"
        try:
            return prefixes[tenant]
        except KeyError:
            raise StoreError(
                f"per_tenant_tables: no table prefix for tenant {str(tenant)[:SHOWN]!r}"
            ) from None

    return TenantStores(
        lambda tenant: SqlStore(engine, table_prefix=prefix_of(tenant), **store_kwargs),
        True,
        f"per_tenant_tables({engine.url.render_as_string(hide_password=True)!r})",
        engine.dispose if owned else None,
    )


def per_tenant_databases(url_template: str, **store_kwargs: Any) -> TenantStores:
    """One database per tenant: ``url_template`` with ``{tenant}`` replaced by the tenant id.

    For example ``"sqlite:////var/lib/app/failover-{tenant}.db"`` (one SQLite file per tenant)
    or ``"postgresql+psycopg://app@db/failover_{tenant}"``. Tenant ids must match
    `failover.stores.tenant.TENANT_ID`.

    Args:
        url_template: a SQLAlchemy URL containing ``{tenant}``.
        **store_kwargs: passed to each `SqlStore`.

    Returns:
        A factory ``tenant -> SqlStore`` for `MultiTenantStore`.

    Raises:
        ConfigurationError: the template has no ``{tenant}``, or is not a URL `SqlStore` takes
            (checked here, before the first tenant comes).
    """
    if not isinstance(url_template, str) or "{tenant}" not in url_template:
        shown = _masked(url_template) if isinstance(url_template, str) else url_template
        raise ConfigurationError(
            f"per_tenant_databases: the URL template must contain '{{tenant}}', got {shown!r}"
        )
    make_engine(url_template.replace("{tenant}", "tenant")).dispose()  # connects to nothing
    return TenantStores(
        lambda tenant: SqlStore(
            url_template.replace("{tenant}", safe_tenant_id(tenant)), **store_kwargs
        ),
        True,
        f"per_tenant_databases({_masked(url_template)!r})",
    )
