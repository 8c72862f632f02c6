"""The engine's lifecycle and what the decorator accepts, pushed at their edges.

Closing an engine while calls run on other threads and tasks (their live results returned and
stored), the queued writes on disk once `close`/`aclose` returns (a new engine on the same
SQLite file recovers every key), calls after close, `failover.configure()` again while calls
run, a forked child of a process with a queued-writes engine; then each kind of callable the
decorator takes (methods, class and static methods, ``async def`` ones, callable objects,
partials), the spellings of one call that share one entry, and what a decorated callable shows
of the original (signature, name, doc, ``__wrapped__``, the failover's attributes). Sync and
async; real SQLite files; a fake clock; events and joins, no timed sleep."""

from __future__ import annotations

import asyncio
import faulthandler
import functools
import inspect
import json
import os
import select
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.stores import AsyncWriteStore
from failover.stores.backends.sql import SqlStore
from failover.stores.base import Payload, walk

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking

KINDS = ["sync", "async"]


class Down(Exception):
    """The upstream's error."""


def sqlite(tmp_path: Path, name: str = "f.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def configure(url: str, clock: FakeClock) -> Failover:
    """`failover.configure` on the SQLite file at ``url``, its store deadline generous: these
    tests are about calls moving between engines, and a slow disk must not take a store out."""
    return failover.configure(store=url, clock=clock, metrics=False, store_timeout=WAIT)


def recovered(url: str, clock: FakeClock, name: str, codes: Iterable[str]) -> dict[str, Any]:
    """What a new engine on the file at ``url`` recovers for each code, its upstream down
    (``None``: nothing stored). Its store deadline generous: a read past the default 0.5 s
    on a loaded host would be a miss, not what these tests look at."""
    engine = Failover(url, clock=clock, metrics=False, store_timeout=WAIT)
    try:

        @failover.failover(name, engine=engine, ttl="1d", policy="never_throw")
        def reader(code: str) -> Any:
            raise Down(code)

        return {code: reader(code) for code in codes}
    finally:
        engine.close()


def queue_of(engine: Failover) -> AsyncWriteStore:
    """The engine's async-writes layer."""
    return next(s for s in walk(engine.store) if isinstance(s, AsyncWriteStore))


def _run(result: Any) -> Any:
    """A sync call's result, or an async call's, run to its end on a loop of its own."""
    return asyncio.run(result) if inspect.isawaitable(result) else result


class HeldSqlStore(SqlStore):
    """A real SQLite store whose first batch of writes, in the process that made it, waits for
    `gate`: the writes made meanwhile stay queued."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.pid = os.getpid()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def store_many(self, payloads: Sequence[Payload]) -> None:
        if os.getpid() == self.pid and not self.gate.is_set():
            self.entered.set()
            assert self.gate.wait(4 * WAIT), "the test never opened the gate"
        super().store_many(payloads)


# -- close while calls run ------------------------------------------------------------------------


def test_close_while_sync_calls_run_returns_and_stores_their_live_results(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Calls whose upstream is running when another thread closes the engine return their live
    result, and that result is not lost: written in place once the queue is closed (its
    documented behaviour after close), so a new engine on the file recovers it, with the
    writes queued before the close."""
    url = sqlite(tmp_path)
    engine = Failover(url, clock=clock, metrics=False, store_timeout=WAIT)
    up = Blocking()

    @failover.failover("inflight", engine=engine, ttl="1d")
    def get(code: str) -> Any:
        return up(code) if code.startswith("slow") else code

    early = [f"early{i}" for i in range(50)]
    assert [get(code) for code in early] == early
    slow = [f"slow{i}" for i in range(4)]
    with ThreadPoolExecutor(len(slow)) as pool:
        calls = [pool.submit(get, code) for code in slow]
        up.wait_entered(len(slow))
        engine.close()  # does not wait for the callers: their upstreams are theirs
        assert engine.closed
        up.release.set()
        assert [c.result(WAIT) for c in calls] == slow
    assert recovered(url, clock, "inflight", early + slow) == {c: c for c in early + slow}


async def test_aclose_while_tasks_run_returns_and_stores_their_live_results(
    tmp_path: Path, clock: FakeClock
) -> None:
    url = sqlite(tmp_path)
    engine = Failover(url, clock=clock, metrics=False, store_timeout=WAIT)
    up = ABlocking()

    @failover.failover("ainflight", engine=engine, ttl="1d")
    async def get(code: str) -> Any:
        return await up(code) if code.startswith("slow") else code

    early = [f"early{i}" for i in range(50)]
    assert [await get(code) for code in early] == early
    slow = [f"slow{i}" for i in range(4)]
    tasks = [asyncio.create_task(get(code)) for code in slow]
    await up.wait_entered(len(slow))
    await engine.aclose()
    assert engine.closed
    up.release.set()
    assert await asyncio.gather(*tasks) == slow
    found = await asyncio.to_thread(recovered, url, clock, "ainflight", early + slow)
    assert found == {c: c for c in early + slow}


def test_close_twice_at_once_then_aclose_then_calls_after_close(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Close is idempotent, from two threads at once and with an `aclose` after it; afterwards
    `flush` has nothing to wait for, and a call still calls its upstream and is stored in place
    (`AsyncWriteStore.close`: later writes go straight to the store), its entry readable."""
    url = sqlite(tmp_path)
    engine = Failover(url, clock=clock, metrics=False, store_timeout=WAIT)
    calls: list[str] = []

    @failover.failover("after-close", engine=engine, ttl="1d")
    def get(code: str) -> Any:
        calls.append(code)
        return code

    assert get("before") == "before"
    start = threading.Barrier(3)

    def close() -> None:
        start.wait(WAIT)
        engine.close()

    closers = [threading.Thread(target=close) for _ in range(2)]
    for t in closers:
        t.start()
    start.wait(WAIT)
    engine.close()
    for t in closers:
        t.join(WAIT)
        assert not t.is_alive()
    asyncio.run(engine.aclose())
    assert engine.closed
    assert engine.flush(WAIT)
    assert get("after") == "after"
    assert calls == ["before", "after"]
    peeked = get.peek("after")
    assert peeked is not None
    assert peeked.payload == "after"
    engine.close()
    assert recovered(url, clock, "after-close", ["before", "after"]) == {
        "before": "before",
        "after": "after",
    }


@pytest.mark.parametrize("kind", KINDS)
def test_every_queued_write_is_on_disk_once_close_returns(
    kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Writes still queued behind a batch the store is writing when close is called (sync
    callers on three threads, or tasks): close waits for all of them; a new engine on the file
    recovers every key."""
    url = sqlite(tmp_path)
    store = HeldSqlStore(url)
    engine = Failover(store, clock=clock, metrics=False, store_timeout=WAIT)
    assert engine.store is not store  # async writes: on, over the SQLite file

    if kind == "sync":

        @failover.failover("queued", engine=engine, ttl="1d")
        def get(code: str) -> Any:
            return {"code": code}

        get("first")
        assert store.entered.wait(WAIT)  # the worker holds the first batch
        codes = [f"k{i}" for i in range(300)]
        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(get, codes)) == [{"code": c} for c in codes]
    else:

        @failover.failover("queued", engine=engine, ttl="1d")
        async def aget(code: str) -> Any:
            return {"code": code}

        async def calls() -> list[Any]:
            await aget("first")
            assert await asyncio.to_thread(store.entered.wait, WAIT)
            return await asyncio.gather(*(aget(c) for c in codes))

        codes = [f"k{i}" for i in range(300)]
        assert asyncio.run(calls()) == [{"code": c} for c in codes]
    assert queue_of(engine).queued == len(codes)  # all of them wait behind the held batch
    closing = threading.Thread(target=engine.close)
    closing.start()
    store.gate.set()
    closing.join(WAIT)
    assert not closing.is_alive()
    assert queue_of(engine).queued == 0
    found = recovered(url, clock, "queued", ["first", *codes])
    assert found == {c: {"code": c} for c in ["first", *codes]}


async def test_aclose_keeps_the_loop_turning_while_it_flushes(
    tmp_path: Path, clock: FakeClock
) -> None:
    """`aclose` from a loop: while the queue it flushes waits on the database, other tasks of
    the loop run (a call of another engine's failover completes); once the batch is written,
    every queued key is on disk."""
    url = sqlite(tmp_path)
    store = HeldSqlStore(url)
    engine = Failover(store, clock=clock, metrics=False, store_timeout=WAIT)
    other = Failover(clock=clock, metrics=False)

    @failover.failover("aqueued", engine=engine, ttl="1d")
    async def get(code: str) -> Any:
        return code

    @failover.failover("elsewhere", engine=other)
    async def elsewhere(code: str) -> Any:
        await asyncio.sleep(0)
        return code

    await get("first")
    assert await asyncio.to_thread(store.entered.wait, WAIT)
    codes = [f"k{i}" for i in range(100)]
    assert await asyncio.gather(*(get(c) for c in codes)) == codes
    closing = asyncio.create_task(engine.aclose())
    await asyncio.sleep(0)  # aclose starts: the flush is handed to a thread
    assert await elsewhere("x") == "x"  # the loop turns meanwhile
    assert not closing.done()  # the flush waits for the held batch
    store.gate.set()
    await asyncio.wait_for(closing, WAIT)
    assert engine.closed
    other.close()
    found = await asyncio.to_thread(recovered, url, clock, "aqueued", ["first", *codes])
    assert found == {c: c for c in ["first", *codes]}


# -- failover.configure() -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_failover_decorated_before_configure_runs_on_the_engine_configured_later(
    kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Decorated with no default engine at all: the first call runs on the engine configured
    after the decoration (its SQLite file), and so do `.peek` and `.invalidate`."""
    from failover.engine import default as default_engine

    up = {"down": False}

    def value(code: str) -> Any:
        if up["down"]:
            raise Down(code)
        return {"code": code}

    fn: Any
    if kind == "sync":

        @failover.failover("configured-later", ttl="1d")
        def get(code: str) -> Any:
            return value(code)

        fn = get
    else:

        @failover.failover("configured-later", ttl="1d")
        async def aget(code: str) -> Any:
            return value(code)

        fn = aget

    assert default_engine.installed is None
    url = sqlite(tmp_path)
    engine = configure(url, clock)
    assert [d.name for d in engine.definitions()] == ["configured-later"]
    assert _run(fn("FR")) == {"code": "FR"}
    assert engine.flush(WAIT)
    assert recovered(url, clock, "configured-later", ["FR"]) == {"FR": {"code": "FR"}}
    up["down"] = True
    assert _run(fn.referential("FR")).up_to_date is False  # from the configured engine's file
    assert fn.peek("FR") is not None
    fn.invalidate("FR")
    assert fn.peek("FR") is None
    engine.close()
    assert recovered(url, clock, "configured-later", ["FR"]) == {"FR": None}


def test_configure_again_while_sync_calls_run(tmp_path: Path, clock: FakeClock) -> None:
    """Four threads call a failover of the default engine without pause while the engine is
    configured again five times (each on a SQLite file of its own): no call fails, each
    engine replaced is closed, and the calls move to each new engine (a call made after the
    last one is stored in its file)."""
    made = threading.Condition()
    counts = [0] * 4
    errors: list[BaseException] = []
    stop = threading.Event()

    @failover.failover("switching", ttl="1d")
    def get(code: str) -> Any:
        return {"code": code}

    def caller(i: int) -> None:
        while not stop.is_set():
            try:
                assert get(f"c{i}") == {"code": f"c{i}"}
            except BaseException as exc:  # every failure is reported, none ends the test early
                errors.append(exc)
                return
            with made:
                counts[i] += 1
                made.notify_all()

    def calls_made(n: int) -> None:
        """Until each caller made ``n`` more calls (on the engine in force, at the least)."""
        with made:
            target = [c + n for c in counts]
            assert made.wait_for(
                lambda: all(c >= t for c, t in zip(counts, target, strict=True)), WAIT
            )

    engines = [configure(sqlite(tmp_path, "0.db"), clock)]
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        for n in range(1, 6):
            calls_made(3)
            url = sqlite(tmp_path, f"{n}.db")
            engines.append(configure(url, clock))
            assert engines[-2].closed
        calls_made(3)  # on the last engine: each caller made calls after it was installed
    finally:
        stop.set()
        for t in threads:
            t.join(WAIT)
    assert errors == []
    last = engines[-1]
    assert failover.get_engine() is last
    assert not last.closed
    last.close()
    codes = [f"c{i}" for i in range(4)]
    assert recovered(sqlite(tmp_path, "5.db"), clock, "switching", codes) == {
        c: {"code": c} for c in codes
    }


async def test_configure_again_while_tasks_run(tmp_path: Path, clock: FakeClock) -> None:
    """`async def` callers on one loop, mid-call when another thread configures the default
    engine again: no call fails; the calls made after the last configure are stored in its
    SQLite file."""
    errors: list[BaseException] = []
    stop = asyncio.Event()
    counts = [0] * 4

    @failover.failover("aswitching", ttl="1d")
    async def get(code: str) -> Any:
        await asyncio.sleep(0)  # in flight across the loop's turns
        return {"code": code}

    made = asyncio.Condition()

    async def caller(i: int) -> None:
        while not stop.is_set():
            try:
                assert await get(f"c{i}") == {"code": f"c{i}"}
            except BaseException as exc:
                errors.append(exc)
                return
            async with made:
                counts[i] += 1
                made.notify_all()

    async def calls_made(n: int) -> None:
        """Until each caller made ``n`` more calls."""
        target = [c + n for c in counts]
        async with made:
            reached = made.wait_for(
                lambda: all(c >= t for c, t in zip(counts, target, strict=True))
            )
            await asyncio.wait_for(reached, WAIT)

    engines = [configure(sqlite(tmp_path, "0.db"), clock)]
    tasks = [asyncio.create_task(caller(i)) for i in range(4)]
    try:
        for n in range(1, 6):
            await calls_made(3)
            reconfiguring = asyncio.to_thread(configure, sqlite(tmp_path, f"{n}.db"), clock)
            # A hang guard only: on a loaded host, opening a SQLite file while four callers
            # spin on the loop can take seconds (each statement waits for the GIL).
            engines.append(await asyncio.wait_for(reconfiguring, 4 * WAIT))
            assert engines[-2].closed
        await calls_made(3)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    assert errors == []
    engines[-1].close()
    codes = [f"c{i}" for i in range(4)]
    found = await asyncio.to_thread(recovered, sqlite(tmp_path, "5.db"), clock, "aswitching", codes)
    assert found == {c: {"code": c} for c in codes}


# -- os.fork --------------------------------------------------------------------------------------


def _in_child(work: Callable[[], Any]) -> Any:
    """Fork; run ``work`` in the child and return what it returned (or the repr of what it
    raised), read back through a pipe; the child never returns into pytest, and one that has
    not answered within three times `WAIT` is killed (the test fails instead of hanging)."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            try:
                said: Any = ["ok", work()]
            except BaseException as exc:
                said = ["raised", repr(exc)]
                # Where the child's threads were, on the test's captured stderr: a lock held
                # by a parent's thread at the fork shows up here.
                faulthandler.dump_traceback(all_threads=True)
            os.write(writing, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(writing)
    try:
        ready, _, _ = select.select([reading], [], [], 3 * WAIT)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        with os.fdopen(reading) as pipe:
            text = pipe.read()
    finally:
        os.waitpid(pid, 0)
    assert ready, "the child never answered"
    return json.loads(text)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_writes_through_a_queue_of_its_own(tmp_path: Path, clock: FakeClock) -> None:
    """A preforking server's worker forked after the parent's queue started its worker thread:
    that thread did not come along, and the child's writes are still written (its flush ends,
    a new engine on the file recovers them)."""
    url = sqlite(tmp_path)
    engine = Failover(url, clock=clock, metrics=False, store_timeout=WAIT)

    @failover.failover("forked", engine=engine, ttl="1d")
    def get(code: str) -> Any:
        return {"code": code}

    get("parent")
    assert engine.flush(WAIT)

    def child() -> Any:
        answer = get("child")
        return [answer, engine.flush(WAIT)]

    assert _in_child(child) == ["ok", [{"code": "child"}, True]]
    get("parent-after")
    engine.close()
    assert recovered(url, clock, "forked", ["parent", "child", "parent-after"]) == {
        c: {"code": c} for c in ["parent", "child", "parent-after"]
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_child_forked_while_the_parent_writes_a_batch_writes_its_own(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Forked while the parent's worker is inside a batch (its I/O lock held) and more writes
    wait in its queue: the child neither waits for that lock nor writes the parent's queued
    writes (the parent does); its own write lands, and so do all of the parent's."""
    url = sqlite(tmp_path)
    store = HeldSqlStore(url)
    engine = Failover(store, clock=clock, metrics=False, store_timeout=WAIT)

    @failover.failover("forked-busy", engine=engine, ttl="1d")
    def get(code: str) -> Any:
        return {"code": code}

    get("held")
    assert store.entered.wait(WAIT)  # the parent's worker is inside its first batch
    queued = [f"q{i}" for i in range(20)]
    for code in queued:
        get(code)

    def child() -> Any:
        answer = get("child")
        flushed = engine.flush(WAIT)
        return [answer, flushed, queue_of(engine).queued]

    assert _in_child(child) == ["ok", [{"code": "child"}, True, 0]]
    store.gate.set()
    engine.close()
    codes = ["held", *queued, "child"]
    assert recovered(url, clock, "forked-busy", codes) == {c: {"code": c} for c in codes}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_runs_soft_timeout_calls_on_threads_of_its_own(clock: FakeClock) -> None:
    """A soft timeout's pool started in the parent: its threads did not come along, and a
    child's call runs on threads of the child's instead of waiting out its timeout."""
    engine = Failover(clock=clock, metrics=False)

    @failover.failover("forked-timeout", engine=engine, timeout=WAIT)
    def get(code: str) -> Any:
        return code

    assert get("parent") == "parent"  # the pool's first thread started here

    def child() -> Any:
        answer = get("child")
        return [answer, engine.refreshes.wait(WAIT)]

    assert _in_child(child) == ["ok", ["child", True]]
    assert get("parent-after") == "parent-after"
    engine.close()


# -- what the decorator accepts: one entry per call, however it is spelled -------------------------


def _shapes(kind: str, engine: Failover, value: Callable[..., Any]) -> dict[str, Any]:
    """Failovers over the parameter shapes: positional-only, keyword-only with defaults, and
    ``*args``/``**kwargs``; sync or ``async def``, each returning ``value`` of its arguments."""
    if kind == "sync":

        @failover.failover("shapes.lookup", engine=engine, ttl="1d")
        def lookup(code: str, /, lang: str = "en", *, region: str = "eu") -> Any:
            return value(code, lang, region)

        @failover.failover("shapes.search", engine=engine, ttl="1d")
        def search(term: str, *filters: str, limit: int = 10, **options: Any) -> Any:
            return value(term, filters, limit, options)

        return {"lookup": lookup, "search": search}

    @failover.failover("shapes.lookup", engine=engine, ttl="1d")
    async def alookup(code: str, /, lang: str = "en", *, region: str = "eu") -> Any:
        return value(code, lang, region)

    @failover.failover("shapes.search", engine=engine, ttl="1d")
    async def asearch(term: str, *filters: str, limit: int = 10, **options: Any) -> Any:
        return value(term, filters, limit, options)

    return {"lookup": alookup, "search": asearch}


Spelling = tuple[tuple[Any, ...], dict[str, Any]]
SAME: dict[str, list[Spelling]] = {
    "lookup": [
        (("FR",), {}),
        (("FR", "en"), {}),
        (("FR",), {"lang": "en"}),
        (("FR",), {"region": "eu"}),
        (("FR", "en"), {"region": "eu"}),
        (("FR",), {"region": "eu", "lang": "en"}),
    ],
    "search": [
        (("x",), {"a": 1, "b": 2}),
        (("x",), {"b": 2, "a": 1}),
        ((), {"term": "x", "a": 1, "b": 2}),
        (("x",), {"limit": 10, "a": 1, "b": 2}),
        ((), {"b": 2, "limit": 10, "term": "x", "a": 1}),
    ],
}
OTHERS: dict[str, list[Spelling]] = {
    "lookup": [(("FR", "fr"), {}), (("FR",), {"region": "us"}), (("DE",), {})],
    "search": [
        (("x", "f"), {"a": 1, "b": 2}),  # a positional extra is not a keyword
        (("x",), {"a": 1}),
        (("x",), {"a": 1, "b": 2, "limit": 5}),
        (("x",), {"a": "1", "b": 2}),
    ],
}


@pytest.mark.parametrize("shape", sorted(SAME))
@pytest.mark.parametrize("kind", KINDS)
def test_spellings_of_one_call_share_one_entry(
    kind: str, shape: str, engine: Failover, clock: FakeClock
) -> None:
    """Positional or keyword, a default given or left out, keyword arguments in any order: one
    stored entry, which every spelling recovers and peeks; other arguments have their own."""
    state = {"down": False}

    def value(*args: Any) -> Any:
        if state["down"]:
            raise Down()
        return repr(args)

    fn = _shapes(kind, engine, value)[shape]

    def call(spelling: Spelling) -> Any:
        args, kwargs = spelling
        if kind == "sync":
            return fn.referential(*args, **kwargs)
        return asyncio.run(fn.referential(*args, **kwargs))

    first = call(SAME[shape][0])
    assert first.up_to_date
    name = fn.definition.name
    assert len(engine.raw_store.find_all(name)) == 1
    state["down"] = True
    clock.advance(60)
    for spelling in SAME[shape]:
        answer = call(spelling)
        assert (answer.payload, answer.up_to_date, answer.key) == (first.payload, False, first.key)
        peeked = fn.peek(*spelling[0], **spelling[1])
        assert peeked is not None
        assert peeked.key == first.key
    for spelling in OTHERS[shape]:
        assert fn.peek(*spelling[0], **spelling[1]) is None, spelling
        with pytest.raises(Down):
            call(spelling)
    fn.invalidate(*SAME[shape][-1][0], **SAME[shape][-1][1])
    assert engine.raw_store.find_all(name) == []


# -- what the decorator accepts: methods, callable objects, partials -----------------------------


def _service(engine: Failover, up: dict[str, bool]) -> type:
    """A class whose instance, class, static and ``async def`` methods are failovers."""

    def value(*args: Any) -> Any:
        if up.get("down"):
            raise Down()
        return list(args)

    class Service:
        def __init__(self, tag: str) -> None:
            self.tag = tag  # differs between instances; not part of any key

        @failover.failover("svc.method", engine=engine, ttl="1d")
        def method(self, code: str, lang: str = "en") -> Any:
            """Method doc."""
            return value("method", self.tag, code, lang)

        @failover.failover("svc.amethod", engine=engine, ttl="1d")
        async def amethod(self, code: str, lang: str = "en") -> Any:
            """Async method doc."""
            return value("amethod", self.tag, code, lang)

        @failover.failover("svc.klass", engine=engine, ttl="1d")
        @classmethod
        def klass(cls, code: str, lang: str = "en") -> Any:
            """Class method doc."""
            return value("klass", cls.__name__, code, lang)

        @failover.failover("svc.aklass", engine=engine, ttl="1d")
        @classmethod
        async def aklass(cls, code: str, lang: str = "en") -> Any:
            """Async class method doc."""
            return value("aklass", cls.__name__, code, lang)

        @failover.failover("svc.static", engine=engine, ttl="1d")
        @staticmethod
        def static(code: str, lang: str = "en") -> Any:
            """Static method doc."""
            return value("static", code, lang)

        @failover.failover("svc.astatic", engine=engine, ttl="1d")
        @staticmethod
        async def astatic(code: str, lang: str = "en") -> Any:
            """Async static method doc."""
            return value("astatic", code, lang)

    return Service


METHODS = ["method", "amethod", "klass", "aklass", "static", "astatic"]


@pytest.mark.parametrize("attribute", METHODS)
def test_methods_share_entries_across_instances_as_keys_md_says(
    attribute: str, engine: Failover, clock: FakeClock
) -> None:
    """docs/keys.md: ``self``/``cls`` are left out of the key, so instances (and the class)
    share a method's entries: a value stored through one instance is recovered, peeked and
    invalidated through another, whatever the spelling of the arguments."""
    up: dict[str, bool] = {}
    service = _service(engine, up)
    a, b = service("a"), service("b")
    first = _run(getattr(a, attribute).referential("FR"))
    assert first.up_to_date
    up["down"] = True
    instance_only = attribute in ("method", "amethod")
    for owner in (b,) if instance_only else (b, service):
        bound = getattr(owner, attribute)
        for args, kwargs in ((("FR",), {}), (("FR", "en"), {}), ((), {"code": "FR"})):
            answer = _run(bound.referential(*args, **kwargs))
            assert (answer.payload, answer.up_to_date, answer.key) == (
                first.payload,
                False,
                first.key,
            )
            assert _run(bound(*args, **kwargs)) == first.payload
            peeked = bound.peek(*args, **kwargs)
            assert peeked is not None
            assert peeked.key == first.key
    if instance_only:  # through the class, the instance is passed along
        unbound = getattr(service, attribute)
        assert _run(unbound(b, "FR")) == first.payload
        assert unbound.peek(b, code="FR") is not None
    getattr(b, attribute).invalidate(code="FR")
    assert getattr(a, attribute).peek("FR") is None
    with pytest.raises(Down):
        _run(getattr(a, attribute)("FR"))


class Pricer:
    """A callable object (sync)."""

    def __init__(self, up: dict[str, bool]) -> None:
        self.up = up

    def __call__(self, sku: str, qty: int = 1) -> Any:
        if self.up.get("down"):
            raise Down()
        return {"sku": sku, "qty": qty}


class APricer(Pricer):
    """A callable object with an ``async def __call__``."""

    async def __call__(self, sku: str, qty: int = 1) -> Any:  # type: ignore[override]
        return super().__call__(sku, qty)


class Quotes:
    """A service whose bound methods are partial'd: ``partial(quotes.quote, "EUR")``."""

    def __init__(self, up: dict[str, bool]) -> None:
        self.up = up

    def quote(self, currency: str, sku: str, qty: int = 1) -> Any:
        if self.up.get("down"):
            raise Down()
        return {"currency": currency, "sku": sku, "qty": qty}

    async def aquote(self, currency: str, sku: str, qty: int = 1) -> Any:
        return self.quote(currency, sku, qty)


CALLABLES = ["object", "async-object", "partial", "async-partial"]


def _callable(which: str, up: dict[str, bool]) -> Any:
    if which == "object":
        return Pricer(up)
    if which == "async-object":
        return APricer(up)
    quotes = Quotes(up)
    return functools.partial(quotes.quote if which == "partial" else quotes.aquote, "EUR")


@pytest.mark.parametrize("which", CALLABLES)
def test_callable_objects_and_partials_need_a_name_then_work_as_functions(
    which: str, engine: Failover
) -> None:
    """A callable object or a partial has no stable qualified name: ``name=`` is required (a
    `ConfigurationError` says so); with it, it is a failover like a function, sync or async
    as its call is, its spellings sharing one entry."""
    up: dict[str, bool] = {}
    target = _callable(which, up)
    with pytest.raises(failover.ConfigurationError, match="pass name="):
        failover.failover(engine=engine)(target)
    fn = failover.failover(f"callable.{which}", engine=engine, ttl="1d")(target)
    assert fn.definition.is_async == which.startswith("async")
    assert inspect.iscoroutinefunction(fn) == which.startswith("async")
    first = _run(fn.referential("sku1"))
    assert first.up_to_date
    up["down"] = True
    for args, kwargs in ((("sku1",), {}), (("sku1", 1), {}), ((), {"sku": "sku1", "qty": 1})):
        answer = _run(fn.referential(*args, **kwargs))
        assert (answer.payload, answer.up_to_date, answer.key) == (first.payload, False, first.key)
        peeked = fn.peek(*args, **kwargs)
        assert peeked is not None
    with pytest.raises(Down):
        _run(fn("sku1", 2))
    fn.invalidate(sku="sku1")
    assert fn.peek("sku1") is None


# -- what a decorated callable shows of the original ----------------------------------------------


def _twins(engine: Failover) -> tuple[type, type]:
    """The same class twice: plain, and with every method a failover."""

    class Plain:
        def method(self, code: str, lang: str = "en") -> str:
            """Method doc."""
            return code

        async def amethod(self, code: str, *, lang: str = "en") -> str:
            """Async method doc."""
            return code

        @classmethod
        def klass(cls, code: str, /, lang: str = "en") -> str:
            """Class method doc."""
            return code

        @classmethod
        async def aklass(cls, code: str, *rest: str) -> str:
            """Async class method doc."""
            return code

        @staticmethod
        def static(code: str, **extra: Any) -> str:
            """Static method doc."""
            return code

        @staticmethod
        async def astatic(code: str) -> str:
            """Async static method doc."""
            return code

    class Decorated:
        @failover.failover("twin.method", engine=engine)
        def method(self, code: str, lang: str = "en") -> str:
            """Method doc."""
            return code

        @failover.failover("twin.amethod", engine=engine)
        async def amethod(self, code: str, *, lang: str = "en") -> str:
            """Async method doc."""
            return code

        @failover.failover("twin.klass", engine=engine)
        @classmethod
        def klass(cls, code: str, /, lang: str = "en") -> str:
            """Class method doc."""
            return code

        @failover.failover("twin.aklass", engine=engine)
        @classmethod
        async def aklass(cls, code: str, *rest: str) -> str:
            """Async class method doc."""
            return code

        @failover.failover("twin.static", engine=engine)
        @staticmethod
        def static(code: str, **extra: Any) -> str:
            """Static method doc."""
            return code

        @failover.failover("twin.astatic", engine=engine)
        @staticmethod
        async def astatic(code: str) -> str:
            """Async static method doc."""
            return code

    return Plain, Decorated


@pytest.mark.parametrize("attribute", METHODS)
@pytest.mark.parametrize("through", ["instance", "class"])
def test_a_decorated_method_shows_what_the_plain_method_shows(
    attribute: str, through: str, engine: Failover
) -> None:
    """Reached through an instance or through the class, a decorated method has the plain
    method's signature, name, qualified name (but for the class), doc, module and
    coroutine-ness, a ``__wrapped__`` leading to the original function, and the failover's
    attributes, sync and async alike."""
    plain_class, decorated_class = _twins(engine)
    plain = getattr(plain_class() if through == "instance" else plain_class, attribute)
    decorated = getattr(decorated_class() if through == "instance" else decorated_class, attribute)
    assert inspect.signature(decorated) == inspect.signature(plain)
    assert decorated.__name__ == plain.__name__ == attribute
    assert decorated.__qualname__ == f"{decorated_class.__qualname__}.{attribute}"
    assert decorated.__doc__ == plain.__doc__
    assert decorated.__module__ == plain.__module__ == __name__
    assert inspect.iscoroutinefunction(decorated) == inspect.iscoroutinefunction(plain)
    original = inspect.unwrap(decorated)
    assert original.__qualname__ == decorated.__qualname__
    assert original is not decorated
    assert not hasattr(original, "definition")  # the function as written, not a failover
    for name in ("referential", "peek", "invalidate", "definition"):
        assert hasattr(decorated, name), name
    assert decorated.definition.name == f"twin.{attribute}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_decorated_function_shows_what_the_original_shows(kind: str, engine: Failover) -> None:
    """Every parameter shape at once; sync and async; the failover's attributes are callables
    with the function's own parameters (``.referential`` awaitable for an async one)."""

    def plain(a: int, /, b: str = "x", *args: float, c: bool, d: None = None, **kw: Any) -> str:
        """Every shape."""
        return f"{a}{b}{args}{c}{d}{kw}"

    async def aplain(
        a: int, /, b: str = "x", *args: float, c: bool, d: None = None, **kw: Any
    ) -> str:
        """Every shape."""
        return plain(a, b, *args, c=c, d=d, **kw)

    original = plain if kind == "sync" else aplain
    fn = failover.failover(f"shows.{kind}", engine=engine)(original)
    assert inspect.signature(fn) == inspect.signature(original)
    assert fn.__wrapped__ is original  # type: ignore[attr-defined]
    assert (fn.__name__, fn.__qualname__, fn.__doc__, fn.__module__) == (
        original.__name__,
        original.__qualname__,
        original.__doc__,
        original.__module__,
    )
    assert inspect.iscoroutinefunction(fn) == (kind == "async")
    assert inspect.iscoroutinefunction(fn.referential) == (kind == "async")
    assert not inspect.iscoroutinefunction(fn.peek)  # synchronous for every function
    value = _run(fn(1, "y", 2.0, c=True, e=3))
    assert value == plain(1, "y", 2.0, c=True, e=3)
    peeked = fn.peek(1, "y", 2.0, c=True, d=None, e=3)
    assert peeked is not None
    assert peeked.payload == value
    fn.invalidate(1, "y", 2.0, c=True, e=3)
    assert fn.peek(1, "y", 2.0, c=True, e=3) is None
