"""Recovery's edges, sync and async, on real stores (a SQLite file, process memory, Redis): many
recoveries of one loop turn each get their own entry; an expired entry is dropped and the policy
answers; a failing store is a miss, never a hang; scatter/gather recovers the same slices either
way; hooks and callable policies see the same context; a sync failover recovers inside a loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover, InMemoryStore, ListSplitter, ReferentialPayload
from failover.call import call_of
from failover.handlers import key_of
from failover.handlers.base import slice_key

from .conftest import FakeClock
from .stores import redis_store

KINDS = ["sync", "async"]
EXPIRED = "the stored entry had expired"
MISSING = "no stored entry"
FAILED = "the store failed while recovering"
GUARD = 20  # seconds: a hang guard only, never a measure


class Down(Exception):
    """The upstream's error (a new one per call: notes never carry over)."""


def make_engine(store: str, tmp_path: Path, clock: FakeClock) -> Failover:
    # A generous store deadline: what is tested is recovery, many at once, and a loaded host's
    # read past the default 0.5 s would be a miss (three in a row take the store out).
    if store == "sqlite":
        url = "sqlite:///" + str(tmp_path / "f.db")
        return Failover(url, clock=clock, metrics=False, store_timeout=GUARD)
    if store == "sqlite-direct":  # no write queue: a chore's delete lands at once
        url = "sqlite:///" + str(tmp_path / "f.db")
        return Failover(url, clock=clock, metrics=False, async_writes=False, store_timeout=GUARD)
    if store == "redis":
        return Failover(
            redis_store(clock), clock=clock, metrics=False, async_writes=False, store_timeout=GUARD
        )
    assert store == "memory"
    return Failover(clock=clock, metrics=False)


@pytest.fixture(params=["sqlite", "sqlite-direct", "memory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Failover]:
    eng = make_engine(request.param, tmp_path, clock)
    yield eng
    eng.close()


class Rates:
    """An upstream of rates by code: answers until ``down``."""

    def __init__(self, who: str = "rates") -> None:
        self.who = who
        self.down = False

    def __call__(self, code: int) -> dict[str, Any]:
        if self.down:
            raise Down(code)
        return {"code": code, "by": self.who, "rates": [1.0, 2.0]}


def rates_of(kind: str, engine: Failover, name: str, upstream: Rates, **options: Any) -> Any:
    """A failover over ``upstream``: a plain function, or (``async``) an ``async def``."""
    if kind == "sync":

        def rate(code: int) -> dict[str, Any]:
            return upstream(code)

        return failover.failover(name, engine=engine, **options)(rate)

    async def arate(code: int) -> dict[str, Any]:
        return upstream(code)

    return failover.failover(name, engine=engine, **options)(arate)


def run(kind: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``: called, or (``async``) awaited on a loop of its own."""
    return fn(*args) if kind == "sync" else asyncio.run(fn(*args))


def outcome(kind: str, fn: Any, *args: Any) -> Any:
    """What the caller gets: the value, or the exception raised."""
    try:
        return run(kind, fn, *args)
    except Exception as exc:
        return exc


def stored_key(fn: Any, *args: Any) -> str:
    return key_of(call_of(fn._failover_state.runtime(), args, {}))


def note(exc: BaseException) -> str:
    notes = getattr(exc, "__notes__", [])
    assert len(notes) == 1, notes
    return str(notes[0])


# -- many recoveries in one loop turn ------------------------------------------------------------


def seed(fn: Any, kind: str, clock: FakeClock, codes: Iterable[int]) -> dict[int, datetime]:
    """Store ``fn(code)`` for each code, one second apart: each entry has a time of its own."""
    times = {}
    for code in codes:
        times[code] = clock.advance(1)
        run(kind, fn, code)
    return times


def mixed(fn: Any, kind: str, clock: FakeClock) -> tuple[dict[int, datetime], set[int]]:
    """Codes 0..49 under ``fn`` (ttl 1h): ``code % 3 == 0`` stored 40 minutes ago (found),
    ``1`` stored 70 minutes ago (expired), ``2`` never stored (missing). Returns the found
    codes' times, and the expired codes."""
    expired = {c for c in range(50) if c % 3 == 1}
    seed(fn, kind, clock, sorted(expired))
    clock.advance(minutes=30)
    found = seed(fn, kind, clock, [c for c in range(50) if c % 3 == 0])
    clock.advance(minutes=40)
    return found, expired


def check_mixed(
    fn: Any,
    engine: Failover,
    got: Sequence[Any],
    found: dict[int, datetime],
    expired: set[int],
    who: str = "rates",
) -> None:
    name = fn.definition.effective_name
    for code, out in enumerate(got):
        if code in found:
            assert isinstance(out, ReferentialPayload), (code, out)
            assert out.payload == {"code": code, "by": who, "rates": [1.0, 2.0]}
            assert (out.as_of, out.up_to_date, out.key) == (
                found[code],
                False,
                stored_key(fn, code),
            )
            assert isinstance(out.cause, Down)
            assert out.cause.args == (code,)
        else:
            assert isinstance(out, Down), (code, out)
            assert out.args == (code,)
            assert note(out).endswith(f"({EXPIRED if code in expired else MISSING})")
    for code in expired:  # dropped, not merely skipped
        assert engine.store.find(name, stored_key(fn, code)) is None
    for code in found:
        assert engine.store.find(name, stored_key(fn, code)) is not None


@pytest.mark.parametrize("store", ["sqlite", "sqlite-direct", "memory", "redis"])
async def test_fifty_async_recoveries_of_one_loop_turn_each_get_their_own_entry(
    store: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = make_engine(store, tmp_path, clock)
    try:
        upstream = Rates()
        rates = rates_of("async", engine, "edges.turn", upstream, ttl="1h")
        found: dict[int, datetime] = {}
        expired = {c for c in range(50) if c % 3 == 1}
        for code in sorted(expired):
            clock.advance(1)
            await rates(code)
        clock.advance(minutes=30)
        for code in range(0, 50, 3):
            found[code] = clock.advance(1)
            await rates(code)
        clock.advance(minutes=40)
        upstream.down = True
        # Every task reaches its read in the same loop turn: one batch of 50 keys.
        got = await asyncio.wait_for(
            asyncio.gather(*(rates.referential(c) for c in range(50)), return_exceptions=True),
            GUARD,
        )
        check_mixed(rates, engine, got, found, expired)
    finally:
        await asyncio.to_thread(engine.close)


def test_fifty_threads_recovering_at_once_each_get_their_own_entry(
    engine: Failover, clock: FakeClock
) -> None:
    upstream = Rates()
    rates = rates_of("sync", engine, "edges.threads", upstream, ttl="1h")
    found, expired = mixed(rates, "sync", clock)
    upstream.down = True

    def one(code: int) -> Any:
        try:
            return rates.referential(code)
        except Down as exc:
            return exc

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, range(50)))
    check_mixed(rates, engine, got, found, expired)


async def test_two_failovers_sharing_a_domain_recover_in_one_turn(
    engine: Failover, clock: FakeClock
) -> None:
    """Both failovers' reads go to one batch (one effective name): each caller gets the entry
    of its own key, whichever failover stored it, and no two callers share an object."""
    a_up, b_up = Rates("a"), Rates("b")
    a = rates_of("async", engine, "edges.a", a_up, ttl="1h", domain="edges.shared")
    b = rates_of("async", engine, "edges.b", b_up, ttl="1h", domain="edges.shared")
    times = {}
    for code in range(40):  # 0..9, then (30 minutes later) 10..39, a second apart
        if code == 10:
            clock.advance(minutes=30)
        times[code] = clock.advance(1)
        await (a if code % 2 else b)(code)
    clock.advance(minutes=31)  # 0..9 are over an hour old: expired; 10..39 are not
    expired = set(range(10))
    a_up.down = b_up.down = True
    codes = list(range(45))  # 40..44: never stored
    got = await asyncio.wait_for(
        asyncio.gather(
            *(a.referential(c) for c in codes),
            *(b.referential(c) for c in codes),
            return_exceptions=True,
        ),
        GUARD,
    )
    from_a, from_b = got[: len(codes)], got[len(codes) :]
    for code in codes:
        x, y = from_a[code], from_b[code]
        if code in expired or code >= 40:
            why = EXPIRED if code in expired else MISSING
            for out in (x, y):
                assert isinstance(out, Down)
                assert out.args == (code,)
            assert note(x).endswith(f"({why})")
            # A read of the same turn finds it expired too, or (read after the first one's
            # drop: a store without I/O is read in place, task by task) gone.
            assert note(y).endswith(f"({why})") or note(y).endswith(f"({MISSING})")
            continue
        assert isinstance(x, ReferentialPayload)
        assert isinstance(y, ReferentialPayload)
        who = "a" if code % 2 else "b"
        assert x.payload == y.payload == {"code": code, "by": who, "rates": [1.0, 2.0]}
        assert x.as_of == y.as_of == times[code]
        assert x.payload is not y.payload  # each caller its own object
        x.payload["rates"].append(3.0)
        assert y.payload["rates"] == [1.0, 2.0]
    for code in expired:
        assert engine.store.find("edges.shared", stored_key(a, code)) is None


# -- an expired entry: dropped, and the policy answers -------------------------------------------


def codes_of(kind: str, engine: Failover, name: str, state: dict[str, bool], **options: Any) -> Any:
    """A failover returning a list of codes (``return_default``'s value: ``[]``)."""
    if kind == "sync":

        def codes(region: str) -> list[str]:
            if state["down"]:
                raise Down(region)
            return [region + "1", region + "2"]

        return failover.failover(name, engine=engine, **options)(codes)

    async def acodes(region: str) -> list[str]:
        if state["down"]:
            raise Down(region)
        return [region + "1", region + "2"]

    return failover.failover(name, engine=engine, **options)(acodes)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ["rethrow", "return_default", "never_throw"])
def test_an_expired_entry_is_dropped_and_the_policy_answers(
    kind: str, policy: str, engine: Failover, clock: FakeClock
) -> None:
    state = {"down": False}
    seen: list[Any] = []

    def hook(ctx: Any, value: Any) -> Any:
        seen.append((ctx.recovered, value))
        return value

    codes = codes_of(
        kind, engine, f"edges.expired.{kind}", state, ttl="1h", policy=policy, on_recovered=hook
    )
    run(kind, codes, "eu")
    clock.advance(hours=1, seconds=1)
    state["down"] = True
    got = outcome(kind, codes.referential, "eu")
    if policy == "rethrow":
        assert isinstance(got, Down)
        assert note(got).endswith(f"({EXPIRED})")
    else:
        assert isinstance(got, ReferentialPayload)
        assert got.payload == ([] if policy == "return_default" else None)
        assert (got.as_of, got.up_to_date, got.key) == (None, False, stored_key(codes, "eu"))
        assert isinstance(got.cause, Down)
    # never_throw runs the hook (with nothing recovered); the others do not
    assert seen == ([(None, None)] if policy == "never_throw" else [])
    name = codes.definition.effective_name
    assert engine.store.find(name, stored_key(codes, "eu")) is None  # dropped
    assert codes.peek("eu") is None
    # And a second failure finds nothing at all now.
    again = outcome(kind, codes, "eu")
    if policy == "rethrow":
        assert isinstance(again, Down)
        assert note(again).endswith(f"({MISSING})")


# -- a store whose reads fail --------------------------------------------------------------------


class FailingReads(InMemoryStore):
    """A real store whose reads fail once ``broken`` (writes still work), declared as doing I/O
    so that async callers read it through the batcher, on a worker thread."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    @property
    def does_io(self) -> bool:
        return True

    def find(self, name: str, key: str) -> Any:
        if self.broken:
            raise OSError("disk gone")
        return super().find(name, key)

    def find_many(self, name: str, keys: Any) -> dict[str, Any]:
        if self.broken:
            raise OSError("disk gone")
        return super().find_many(name, keys)


class PlainFailingStore:
    """A store of one's own (no `Capabilities`: taken to do I/O), after docs/stores.md, whose
    reads fail once ``broken``."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Any] = {}
        self.broken = False

    def store(self, payload: Any) -> None:
        self.entries[(payload.name, payload.key)] = payload

    def store_many(self, payloads: Sequence[Any]) -> None:
        for p in payloads:
            self.store(p)

    def find(self, name: str, key: str) -> Any:
        if self.broken:
            raise OSError("disk gone")
        return self.entries.get((name, key))

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Any]:
        if self.broken:
            raise OSError("disk gone")
        return {k: p for k in keys if (p := self.entries.get((name, k))) is not None}

    def find_all(self, name: str) -> list[Any]:
        if self.broken:
            raise OSError("disk gone")
        return [p for (n, _), p in self.entries.items() if n == name]

    def delete(self, name: str, key: str) -> None:
        self.entries.pop((name, key), None)

    def clean_by_expiry(self, now: datetime) -> int:
        return 0

    def close(self) -> None:
        self.entries.clear()


FAILING = {"in-memory, does_io": FailingReads, "plain": PlainFailingStore}


@pytest.fixture(params=list(FAILING))
def failing(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[tuple[Failover, Any]]:
    store = FAILING[request.param]()
    eng = Failover(store, clock=clock, metrics=False, async_writes=False)
    yield eng, store
    eng.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ["rethrow", "never_throw", "return_default"])
def test_a_store_whose_reads_fail_makes_recovery_a_miss(
    kind: str, policy: str, failing: tuple[Failover, Any]
) -> None:
    engine, store = failing
    state = {"down": False}
    codes = codes_of(kind, engine, f"edges.failing.{kind}", state, policy=policy)
    run(kind, codes, "eu")  # stored: the entry is there, the store cannot read it
    store.broken = True
    state["down"] = True
    got = outcome(kind, codes, "eu")
    if policy == "rethrow":
        assert isinstance(got, Down)
        assert note(got).endswith(f"({FAILED})")
    else:
        assert got == ([] if policy == "return_default" else None)
    store.broken = False  # the store is back: the entry recovers again
    assert run(kind, codes, "eu") == ["eu1", "eu2"]


async def test_concurrent_async_recoveries_on_a_failing_store_all_rethrow(
    failing: tuple[Failover, Any],
) -> None:
    engine, store = failing
    upstream = Rates()
    rates = rates_of("async", engine, "edges.failing.many", upstream)
    for code in range(30):
        await rates(code)
    store.broken = True
    upstream.down = True
    # One batch of 30 reads, whose find_many raises: every caller gets its own upstream error
    # (a miss), none waits forever.
    got = await asyncio.wait_for(
        asyncio.gather(*(rates(c) for c in range(30)), return_exceptions=True), GUARD
    )
    for code, out in enumerate(got):
        assert isinstance(out, Down)
        assert out.args == (code,)
        assert note(out).endswith(f"({FAILED})")
    # A lone read (find, not find_many) fails the same way.
    with pytest.raises(Down) as raised:
        await asyncio.wait_for(rates(7), GUARD)
    assert note(raised.value).endswith(f"({FAILED})")
    store.broken = False
    assert (await rates(7))["code"] == 7
    await asyncio.to_thread(engine.close)


def test_threads_recovering_on_a_failing_store_all_rethrow(
    failing: tuple[Failover, Any],
) -> None:
    engine, store = failing
    upstream = Rates()
    rates = rates_of("sync", engine, "edges.failing.threads", upstream)
    for code in range(30):
        rates(code)
    store.broken = True
    upstream.down = True

    def one(code: int) -> Any:
        try:
            return rates(code)
        except Down as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(30)))
    for code, out in enumerate(got):
        assert isinstance(out, Down)
        assert out.args == (code,)
        assert note(out).endswith(f"({FAILED})")


# -- scatter / gather ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Country:
    code: str
    name: str


def countries_of(
    kind: str, engine: Failover, name: str, state: dict[str, bool], **options: Any
) -> Any:
    """A collection failover, split per country (``ListSplitter("code")``)."""
    options.setdefault("splitter", ListSplitter("code"))
    if kind == "sync":

        def countries(codes: list[str]) -> list[Country]:
            if state["down"]:
                raise Down(*codes)
            return [Country(c, c.lower()) for c in codes]

        return failover.failover(name, engine=engine, **options)(countries)

    async def acountries(codes: list[str]) -> list[Country]:
        if state["down"]:
            raise Down(*codes)
        return [Country(c, c.lower()) for c in codes]

    return failover.failover(name, engine=engine, **options)(acountries)


def slices(engine: Failover, fn: Any) -> list[str]:
    """The slices stored under ``fn``'s name, by entity code."""
    name = fn.definition.effective_name
    keys = {slice_key(fn.definition, {"codes": c}): c for c in ["FR", "DE", "IT", "ES", "US"]}
    return sorted(keys[p.key] for p in engine.store.find_all(name))


def scatter_scenario(
    kind: str, engine: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> dict[str, Any]:
    """FR stored 70 minutes ago (expired, ttl 1h), DE and IT 20 minutes ago, ES never: what
    recovering each request gives, and what is left stored."""
    state = {"down": False}
    countries = countries_of(kind, engine, f"edges.scatter.{kind}", state, ttl="1h")
    run(kind, countries, ["FR"])
    clock.advance(minutes=50)
    t1 = clock()
    run(kind, countries, ["DE", "IT"])
    clock.advance(minutes=20)
    state["down"] = True
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="failover"):
        partial = run(kind, countries.referential, ["FR", "DE", "ES", "IT"])
    warned = [r.getMessage() for r in caplog.records if "partial recovery" in r.getMessage()]
    after = slices(engine, countries)
    missing = outcome(kind, countries, ["ES", "US"])
    expired_only = outcome(kind, countries, ["FR"])  # dropped by the first recovery
    return {
        "payload": partial.payload,
        "times": (partial.as_of == t1, partial.up_to_date, partial.expire_on),
        "cause": type(partial.cause),
        "warned": [w.replace(f".{kind}", "") for w in warned],
        "left": after,
        "missing": (type(missing), note(missing).split("(")[-1]),
        "expired only": (type(expired_only), note(expired_only).split("(")[-1]),
    }


def test_scatter_recovery_is_the_same_sync_and_async(
    engine: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    start = clock()
    sync = scatter_scenario("sync", engine, clock, caplog)
    clock.now = start
    asynchronous = scatter_scenario("async", engine, clock, caplog)
    assert sync == asynchronous
    assert sync["payload"] == [Country("DE", "de"), Country("IT", "it")]
    assert sync["times"][:2] == (True, False)
    assert sync["cause"] is Down
    assert sync["warned"] == ["failover 'edges.scatter': partial recovery, 2 of 4 slices missing"]
    assert sync["left"] == ["DE", "IT"]  # FR dropped
    assert sync["missing"] == (Down, f"{MISSING})")
    assert sync["expired only"] == (Down, f"{MISSING})")


@pytest.mark.parametrize("kind", KINDS)
def test_a_scatter_call_whose_slices_all_expired_says_so_and_drops_them(
    kind: str, engine: Failover, clock: FakeClock
) -> None:
    state = {"down": False}
    countries = countries_of(kind, engine, f"edges.allexpired.{kind}", state, ttl="1h")
    run(kind, countries, ["FR", "DE"])
    clock.advance(hours=2)
    state["down"] = True
    got = outcome(kind, countries, ["FR", "DE", "IT"])
    assert isinstance(got, Down)
    assert note(got).endswith(f"({EXPIRED})")
    assert slices(engine, countries) == []


async def test_concurrent_scatter_recoveries_with_shared_slices_get_their_own(
    engine: Failover, clock: FakeClock
) -> None:
    """Scatter calls of one turn asking for overlapping slices: one batch; each call merges its
    own request, in its own order, from objects of its own."""
    state = {"down": False}
    countries = countries_of("async", engine, "edges.scatter.many", state, ttl="1h")
    await countries(["FR"])
    clock.advance(minutes=50)
    await countries(["DE", "IT", "US"])
    clock.advance(minutes=20)  # FR expired
    state["down"] = True
    requests = [["FR", "DE"], ["IT", "DE"], ["US"], ["ES"], ["DE", "US", "IT", "FR"], ["FR"]]
    got = await asyncio.wait_for(
        asyncio.gather(*(countries(r) for r in requests), return_exceptions=True), GUARD
    )
    c = {code: Country(code, code.lower()) for code in ["DE", "IT", "US"]}
    assert got[0] == [c["DE"]]
    assert got[1] == [c["IT"], c["DE"]]
    assert got[2] == [c["US"]]
    assert isinstance(got[3], Down)
    assert note(got[3]).endswith(f"({MISSING})")
    assert got[4] == [c["DE"], c["US"], c["IT"]]
    assert isinstance(got[5], Down)  # FR alone: expired (or, dropped meanwhile, missing)
    assert note(got[5]).endswith(f"({EXPIRED})") or note(got[5]).endswith(f"({MISSING})")
    assert slices(engine, countries) == ["DE", "IT", "US"]


# -- what hooks and callable policies see --------------------------------------------------------


def seen_fields(ctx: Any) -> dict[str, Any]:
    """A `RecoverContext`'s fields, comparable across failovers of other names."""
    found = ctx.recovered
    return {
        "arguments": dict(ctx.arguments),
        "cause": (type(ctx.cause), ctx.cause.args),
        "recovered": None
        if found is None
        else (found.payload, found.as_of, found.expire_on, found.up_to_date, type(found.cause)),
        "return_type": ctx.return_type,
        "effective_name": ctx.definition.effective_name,
    }


def contexts(kind: str, engine: Failover, clock: FakeClock) -> dict[str, Any]:
    """What an ``on_recovered`` hook and a callable policy see on a recovery, a miss, an
    expired entry, and a scatter recovery."""
    seen: dict[str, Any] = {}
    state = {"down": False}

    def hook(ctx: Any, value: Any) -> Any:
        seen.setdefault("hook", []).append((seen_fields(ctx), value))
        return value

    def policy(ctx: Any) -> Any:
        seen.setdefault("policy", []).append(seen_fields(ctx))
        return ["made"]

    opts = {"ttl": "1h", "domain": "edges.ctx"}  # one namespace: sync and async alike
    codes = codes_of(kind, engine, f"edges.ctx.{kind}", state, on_recovered=hook, **opts)
    by_policy = codes_of(kind, engine, f"edges.ctxp.{kind}", state, policy=policy, **opts)
    split = countries_of(
        kind, engine, f"edges.ctxs.{kind}", state, on_recovered=hook, ttl="1h", domain="edges.ctxs"
    )
    run(kind, codes, "eu")
    run(kind, split, ["FR", "DE"])
    clock.advance(minutes=30)
    run(kind, codes, "asia")
    clock.advance(minutes=40)  # "eu" expired, "asia" not
    state["down"] = True
    seen["recovered"] = run(kind, codes, "asia")
    seen["expired"] = outcome(kind, by_policy, "eu")
    seen["missing"] = outcome(kind, by_policy, "us")
    clock.advance(minutes=-40)  # FR, DE not expired yet
    seen["scatter"] = run(kind, split, ["DE", "ES", "FR"])
    return seen


def test_hooks_and_policies_see_the_same_context_sync_and_async(
    engine: Failover, clock: FakeClock
) -> None:
    start = clock()
    sync = contexts("sync", engine, clock)
    clock.now = start
    asynchronous = contexts("async", engine, clock)
    assert sync == asynchronous
    (hook_asia, value), (hook_split, merged) = sync["hook"]
    assert value == ["asia1", "asia2"]
    assert sync["recovered"] == value
    assert hook_asia["arguments"] == {"region": "asia"}
    assert hook_asia["return_type"] == list[str]  # the awaited type, for async def
    assert hook_asia["recovered"][0] == ["asia1", "asia2"]
    assert hook_asia["recovered"][3] is False  # seen as recovered: not up to date
    assert hook_split["recovered"][0] == merged == [Country("DE", "de"), Country("FR", "fr")]
    assert hook_split["arguments"] == {"codes": ["DE", "ES", "FR"]}
    assert sync["policy"] == [
        {
            "arguments": {"region": region},
            "cause": (Down, (region,)),
            "recovered": None,
            "return_type": list[str],
            "effective_name": "edges.ctx",
        }
        for region in ("eu", "us")
    ]
    assert sync["expired"] == sync["missing"] == ["made"]


# -- a sync failover called on an event loop's thread --------------------------------------------


async def test_a_sync_failover_recovers_inside_a_running_loop(
    engine: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Called from a coroutine, a sync failover blocks the loop (it says so, once) but
    recovers as anywhere: the stale entry, the expired one dropped, scatter slices merged."""
    state = {"down": False}
    codes = codes_of("sync", engine, "edges.inloop", state, ttl="1h")
    countries = countries_of("sync", engine, "edges.inloop.split", state, ttl="1h")
    with caplog.at_level(logging.WARNING, logger="failover"):
        codes("eu")
        countries(["FR"])
        clock.advance(minutes=30)
        t1 = clock()
        codes("asia")
        countries(["DE"])
        clock.advance(minutes=40)  # "eu" and FR expired
        state["down"] = True
        env = codes.referential("asia")
        with pytest.raises(Down) as raised:
            codes("eu")
        merged = countries.referential(["FR", "DE"])
    assert (env.payload, env.as_of, env.up_to_date) == (["asia1", "asia2"], t1, False)
    assert note(raised.value).endswith(f"({EXPIRED})")
    assert engine.store.find("edges.inloop", stored_key(codes, "eu")) is None
    assert (merged.payload, merged.as_of) == ([Country("DE", "de")], t1)
    assert slices(engine, countries) == ["DE"]
    blocking = [r for r in caplog.records if "blocks the loop" in r.getMessage()]
    assert [r.getMessage().split(":")[0] for r in blocking] == [
        "failover 'edges.inloop'",
        "failover 'edges.inloop.split'",
    ]


async def test_sync_and_async_failovers_of_one_domain_recover_together_on_one_loop(
    engine: Failover, clock: FakeClock
) -> None:
    """Async recoveries wait in a batch while a coroutine of the same turn recovers through a
    sync failover of the same domain (it reads in place, on the loop's thread): nobody waits
    for the other, everyone gets their entry."""
    up, sync_up = Rates("async"), Rates("sync")
    arates = rates_of("async", engine, "edges.mix.async", up, domain="edges.mix")
    srates = rates_of("sync", engine, "edges.mix.sync", sync_up, domain="edges.mix")
    times = {}
    for code in range(20):
        times[code] = clock.advance(1)
        await arates(code) if code % 2 else srates(code)
    up.down = sync_up.down = True

    async def through_sync(code: int) -> Any:
        return srates.referential(code)

    got = await asyncio.wait_for(
        asyncio.gather(
            *(arates.referential(c) for c in range(20)),
            *(through_sync(c) for c in range(20)),
        ),
        GUARD,
    )
    for i, out in enumerate(got):
        code = i % 20
        assert (out.payload["code"], out.as_of, out.up_to_date) == (code, times[code], False)
        assert out.payload["by"] == ("async" if code % 2 else "sync")


# -- a store that cannot delete ------------------------------------------------------------------


class ReadOnly(InMemoryStore):
    """A real store whose deletes fail once ``locked`` (a read-only replica, a user without
    DELETE): dropping an expired entry fails; reads and writes work. Declared as doing I/O, so
    that async callers read it through the batcher and drop on a worker."""

    def __init__(self) -> None:
        super().__init__()
        self.locked = False

    @property
    def does_io(self) -> bool:
        return True

    def delete(self, name: str, key: str) -> None:
        if self.locked:
            raise PermissionError("read-only")
        super().delete(name, key)

    def delete_many(self, name: str, keys: Any) -> None:
        if self.locked:
            raise PermissionError("read-only")
        super().delete_many(name, keys)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_drop_of_an_expired_slice_costs_the_caller_nothing(
    kind: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The drop is housekeeping done after the answer: when it fails, the slices found are
    still served, an expired entry is still reported as expired, and the failure is logged."""
    store = ReadOnly()
    engine = Failover(store, clock=clock, metrics=False, async_writes=False, store_timeout=None)
    try:
        state = {"down": False}
        countries = countries_of(kind, engine, f"edges.readonly.{kind}", state, ttl="1h")
        codes = codes_of(kind, engine, f"edges.readonly.codes.{kind}", state, ttl="1h")
        run(kind, countries, ["FR"])
        run(kind, codes, "eu")
        clock.advance(minutes=50)
        t1 = clock()
        run(kind, countries, ["DE"])
        clock.advance(minutes=20)  # FR and "eu" expired
        store.locked = True
        state["down"] = True
        with caplog.at_level(logging.WARNING, logger="failover"):
            got = run(kind, countries.referential, ["FR", "DE"])
            expired = outcome(kind, codes, "eu")
        assert (got.payload, got.as_of) == ([Country("DE", "de")], t1)
        assert isinstance(expired, Down)
        assert note(expired).endswith(f"({EXPIRED})")
        assert any(
            "dropping" in r.getMessage() and r.exc_info is not None for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
        assert codes.peek("eu") is None  # a peek neither serves it nor fails
        store.locked = False
        assert run(kind, countries, ["FR", "DE"]) == [Country("DE", "de")]
        assert slices(engine, countries) == ["DE"]  # dropped, now that it can be
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_recover_all_reads_every_slice_drops_the_expired_and_merges_the_rest(
    kind: str, engine: Failover, clock: FakeClock
) -> None:
    """``recover_all=True``: one ``find_all`` (on a worker for a task), expired slices dropped."""
    state = {"down": False}
    countries = countries_of(kind, engine, f"edges.all.{kind}", state, ttl="1h", recover_all=True)
    run(kind, countries, ["FR"])
    clock.advance(minutes=50)
    t1 = clock()
    run(kind, countries, ["IT", "DE"])
    clock.advance(minutes=20)  # FR expired
    state["down"] = True
    got = run(kind, countries.referential, ["US"])
    assert (got.payload, got.as_of, got.up_to_date) == (
        [Country("DE", "de"), Country("IT", "it")],
        t1,
        False,
    )
    assert slices(engine, countries) == ["DE", "IT"]
    clock.advance(hours=1)  # all expired now
    with pytest.raises(Down) as raised:
        run(kind, countries, ["US"])
    assert note(raised.value).endswith(f"({EXPIRED})")
    assert slices(engine, countries) == []


async def test_entity_and_collection_failovers_of_one_domain_recover_in_one_turn(
    engine: Failover, clock: FakeClock
) -> None:
    """A single-entity failover and a scatter/gather one share their entries (one ``domain``):
    their recoveries of one loop turn read together (point reads and slices in one batch), and
    each gets its own answer, FR expired for both, the others found."""
    state = {"down": False}
    many = countries_of("async", engine, "edges.c.many", state, ttl="1h", domain="edges.c")

    @failover.failover("edges.c.one", domain="edges.c", ttl="1h", engine=engine)
    async def one(code: str) -> Country:
        if state["down"]:
            raise Down(code)
        return Country(code, code.lower())

    await one("FR")
    clock.advance(minutes=50)
    t1 = clock()
    await many(["DE", "IT"])
    await one("US")
    clock.advance(minutes=20)  # FR expired
    state["down"] = True
    got = await asyncio.wait_for(
        asyncio.gather(
            one.referential("DE"),
            many.referential(["US", "FR", "DE"]),
            one.referential("US"),
            many.referential(["IT"]),
            one.referential("ES"),
            return_exceptions=True,
        ),
        GUARD,
    )
    de, merged, us, it, es = got
    assert (de.payload, de.as_of) == (Country("DE", "de"), t1)
    assert (merged.payload, merged.as_of) == ([Country("US", "us"), Country("DE", "de")], t1)
    assert (us.payload, us.as_of) == (Country("US", "us"), t1)
    assert (it.payload, it.as_of) == ([Country("IT", "it")], t1)
    assert isinstance(es, Down)
    assert note(es).endswith(f"({MISSING})")
    assert slices(engine, many) == ["DE", "IT", "US"]  # FR dropped
    with pytest.raises(Down) as raised:
        await one("FR")
    assert note(raised.value).endswith(f"({MISSING})")
