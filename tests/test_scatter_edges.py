"""Scatter / gather at its edges: odd requests (duplicates, empty, None, unhashable, keys that
differ only by type, tuples, generators, 10,000 ids), odd upstream answers (another order,
extra, missing or duplicate items, None, not a list), `DictSplitter` with the same, a recover-all
among other failovers' entries and expired slices, `fresh_for` with partly fresh requests, and
slice keys shared with single-entity failovers. Sync and async, on the in-memory store and a
real SQLite file, on a fake clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import DictSplitter, Failover, ListSplitter
from failover.keys import make_key

from .conftest import FakeClock
from .test_async_write import WAIT

KINDS = ["memory", "sqlite"]


def _engine(kind: str, clock: FakeClock, tmp: Path) -> Failover:
    if kind == "memory":
        return Failover(clock=clock, metrics=False)
    # async writes on (the default): reads see slices still queued. The store deadline is not
    # what these tests are about: a loaded host's 10,000-key read must not become a miss.
    url = f"sqlite:///{tmp / 'edges.db'}"
    return Failover(url, clock=clock, metrics=False, store_timeout="30s")


@pytest.fixture(params=KINDS)
def eng(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Failover]:
    e = _engine(request.param, clock, tmp_path)
    yield e
    e.close()


def stored(e: Failover, name: str) -> dict[str, Any]:
    """Every entry of ``name`` by key, once the queued writes are written."""
    assert e.flush(WAIT)
    return {p.key: p.payload for p in e.store.find_all(name)}


def key(name: str, *values: Any) -> str:
    return make_key(name, values)


class Upstream:
    """Answers ``[{"id": i, "v": n}]`` for the ids asked (``n``: its call count), or what
    ``answer`` makes of them; raises while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.calls: list[Any] = []
        self.answer: Callable[[list[Any]], Any] | None = None

    def __call__(self, ids: Any) -> Any:
        ids = list(ids) if ids is not None else []
        self.calls.append(ids)
        if self.down:
            raise ConnectionError("upstream down")
        if self.answer is not None:
            return self.answer(ids)
        return [{"id": i, "v": len(self.calls)} for i in ids]


def ids_of(items: Any) -> list[Any]:
    return [item["id"] for item in items]


# -- odd requests ---------------------------------------------------------------------------------


def test_duplicates_in_the_request(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("dup", splitter=ListSplitter("id"), engine=eng)
    def find(ids: list[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    assert ids_of(find([1, 1, 2])) == [1, 1, 2]  # live: the upstream's answer, untouched
    assert set(stored(eng, "dup")) == {key("dup", 1), key("dup", 2)}  # one entry per entity
    up.down = True
    # recovered: the live answer's shape, request order, a key asked twice answered twice
    assert ids_of(find([2, 1, 2, 1])) == [2, 1, 2, 1]
    assert ids_of(find((1, 1))) == [1, 1]


def test_empty_and_none_requests_ask_for_nothing(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("empty", splitter=ListSplitter("id"), engine=eng, policy="never_throw")
    def find(ids: list[int] | None) -> list[dict[str, Any]] | None:
        return up(ids)  # type: ignore[no-any-return]

    assert find([]) == []  # a live empty list is returned, and stores nothing
    assert find(None) == []
    assert stored(eng, "empty") == {}
    find([1])
    up.down = True
    assert find([]) is None  # a miss, never an empty list
    assert find(None) is None
    assert ids_of(find([1])) == [1]


def test_unhashable_requested_keys_are_a_recover_error_not_a_crash(
    eng: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    up = Upstream()

    @failover.failover("unhashable", splitter=ListSplitter("id"), engine=eng)
    def find(ids: list[Any]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    live = find([[1], [2]])  # list ids: the live answer comes back whatever the store makes of it
    assert ids_of(live) == [[1], [2]]
    up.down = True
    caplog.set_level(logging.WARNING, "failover")
    with pytest.raises(ConnectionError):  # the policy (rethrow) decides: the upstream's error
        find([[1], [2]])
    assert "split_on_recover of splitter ListSplitter" in caplog.text


def test_keys_that_differ_only_by_type_are_distinct_entities(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("typed", splitter=ListSplitter("id"), engine=eng)
    def find(ids: list[Any]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    find([1, "1"])
    entries = stored(eng, "typed")
    assert set(entries) == {key("typed", 1), key("typed", "1")}  # two entries, not one
    assert key("typed", 1) != key("typed", "1")
    up.down = True
    assert ids_of(find(["1", 1])) == ["1", 1]  # both, each in its own type, in request order
    assert ids_of(find([1])) == [1]
    assert ids_of(find("1")) == ["1"]  # a comma-separated string asks for str keys


def test_a_tuple_request_recovers_as_a_list(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("tup", splitter=ListSplitter("id"), engine=eng)
    def find(ids: tuple[int, ...]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    find((3, 1, 2))
    up.down = True
    got = find((2, 3))
    assert isinstance(got, list)
    assert ids_of(got) == [2, 3]


def test_a_generator_request_reaches_the_upstream_whole(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("gen", splitter=ListSplitter("id"), engine=eng)
    def find(ids: Iterator[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    assert ids_of(find(i for i in [1, 2, 3])) == [1, 2, 3]  # consumed once, by the upstream
    assert up.calls == [[1, 2, 3]]
    assert len(stored(eng, "gen")) == 3
    up.down = True
    assert ids_of(find([3, 1])) == [3, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_a_generator_request_with_fresh_for_reaches_the_upstream_whole(
    kind: str, clock: FakeClock, tmp_path: Path
) -> None:
    """The fresh read must not consume a one-shot argument before the upstream sees it."""
    eng = _engine(kind, clock, tmp_path)
    up = Upstream()

    @failover.failover("genf", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    def find(ids: Iterator[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    with eng:
        assert ids_of(find(i for i in [1, 2])) == [1, 2]
        clock.advance(60)
        assert ids_of(find(i for i in [1, 3])) == [1, 3]  # 1 fresh, but a generator: asked whole
        assert up.calls == [[1, 2], [1, 3]]
        assert set(stored(eng, "genf")) == {key("genf", i) for i in (1, 2, 3)}


@pytest.mark.parametrize("kind", KINDS)
def test_an_async_generator_request_with_fresh_for_reaches_the_upstream_whole(
    kind: str, clock: FakeClock, tmp_path: Path
) -> None:
    eng = _engine(kind, clock, tmp_path)
    up = Upstream()

    @failover.failover("agenf", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    async def find(ids: Iterator[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    async def scenario() -> None:
        assert ids_of(await find(i for i in [1, 2])) == [1, 2]
        clock.advance(60)
        assert ids_of(await find(i for i in [2, 4])) == [2, 4]
        assert up.calls == [[1, 2], [2, 4]]

    with eng:
        asyncio.run(scenario())


def test_10000_ids_live_and_recovered(eng: Failover) -> None:
    up = Upstream()
    ids = list(range(10_000))

    @failover.failover("big", splitter=ListSplitter("id"), engine=eng)
    def find(ids: list[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    assert ids_of(find(ids)) == ids
    assert len(stored(eng, "big")) == 10_000
    up.down = True
    wanted = ids[::-3] + ids[::-3]  # another order, and every id asked twice
    assert ids_of(find(wanted)) == wanted  # as asked, the repeats included


# -- odd upstream answers -------------------------------------------------------------------------


def _answering(eng: Failover, up: Upstream, name: str) -> Any:
    @failover.failover(name, splitter=ListSplitter("id"), engine=eng)
    def find(ids: list[int]) -> Any:
        return up(ids)

    return find


def test_an_answer_in_another_order_recovers_in_request_order(eng: Failover) -> None:
    up = Upstream()
    find = _answering(eng, up, "order")
    up.answer = lambda ids: [{"id": i} for i in reversed(ids)]
    assert ids_of(find([1, 2, 3])) == [3, 2, 1]  # live: as the upstream answered
    up.down = True
    assert ids_of(find([1, 2, 3])) == [1, 2, 3]  # recovered: as requested


def test_extra_and_missing_items_are_stored_as_answered(
    eng: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    up = Upstream()
    find = _answering(eng, up, "extra")
    up.answer = lambda ids: [{"id": 9}, {"id": 1}]  # 9 not asked for, 2 missing
    assert ids_of(find([1, 2])) == [9, 1]
    assert set(stored(eng, "extra")) == {key("extra", 9), key("extra", 1)}
    up.down = True
    caplog.set_level(logging.WARNING, "failover")
    assert ids_of(find([1, 2])) == [1]  # partial: 2 was never answered
    assert "partial recovery, 1 of 2 slices missing" in caplog.text
    assert ids_of(find([9])) == [9]  # the extra item is an entity like any other


def test_duplicate_items_in_the_answer_the_last_is_stored(eng: Failover) -> None:
    up = Upstream()
    find = _answering(eng, up, "dupans")
    up.answer = lambda ids: [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 1, "v": "c"}]
    assert len(find([1, 2])) == 3  # live: untouched
    assert stored(eng, "dupans")[key("dupans", 1)] == {"id": 1, "v": "c"}  # as store() twice
    up.down = True
    assert find([1, 2]) == [{"id": 1, "v": "c"}, {"id": 2, "v": "b"}]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda ids: None, id="None"),
        pytest.param(lambda ids: {"id": 1}, id="dict"),
        pytest.param(lambda ids: "1,2", id="str"),
        pytest.param(lambda ids: ({"id": i} for i in ids), id="generator"),
        pytest.param(lambda ids: [{"id": 1}, {"no id": 2}], id="an item without its key"),
        pytest.param(lambda ids: [None], id="a None item"),
    ],
)
def test_an_answer_that_cannot_be_split_is_returned_and_logged(
    eng: Failover, caplog: pytest.LogCaptureFixture, answer: Callable[[list[int]], Any]
) -> None:
    up = Upstream()
    find = _answering(eng, up, "bad")
    up.answer = answer
    caplog.set_level(logging.WARNING, "failover")
    live = find([1, 2])
    expected = answer([1, 2])
    if isinstance(expected, Iterator):
        assert ids_of(live) == [1, 2]  # the generator, not consumed by the store
    else:
        assert live == expected
    assert "storing the live result failed" in caplog.text
    assert "split_on_store of splitter ListSplitter" in caplog.text
    assert stored(eng, "bad") == {}  # nothing stored, not a part of it


def test_an_answer_that_is_a_tuple_is_split(eng: Failover) -> None:
    up = Upstream()
    find = _answering(eng, up, "tupans")
    up.answer = lambda ids: tuple({"id": i} for i in ids)
    assert find([1, 2]) == ({"id": 1}, {"id": 2})
    up.down = True
    assert find([2, 1]) == [{"id": 2}, {"id": 1}]  # recovered as a list


def test_async_odd_answers(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("aodd", splitter=ListSplitter("id"), engine=eng)
    async def find(ids: list[int]) -> Any:
        return up(ids)

    async def scenario() -> None:
        up.answer = lambda ids: [{"id": 3}, {"id": 1}, {"id": 1, "v": "last"}]
        assert ids_of(await find([1, 2])) == [3, 1, 1]
        up.answer = lambda ids: None
        assert await find([4]) is None  # logged store trouble, the live None returns
        up.down = True
        got = await find([2, 3, 1])
        assert got == [{"id": 3}, {"id": 1, "v": "last"}]

    asyncio.run(scenario())


# -- DictSplitter ---------------------------------------------------------------------------------


def _dict_failover(eng: Failover, up: Upstream, name: str, **settings: Any) -> Any:
    @failover.failover(name, splitter=DictSplitter(item_key="id"), engine=eng, **settings)
    def rates(ids: list[Any]) -> Any:
        return up(ids)

    return rates


def test_dict_requests_and_answers(eng: Failover, caplog: pytest.LogCaptureFixture) -> None:
    up = Upstream()
    rates = _dict_failover(eng, up, "dict")
    up.answer = lambda ids: {i: {"id": i} for i in reversed(ids)} | {9: {"id": 9}}
    assert list(rates([1, 2, 2])) == [2, 1, 9]  # live: untouched
    assert set(stored(eng, "dict")) == {key("dict", i) for i in (1, 2, 9)}
    rates([])  # an empty dict stores nothing, and raises nothing
    up.answer = lambda ids: {"1": {"id": "1"}}  # "1" is not 1
    rates(["1"])
    up.down = True
    assert list(rates([9, 1, 1, 3])) == [9, 1]  # request order, each once, 3 missing
    assert rates(["1", 1]) == {"1": {"id": "1"}, 1: {"id": 1}}
    with pytest.raises(ConnectionError):
        rates([])
    caplog.set_level(logging.WARNING, "failover")
    with pytest.raises(ConnectionError):
        rates([[1]])  # unhashable: a recover error, the policy decides
    assert "split_on_recover of splitter DictSplitter" in caplog.text


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda ids: None, id="None"),
        pytest.param(lambda ids: [{"id": 1}], id="list"),
        pytest.param(lambda ids: ((i, {"id": i}) for i in ids), id="generator"),
    ],
)
def test_a_dict_answer_that_cannot_be_split_is_returned_and_logged(
    eng: Failover, caplog: pytest.LogCaptureFixture, answer: Callable[[list[int]], Any]
) -> None:
    up = Upstream()
    rates = _dict_failover(eng, up, "dbad")
    up.answer = answer
    caplog.set_level(logging.WARNING, "failover")
    live = rates([1])
    if isinstance(live, Iterator):
        assert dict(live) == {1: {"id": 1}}  # not consumed by the store
    else:
        assert live == answer([1])
    assert "split_on_store of splitter DictSplitter" in caplog.text
    assert stored(eng, "dbad") == {}


def test_dict_recover_all_orders_by_item_key(eng: Failover) -> None:
    up = Upstream()
    rates = _dict_failover(eng, up, "dall", recover_all=True)
    up.answer = lambda ids: {i: {"id": i} for i in ids}
    rates([3, 1])
    rates([2])
    up.down = True
    assert list(rates([7])) == [1, 2, 3]


# -- recover-all among other failovers, expired slices --------------------------------------------


@dataclass(frozen=True)
class Country:
    code: str
    name: str


def test_recover_all_sees_every_failover_of_the_domain_and_drops_expired_slices(
    eng: Failover, clock: FakeClock
) -> None:
    down = [False]

    def answer(codes: list[str]) -> list[Country]:
        if down[0]:
            raise ConnectionError("down")
        return [Country(c, c.lower()) for c in codes]

    @failover.failover(
        "all", domain="ctry", splitter=ListSplitter("code"), recover_all=True, engine=eng
    )
    def all_countries(region: str) -> list[Country]:
        return answer(["US", "FR"] if region == "west" else ["JP"])

    @failover.failover("some", domain="ctry", splitter=ListSplitter("code"), engine=eng)
    def some(codes: str) -> list[Country]:
        return answer(codes.split(","))

    @failover.failover("one", domain="ctry", engine=eng)
    def one(code: str) -> Country:
        return answer([code])[0]

    all_countries("west")
    clock.advance(minutes=30)
    some("DE,JP")
    one("IT")
    clock.advance(minutes=31)  # US and FR expired, DE, JP and IT live
    down[0] = True
    env = all_countries.referential("east")  # the argument does not matter
    assert [c.code for c in env.payload] == ["DE", "IT", "JP"]  # by entity key
    assert env.up_to_date is False
    assert set(stored(eng, "ctry")) == {key("ctry", c) for c in ("DE", "IT", "JP")}  # deleted
    assert [c.code for c in some("US,JP,FR,IT")] == ["JP", "IT"]  # expired: misses
    assert one("DE") == Country("DE", "de")


def test_recover_all_with_a_none_stored_by_a_single_entity_failover(
    eng: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    """`Country | None` without a splitter matches `list[Country]` with one (the docs): a
    ``None`` it stored for an unknown entity is no item of a recovered list."""
    down = [False]

    @failover.failover(
        "all", domain="cn", splitter=ListSplitter("code"), recover_all=True, engine=eng
    )
    def countries(codes: str) -> list[Country]:
        if down[0]:
            raise ConnectionError("down")
        return [Country(c, c.lower()) for c in codes.split(",")]

    @failover.failover("one", domain="cn", engine=eng)
    def country(code: str) -> Country | None:
        if down[0]:
            raise ConnectionError("down")
        return None if code == "XX" else Country(code, code.lower())

    countries("FR,DE")
    assert country("XX") is None
    down[0] = True
    caplog.set_level(logging.WARNING, "failover")
    assert [c.code for c in countries("whatever")] == ["DE", "FR"]
    assert "split" not in caplog.text
    assert "merge" not in caplog.text
    assert country("XX") is None  # the single-entity failover still recovers its None


def test_a_none_slice_is_no_item_of_a_requested_list(eng: Failover) -> None:
    down = [False]

    @failover.failover("some", domain="cx", splitter=ListSplitter("code"), engine=eng)
    def countries(codes: str) -> list[Country]:
        if down[0]:
            raise ConnectionError("down")
        return [Country(c, c.lower()) for c in codes.split(",")]

    @failover.failover("one", domain="cx", engine=eng)
    def country(code: str) -> Country | None:
        if down[0]:
            raise ConnectionError("down")
        return None

    countries("FR")
    country("XX")
    down[0] = True
    assert countries("XX,FR") == [Country("FR", "fr")]
    with pytest.raises(ConnectionError):
        countries("XX")  # known not to exist: nothing to return, a miss


def test_async_recover_all_with_expired_slices(eng: Failover, clock: FakeClock) -> None:
    up = Upstream()

    @failover.failover("aall", splitter=ListSplitter("id"), recover_all=True, engine=eng)
    async def find(ids: list[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    async def scenario() -> None:
        await find([5, 4])
        clock.advance(minutes=45)
        await find([2])
        clock.advance(minutes=30)  # 4 and 5 expired
        up.down = True
        assert ids_of(await find([5])) == [2]

    asyncio.run(scenario())


# -- fresh_for with partly fresh requests ---------------------------------------------------------


def test_partly_fresh_requests_ask_only_for_the_missing_ids(
    eng: Failover, clock: FakeClock
) -> None:
    up = Upstream()

    @failover.failover("fr", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    def find(ids: list[int]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    find([1, 2, 3])
    clock.advance(minutes=1)
    got = find.referential([4, 2, 4, 5, 1])
    assert up.calls[-1] == [4, 5]  # the missing ids only, each once, in request order
    # the live answer's shape: 4 asked twice, answered twice
    assert [(x["id"], x["v"]) for x in got.payload] == [(4, 2), (2, 1), (4, 2), (5, 2), (1, 1)]
    assert got.up_to_date is True
    clock.advance(minutes=4)  # 1..3 five minutes old: stale; 4 and 5 four: fresh
    assert ids_of(find((3, 5))) == [3, 5]
    assert up.calls[-1] == [3]  # a tuple is narrowed as a tuple
    assert len(up.calls) == 3


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda ids: None, id="None"),
        pytest.param(lambda ids: {"id": 4}, id="dict"),
        pytest.param(lambda ids: [{"no id": 4}], id="an item without its key"),
    ],
)
def test_a_narrowed_call_answered_with_what_cannot_be_split_keeps_its_live_result(
    eng: Failover,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    answer: Callable[[list[int]], Any],
) -> None:
    """As any call: a splitter that raises never costs the caller the live result."""
    up = Upstream()

    @failover.failover("nb", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    def find(ids: list[int]) -> Any:
        return up(ids)

    find([1])
    clock.advance(minutes=1)
    up.answer = answer
    caplog.set_level(logging.WARNING, "failover")
    env = find.referential([1, 4])  # 1 fresh: the upstream is asked for 4 only
    assert up.calls[-1] == [4]
    assert env.payload == answer([4])  # the upstream's answer, as it came
    assert env.up_to_date is True
    assert "split_on_store of splitter ListSplitter" in caplog.text


def test_a_narrowed_call_answered_with_a_generator_returns_it_unconsumed(
    eng: Failover, clock: FakeClock
) -> None:
    up = Upstream()

    @failover.failover("ng", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    def find(ids: list[int]) -> Any:
        return up(ids)

    find([1])
    clock.advance(minutes=1)
    up.answer = lambda ids: ({"id": i} for i in ids)
    assert ids_of(find([1, 4])) == [4]


def test_a_narrowed_call_merges_what_the_store_holds(eng: Failover, clock: FakeClock) -> None:
    """Extra or duplicate items in a narrowed call's answer: the caller gets, for each key,
    what was just stored (the last item of it), as a recovery would."""
    up = Upstream()

    @failover.failover("nm", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    def find(ids: list[int]) -> Any:
        return up(ids)

    find([1, 2])
    clock.advance(minutes=1)
    up.answer = lambda ids: [{"id": 4, "v": "a"}, {"id": 1, "v": "new"}, {"id": 4, "v": "b"}]
    got = find([1, 4, 3])
    assert up.calls[-1] == [4, 3]
    entries = stored(eng, "nm")
    assert got == [entries[key("nm", 1)], entries[key("nm", 4)]]
    assert got == [{"id": 1, "v": "new"}, {"id": 4, "v": "b"}]


def test_async_partly_fresh_requests(eng: Failover, clock: FakeClock) -> None:
    up = Upstream()

    @failover.failover("afr", splitter=ListSplitter("id"), fresh_for="5m", engine=eng)
    async def find(codes: str) -> list[dict[str, Any]]:
        return up(codes.split(","))  # type: ignore[no-any-return]

    async def scenario() -> None:
        await find("FR,DE")
        clock.advance(minutes=2)
        assert ids_of(await find("US,FR,IT,DE")) == ["US", "FR", "IT", "DE"]
        assert up.calls[-1] == ["US", "IT"]  # narrowed as a comma-separated string
        up.answer = lambda ids: None
        assert await find("FR,ES") is None  # the live None, logged store trouble
        up.answer = None
        up.down = True
        got = await find.referential("ES,DE,US")  # the narrowed call fails: recovered whole
        assert up.calls[-1] == ["ES"]
        assert ids_of(got.payload) == ["DE", "US"]
        assert got.up_to_date is False

    asyncio.run(scenario())


def test_partly_fresh_dict_requests(eng: Failover, clock: FakeClock) -> None:
    up = Upstream()
    up.answer = lambda ids: {i: {"id": i, "n": len(up.calls)} for i in ids}
    rates = _dict_failover(eng, up, "dfr", fresh_for="5m")
    rates(["EUR", "USD"])
    clock.advance(minutes=1)
    got = rates(["GBP", "USD", "JPY"])
    assert up.calls[-1] == ["GBP", "JPY"]
    assert list(got) == ["GBP", "USD", "JPY"]
    assert [v["n"] for v in got.values()] == [2, 1, 2]


# -- keys shared with single-entity failovers -----------------------------------------------------


def test_a_slice_key_is_the_key_of_the_single_entity_call(eng: Failover) -> None:
    up = Upstream()

    @failover.failover("many", domain="ent", splitter=ListSplitter("id"), engine=eng)
    def many(ids: list[Any]) -> list[dict[str, Any]]:
        return up(ids)  # type: ignore[no-any-return]

    @failover.failover("single", domain="ent", engine=eng)
    def single(entity_id: Any) -> dict[str, Any]:
        return up([entity_id])[0]  # type: ignore[no-any-return]

    many([1, "b"])
    single(7)
    entries = stored(eng, "ent")
    assert set(entries) == {key("ent", 1), key("ent", "b"), key("ent", 7)}
    up.down = True
    assert single.peek(1) is not None
    assert single.peek("1") is None  # another entity: "1" is not 1
    assert single(1) == {"id": 1, "v": 1}
    assert ids_of(many([7, "b"])) == [7, "b"]
    many.invalidate([7])
    assert single.peek(7) is None  # the same entry, deleted through either
