"""The contract every store and store layer keeps: one suite, run over every factory in
``tests/stores.py`` (and over the SQL and chained stores that register there)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from failover import ReferentialPayload
from failover.stores import AsyncWriteStore, FailoverStore
from failover.stores.base import (
    browsable,
    delete_all,
    delete_tagged,
    expire,
    flush,
    keeps_tags,
    walk,
)
from failover.stores.browsing import Browsable, Page, Summary

from .conftest import FakeClock
from .stores import EXPIRED_BY_THE_SERVER, FACTORIES


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Any]:
    s = FACTORIES[request.param](clock, tmp_path)
    yield s
    s.close()


def entry(
    clock: FakeClock, key: str, value: object = None, name: str = "n", ttl: float = 60
) -> ReferentialPayload[Any]:
    now = clock()
    payload = {"key": key, "nested": [1, 2, {"x": "y"}]} if value is None else value
    return ReferentialPayload(name, key, payload, now, now + timedelta(seconds=ttl), True)


def test_store_then_find_returns_equal_entry(store: FailoverStore, clock: FakeClock) -> None:
    e = entry(clock, "k1")
    store.store(e)
    found = store.find("n", "k1")
    assert found is not None
    assert (found.name, found.key, found.payload) == ("n", "k1", e.payload)
    assert found.as_of == e.as_of
    assert found.expire_on == e.expire_on


def test_find_missing_is_none(store: FailoverStore) -> None:
    assert store.find("n", "absent") is None
    assert store.find_many("n", ["absent"]) == {}
    assert store.find_all("n") == []


def test_store_replaces_same_key(store: FailoverStore, clock: FakeClock) -> None:
    store.store(entry(clock, "k", {"v": 1}))
    clock.advance(5)
    store.store(entry(clock, "k", {"v": 2}))
    found = store.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 2}
    assert found.as_of == clock()
    assert len(store.find_all("n")) == 1


def test_names_are_separate_namespaces(store: FailoverStore, clock: FakeClock) -> None:
    store.store(entry(clock, "k", {"v": "a"}, name="a"))
    store.store(entry(clock, "k", {"v": "b"}, name="b"))
    found_a, found_b = store.find("a", "k"), store.find("b", "k")
    assert found_a is not None
    assert found_b is not None
    assert (found_a.payload, found_b.payload) == ({"v": "a"}, {"v": "b"})
    assert [p.key for p in store.find_all("a")] == ["k"]


def test_batches(store: FailoverStore, clock: FakeClock) -> None:
    store.store_many([entry(clock, f"k{i}", {"i": i}) for i in range(50)])
    found = store.find_many("n", [f"k{i}" for i in range(0, 60, 2)])
    assert sorted(found) == sorted(f"k{i}" for i in range(0, 50, 2))
    assert all(found[f"k{i}"].payload == {"i": i} for i in range(0, 50, 2))
    assert len(store.find_all("n")) == 50


def test_json_like_values_round_trip(store: FailoverStore, clock: FakeClock) -> None:
    values: list[object] = ["text", 42, 1.5, True, [1, "a"], {"a": {"b": [None]}}, ""]
    for i, value in enumerate(values):
        store.store(entry(clock, f"v{i}", value))
    for i, value in enumerate(values):
        found = store.find("n", f"v{i}")
        assert found is not None
        assert found.payload == value
        assert type(found.payload) is type(value)


def test_delete(store: FailoverStore, clock: FakeClock) -> None:
    store.store(entry(clock, "k"))
    store.delete("n", "k")
    store.delete("n", "never-there")
    assert store.find("n", "k") is None


def test_clean_by_expiry_removes_only_expired(
    store: FailoverStore, clock: FakeClock, request: pytest.FixtureRequest
) -> None:
    store.store_many([entry(clock, "short1", ttl=10), entry(clock, "short2", ttl=10)])
    store.store(entry(clock, "long", ttl=100))
    if request.node.callspec.params["store"] in EXPIRED_BY_THE_SERVER:
        assert store.clean_by_expiry(clock.advance(50)) == 0
        assert "long" in [p.key for p in store.find_all("n")]
        return
    assert store.clean_by_expiry(clock.advance(50)) == 2
    assert [p.key for p in store.find_all("n")] == ["long"]
    assert store.clean_by_expiry(clock()) == 0


def test_concurrent_writers_and_readers(store: FailoverStore, clock: FakeClock) -> None:
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(50):
                store.store(entry(clock, f"t{t}-{i}", {"t": t, "i": i}))
                assert store.find("n", f"t{t}-{i}") is not None
        except BaseException as exc:  # collected and re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(store.find_all("n")) == 400


# -- the browsing protocol (failover.stores.browsing) ---------------------------------------------


def test_every_store_and_layer_browses(store: FailoverStore) -> None:
    assert browsable(store)
    assert isinstance(store, Browsable)


def test_pages_follow_the_keys(store: Any, clock: FakeClock) -> None:
    store.store_many([entry(clock, f"k{i:02d}", {"i": i}) for i in range(25)])
    store.store_many([entry(clock, f"o{i}", name="other") for i in range(3)])
    keys: list[str] = []
    after = None
    sizes = []
    while True:
        page = store.page("n", after, 10)
        sizes.append(len(page.entries))
        keys += [e.key for e in page.entries]
        assert all(e.name == "n" and e.payload_type == "builtins.dict" for e in page.entries)
        assert all(e.as_of == clock() and e.size > 0 for e in page.entries)
        if page.next_after is None:
            break
        assert page.next_after == page.entries[-1].key
        after = page.next_after
    assert keys == [f"k{i:02d}" for i in range(25)]
    assert sizes == [10, 10, 5]
    assert {"n", "other"} <= set(store.names())
    assert store.count("n") == 25
    assert store.page("n", "k24", 10).entries == []
    assert store.page("absent", None, 10) == Page([], None)


def test_labels_are_kept_and_listed(store: Any, clock: FakeClock) -> None:
    # A label as failover.labels makes one (printable, bounded), another with the characters a
    # store's own layout may use (Redis's header: a tab, a line break), and none.
    fr = dataclasses.replace(entry(clock, "fr"), label="country(code='FR', name='Fr\u00e4nk')")
    odd = dataclasses.replace(entry(clock, "odd"), label="a\tb\nc")
    store.store_many([fr, odd])
    store.store(entry(clock, "plain"))
    one = store.find("n", "fr")
    assert one is not None
    assert one.label == fr.label
    for read in (
        {key: p.label for key, p in store.find_many("n", ["fr", "odd", "plain"]).items()},
        {p.key: p.label for p in store.find_all("n")},
        {e.key: e.label for e in store.page("n", None, 10).entries},
    ):
        assert read.pop("odd") in ("a\tb\nc", "a b c")  # as given, or on one line
        assert read == {"fr": fr.label, "plain": None}


def test_pages_see_writes_and_deletes_at_once(store: Any, clock: FakeClock) -> None:
    store.store_many([entry(clock, f"k{i}") for i in range(5)])
    store.delete("n", "k1")
    store.store(entry(clock, "k9"))
    store.store(entry(clock, "k0", {"replaced": True}))
    page = store.page("n", None, 3)
    assert [e.key for e in page.entries] == ["k0", "k2", "k3"]
    assert page.next_after == "k3"
    assert [e.key for e in store.page("n", "k3", 3).entries] == ["k4", "k9"]
    assert store.count("n") == 5


def test_summary_counts_and_measures(store: Any, clock: FakeClock) -> None:
    first = clock()
    store.store(entry(clock, "short", ttl=10))
    clock.advance(5)
    store.store(entry(clock, "long", ttl=1000))
    clock.advance(60)
    summary = store.summary("n", clock())
    assert summary.name == "n"
    # Stores that drop expired entries themselves (cachetools) count the live one only.
    assert summary.count - summary.expired == 1
    assert summary.newest == first + timedelta(seconds=5)
    assert summary.oldest in (first, first + timedelta(seconds=5))
    assert summary.size > 0
    assert store.summary("absent", clock()) == Summary("absent", 0, 0, None, None, 0)


def test_delete_many(store: Any, clock: FakeClock) -> None:
    store.store_many([entry(clock, f"k{i}") for i in range(6)])
    store.delete_many("n", ["k0", "k2", "k4", "absent", "k0"])
    store.delete_many("n", [])
    assert sorted(p.key for p in store.find_all("n")) == ["k1", "k3", "k5"]
    assert store.find("n", "k2") is None


def test_entries_only_move_forward(store: Any, clock: FakeClock) -> None:
    """A write replaces the stored entry of its key only if its ``as_of`` is not older (a tie
    replaces); ``store``/``store_many`` say how many a newer entry kept out (a queue: 0, it
    counts them itself)."""
    newer = entry(clock, "k", {"v": "newer"})
    clock.advance(-5)
    older = entry(clock, "k", {"v": "older"})
    clock.advance(5)
    assert not store.store(newer)
    # Written through a queue (a tenant's store is made by the first write): the queue counts.
    kept = 0 if any(isinstance(s, AsyncWriteStore) for s in walk(store)) else 1
    assert (store.store(older) or 0) == kept
    assert (store.store_many([older, entry(clock, "j", {"v": "j"})]) or 0) == kept
    assert flush(store, 10)
    found = store.find("n", "k")
    assert found is not None
    assert (found.payload, found.as_of) == ({"v": "newer"}, clock())
    assert store.find_many("n", ["k", "j"])["k"].payload == {"v": "newer"}
    assert not store.store(entry(clock, "k", {"v": "same age"}))  # a tie: the later write
    assert flush(store, 10)
    assert store.find("n", "k").payload == {"v": "same age"}


# -- control over entries (.invalidate_all(), tags, .expire()) -------------------------------------


def tagged(
    clock: FakeClock, key: str, tags: tuple[str, ...] | None, name: str = "n", value: object = None
) -> ReferentialPayload[Any]:
    return dataclasses.replace(entry(clock, key, value, name=name), tags=tags)


def test_every_store_and_layer_keeps_tags(store: FailoverStore) -> None:
    assert keeps_tags(store)


def test_delete_all_removes_every_entry_of_a_name_only(store: Any, clock: FakeClock) -> None:
    store.store_many([entry(clock, f"k{i}") for i in range(5)])
    store.store(entry(clock, "k0", name="other"))
    assert flush(store, 10)
    assert delete_all(store, "n") == 5
    assert flush(store, 10)
    assert store.find_all("n") == []
    assert store.find("n", "k3") is None
    assert store.find("other", "k0") is not None
    assert delete_all(store, "n") == 0
    store.store(entry(clock, "k1"))  # a name emptied takes writes again
    assert flush(store, 10)
    assert [p.key for p in store.find_all("n")] == ["k1"]


def test_delete_all_overtakes_queued_writes(store: Any, clock: FakeClock) -> None:
    """A write still queued when its name is cleared never lands after the clear."""
    store.store_many([entry(clock, f"k{i}") for i in range(20)])
    delete_all(store, "n")
    assert store.find("n", "k1") is None  # at once, queued writes included
    assert flush(store, 10)
    assert store.find_all("n") == []
    assert store.find_many("n", [f"k{i}" for i in range(20)]) == {}


def test_delete_tagged_removes_the_tagged_entries_of_every_name(
    store: Any, clock: FakeClock
) -> None:
    store.store_many(
        [
            tagged(clock, "a", ("customer:42", "eu")),
            tagged(clock, "b", ("customer:7",)),
            tagged(clock, "c", ()),
            tagged(clock, "d", None),
        ]
    )
    store.store(tagged(clock, "a", ("customer:42",), name="other"))
    store.store(tagged(clock, "e", ("eu",)))
    assert flush(store, 10)
    found = store.find("n", "a")
    assert found is not None
    assert found.tags is None or "customer:42" in found.tags  # text stores do not read them back
    assert delete_tagged(store, "customer:42") == 2
    assert flush(store, 10)
    assert store.find("n", "a") is None
    assert store.find("other", "a") is None
    assert sorted(p.key for p in store.find_all("n")) == ["b", "c", "d", "e"]
    assert delete_tagged(store, "customer:42") == 0
    assert delete_tagged(store, "never-used") == 0
    assert delete_tagged(store, "eu") == 1  # "a" went already
    assert flush(store, 10)
    assert sorted(p.key for p in store.find_all("n")) == ["b", "c", "d"]


def test_delete_tagged_overtakes_queued_writes(store: Any, clock: FakeClock) -> None:
    store.store_many([tagged(clock, f"k{i}", ("t",)) for i in range(10)])
    store.store(tagged(clock, "untagged", None))
    delete_tagged(store, "t")
    assert store.find("n", "k3") is None
    assert flush(store, 10)
    assert [p.key for p in store.find_all("n")] == ["untagged"]


def test_a_key_written_again_after_its_tag_is_cleared_is_tagged_again(
    store: Any, clock: FakeClock
) -> None:
    store.store(tagged(clock, "k", ("t",)))
    assert flush(store, 10)
    delete_tagged(store, "t")
    clock.advance(1)
    store.store(tagged(clock, "k", ("t",)))
    assert flush(store, 10)
    assert store.find("n", "k") is not None
    assert delete_tagged(store, "t") == 1
    assert flush(store, 10)
    assert store.find("n", "k") is None


def test_expire_ends_the_fresh_window_and_keeps_the_entry(store: Any, clock: FakeClock) -> None:
    e = tagged(clock, "k", ("t",), value={"v": 1})
    store.store(e)
    store.store(entry(clock, "other", {"v": 2}))
    assert expire(store, "n", "k")
    assert not expire(store, "n", "absent")
    assert flush(store, 10)
    for found in (store.find("n", "k"), store.find_many("n", ["k"])["k"]):
        assert found is not None
        assert found.fresh_ended
        assert (found.payload, found.as_of, found.expire_on) == ({"v": 1}, e.as_of, e.expire_on)
    assert not store.find("n", "other").fresh_ended
    assert expire(store, "n", "k")  # twice: still marked once
    assert flush(store, 10)
    assert store.find("n", "k").payload == {"v": 1}
    assert delete_tagged(store, "t") == 1  # still tagged


def test_expire_never_moves_an_entry_back_nor_brings_it_back(store: Any, clock: FakeClock) -> None:
    store.store(entry(clock, "k", {"v": "old"}))
    assert flush(store, 10)
    assert expire(store, "n", "k")
    clock.advance(1)
    store.store(entry(clock, "k", {"v": "new"}))  # a newer entry: fresh again
    assert flush(store, 10)
    found = store.find("n", "k")
    assert (found.payload, found.fresh_ended) == ({"v": "new"}, False)
    store.delete("n", "k")
    assert not expire(store, "n", "k")
    assert flush(store, 10)
    assert store.find("n", "k") is None


def test_expire_reaches_a_queued_write(store: Any, clock: FakeClock) -> None:
    store.store_many([entry(clock, f"k{i}") for i in range(10)])
    assert expire(store, "n", "k7")
    assert flush(store, 10)
    assert store.find("n", "k7").fresh_ended
    assert not store.find("n", "k6").fresh_ended
