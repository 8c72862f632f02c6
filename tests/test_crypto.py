"""Encryption at rest: the ENC(...) marker, key rotation, and rows that must not decrypt."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

import failover
from failover.errors import ConfigurationError, SerializationError
from failover.serialization.binding import entry_binding
from failover.serialization.crypto import Cipher, FernetCipher, seal, unseal
from failover.stores.backends.sql import SqlStore

from .conftest import FakeClock, Upstream

KEY_A = FernetCipher.generate_key()
KEY_B = FernetCipher.generate_key()
HERE = entry_binding("n", "k")


def test_seal_writes_the_marker_and_unseal_reads_it() -> None:
    cipher = FernetCipher(KEY_A)
    sealed = seal(cipher, 'json:{"secret":"value"}', HERE)
    assert sealed.startswith("ENC(fernet:")
    assert sealed.endswith(")")
    assert "secret" not in sealed
    assert unseal(cipher, sealed, HERE) == 'json:{"secret":"value"}'


def test_plain_text_passes_through_with_or_without_a_cipher() -> None:
    assert unseal(None, "json:1", HERE) == "json:1"
    assert unseal(FernetCipher(KEY_A), "json:1", HERE) == "json:1"


def test_a_sealed_row_is_bound_to_its_entry() -> None:
    cipher = FernetCipher(KEY_A)
    sealed = seal(cipher, "json:1", entry_binding("n", "k"))
    for name, key in [("n", "other"), ("other", "k"), ("n:k", ""), ("", "n:k")]:
        with pytest.raises(SerializationError, match="belongs to another entry"):
            unseal(cipher, sealed, entry_binding(name, key))


def test_a_row_sealed_before_binding_is_refused() -> None:
    cipher = FernetCipher(KEY_A)
    unbound = f"ENC(fernet:{cipher.encrypt('json:1')})"  # as earlier versions wrote
    with pytest.raises(SerializationError, match="no entry binding"):
        unseal(cipher, unbound, HERE)


@pytest.mark.parametrize(
    ("cipher", "row", "message"),
    [
        (None, "ENC(fernet:abc)", "no cipher"),
        ("a", "ENC(other:abc)", "encrypted with 'other'"),
        ("a", "ENC(fernet:abc", "truncated"),
        ("a", "ENC(abc)", "no scheme"),
        ("a", "ENC(fernet:not-a-token)", "does not decrypt"),
        ("b", "sealed with a", "does not decrypt"),
    ],
)
def test_rows_that_do_not_decrypt(cipher: str | None, row: str, message: str) -> None:
    if row == "sealed with a":
        row = seal(FernetCipher(KEY_A), "json:1", HERE)
    ciphers = {None: None, "a": FernetCipher(KEY_A), "b": FernetCipher(KEY_B)}
    with pytest.raises(SerializationError, match=message):
        unseal(ciphers[cipher], row, HERE)


def test_key_rotation_first_key_encrypts_every_key_decrypts() -> None:
    old = FernetCipher(KEY_A)
    rotated = FernetCipher([KEY_B, KEY_A])
    written_before = seal(old, "json:1", HERE)
    assert unseal(rotated, written_before, HERE) == "json:1"
    written_after = seal(rotated, "json:2", HERE)
    assert unseal(FernetCipher(KEY_B), written_after, HERE) == "json:2"
    with pytest.raises(SerializationError):
        unseal(old, written_after, HERE)


@pytest.mark.parametrize(
    "key", ["", "short", b"x" * 32, [], ["not a key", KEY_A], None, 42, bytearray(32)]
)
def test_bad_keys_are_a_configuration_error(key: Any) -> None:
    with pytest.raises(ConfigurationError, match="FernetCipher"):
        FernetCipher(key)


def test_missing_cryptography_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.fernet", None)  # makes the import fail
    with pytest.raises(ConfigurationError, match=r"pip install failover\[encryption\]"):
        FernetCipher(KEY_A)
    with pytest.raises(ConfigurationError, match=r"pip install failover\[encryption\]"):
        FernetCipher.generate_key()


def test_fernet_is_a_cipher_and_hides_its_keys() -> None:
    cipher = FernetCipher([KEY_A, KEY_B])
    assert isinstance(cipher, Cipher)
    assert KEY_A not in repr(cipher)


# -- through a store ------------------------------------------------------------------------------


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'failover.db'}"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def raw_payloads(store: SqlStore) -> list[str]:
    with store.engine.connect() as conn:
        return list(conn.execute(sa.select(store.table.c.payload)).scalars())


def decorated(
    store: SqlStore, clock: FakeClock, upstream: Upstream, registry: CollectorRegistry
) -> tuple[failover.Failover, Any]:
    engine = failover.Failover(store, clock=clock, metrics=registry, async_writes=False)

    @failover.failover("secrets", engine=engine)
    def fetch(code: str) -> dict[str, str]:
        return upstream({"code": code, "pii": "jane@example.com"})  # type: ignore[return-value]

    return engine, fetch


def test_an_encrypting_store_writes_no_plain_text(
    url: str, clock: FakeClock, upstream: Upstream, registry: CollectorRegistry
) -> None:
    store = SqlStore(url, cipher=FernetCipher(KEY_A))
    engine, fetch = decorated(store, clock, upstream, registry)
    with engine:
        fetch("FR")
        (raw,) = raw_payloads(store)
        assert raw.startswith("ENC(fernet:")
        assert "example.com" not in raw
        upstream.fail()
        envelope = fetch.referential("FR")
        assert envelope.up_to_date is False
        assert envelope.payload["pii"] == "jane@example.com"


def test_turning_encryption_on_with_accept_plain_keeps_plain_rows_readable(
    url: str, clock: FakeClock
) -> None:
    from .test_store_contract import entry

    plain = SqlStore(url)
    plain.store(entry(clock, "old", {"v": 1}))
    plain.close()
    encrypting = SqlStore(url, cipher=FernetCipher(KEY_A), accept_plain=True)
    encrypting.store(entry(clock, "new", {"v": 2}))
    assert sorted(p.payload["v"] for p in encrypting.find_all("n")) == [1, 2]
    assert sorted(r[:4] for r in raw_payloads(encrypting)) == ["ENC(", "json"]
    encrypting.close()
    refusing = SqlStore(url, cipher=FernetCipher(KEY_A))  # the default: plain rows refused
    assert [p.payload["v"] for p in refusing.find_all("n")] == [2]
    refusing.close()


@pytest.mark.parametrize("reader_cipher", [None, "wrong key"])
def test_an_encrypted_row_without_the_key_is_a_miss(
    url: str,
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
    reader_cipher: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = SqlStore(url, cipher=FernetCipher(KEY_A))
    engine, fetch = decorated(writer, clock, upstream, registry)
    with engine:
        key = fetch.referential("FR").key
    reader = SqlStore(url, cipher=None if reader_cipher is None else FernetCipher(KEY_B))
    with pytest.raises(SerializationError, match="cannot be decoded"):
        reader.find("secrets", key)
    assert reader.find_many("secrets", [key]) == {}
    assert "skipped" in caplog.text
    engine, fetch = decorated(reader, clock, upstream, registry)
    upstream.fail()
    with engine, pytest.raises(ConnectionError) as raised:
        fetch("FR")
    assert "the store failed while recovering" in str(raised.value.__notes__)
    errors = registry.get_sample_value(
        "failover_recoveries_total", {"name": "secrets", "outcome": "error"}
    )
    assert errors == 1
