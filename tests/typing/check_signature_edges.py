"""Checked by ``mypy --strict`` (``make types``), never run: the decorator keeps every kind of
signature, sync and async, on functions and methods, and refuses wrong calls and settings."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar, assert_type

import failover
from failover import Failover, ReferentialPayload

T = TypeVar("T")


# -- parameter kinds, each form of the decorator ----------------------------------------------


@failover.failover
def kinds(a: int, /, b: str, *, c: bool = False) -> float:
    return 1.0


@failover.failover("varargs")
def varargs(head: str, *rest: int, **extra: bytes) -> tuple[int, ...]:
    return rest


@failover.failover("opts", ttl="1h")
def with_options(x: int = 0) -> str:
    return str(x)


@failover.failover(name="named")
def by_keyword(x: int) -> bytes:
    return b""


@failover.failover(ttl=60, policy="never_throw", single_flight=True)
def unnamed_options(x: int) -> int:
    return x


# -- generics, optional and union results ------------------------------------------------------


# A sync generic function (``def first(items: list[T]) -> T``) is not covered: the async
# overload matches it first, with ``T`` solved as a coroutine (a known limitation).


@failover.failover("first")
async def first(items: list[T]) -> T:
    return items[0]


@failover.failover("maybe")
def maybe(x: int) -> str | None:
    return None


@failover.failover("either")
async def either(x: int) -> int | str:
    return x


# -- async ---------------------------------------------------------------------------------


@failover.failover
async def afetch(a: int, /, *, b: str = "") -> list[int]:
    return [a]


@failover.failover("afetch.named", ttl="15m")
async def afetch_named(x: str) -> dict[str, int]:
    return {}


# -- methods -------------------------------------------------------------------------------


class Repo:
    @failover.failover("repo.get")
    def get(self, code: str, *, fresh: bool = False) -> int:
        return 1

    @failover.failover("repo.aget")
    async def aget(self, code: str) -> bytes:
        return b""

    @failover.failover("repo.make")
    @classmethod
    def make(cls, n: int) -> str:
        return ""

    @failover.failover("repo.static")
    @staticmethod
    def static(n: int) -> float:
        return 0.0


async def check() -> None:
    assert_type(kinds(1, "b"), float)
    assert_type(kinds(1, b="b", c=True), float)
    assert_type(kinds.referential(1, "b"), ReferentialPayload[float])
    assert_type(kinds.peek(1, b="b"), ReferentialPayload[float] | None)
    assert_type(kinds.invalidate(1, "b", c=False), None)
    assert_type(varargs("h"), tuple[int, ...])
    assert_type(varargs("h", 1, 2, z=b""), tuple[int, ...])
    assert_type(varargs.referential("h", 1, z=b""), ReferentialPayload[tuple[int, ...]])
    assert_type(with_options(), str)
    assert_type(with_options.peek(x=1), ReferentialPayload[str] | None)
    assert_type(by_keyword(1), bytes)
    assert_type(unnamed_options(1), int)

    assert_type(await first([1, 2]), int)
    assert_type(await first(["a"]), str)
    assert_type(await first.referential([1.0]), ReferentialPayload[float])
    assert_type(maybe(1), str | None)
    assert_type(maybe.referential(1), ReferentialPayload[str | None])
    assert_type(await either(1), int | str)
    assert_type(await either.referential(1), ReferentialPayload[int | str])

    call = afetch(1)
    _ = assert_type(call, Coroutine[Any, Any, list[int]])
    assert_type(await call, list[int])
    assert_type(await afetch(1, b="x"), list[int])
    envelope = afetch.referential(1)
    _ = assert_type(envelope, Coroutine[Any, Any, ReferentialPayload[list[int]]])
    assert_type(await envelope, ReferentialPayload[list[int]])
    assert_type(await afetch.referential(1), ReferentialPayload[list[int]])
    assert_type(afetch.peek(1, b="x"), ReferentialPayload[list[int]] | None)
    assert_type(afetch.invalidate(1), None)
    assert_type(await afetch_named("x"), dict[str, int])

    repo = Repo()
    assert_type(repo.get("x"), int)
    assert_type(repo.get("x", fresh=True), int)
    assert_type(repo.get.referential("x"), ReferentialPayload[int])
    assert_type(repo.get.peek("x"), ReferentialPayload[int] | None)
    assert_type(repo.get.invalidate("x"), None)
    assert_type(Repo.get(repo, "x"), int)
    assert_type(await repo.aget("x"), bytes)
    assert_type(await repo.aget.referential("x"), ReferentialPayload[bytes])
    assert_type(repo.aget.peek("x"), ReferentialPayload[bytes] | None)
    assert_type(repo.make(1), str)
    assert_type(Repo.static(1), float)
    assert_type(repo.static(1), float)


async def refused() -> None:
    kinds(a=1, b="b")  # type: ignore[call-arg]
    kinds(1, "b", True)  # type: ignore[call-arg]
    kinds("1", "b")  # type: ignore[arg-type]
    kinds(1)  # type: ignore[call-arg]
    kinds.referential(1, b=2)  # type: ignore[arg-type]
    kinds.peek()  # type: ignore[call-arg]
    kinds.invalidate(1, "b", d=1)  # type: ignore[call-arg]
    varargs("h", "not an int")  # type: ignore[arg-type]
    varargs("h", z="not bytes")  # type: ignore[arg-type]
    by_keyword("1")  # type: ignore[arg-type]
    maybe.peek("1")  # type: ignore[arg-type]
    await afetch("1")  # type: ignore[arg-type]
    await afetch.referential(1, c=1)  # type: ignore[call-arg]
    afetch.invalidate()  # type: ignore[call-arg]
    repo = Repo()
    Repo.get(repo, 1)  # type: ignore[arg-type]
    Repo.get(repo)  # type: ignore[call-arg]
    Repo.get.referential(repo, 1)  # type: ignore[arg-type]
    await Repo.aget(repo, 2)  # type: ignore[arg-type]
    Repo.static("1")  # type: ignore[arg-type]
    _: str = kinds(1, "b")  # type: ignore[assignment]


# -- settings ------------------------------------------------------------------------------

failover.failover("typo", tll="1h")  # type: ignore[call-overload]
failover.failover("wrong", ttl=[1])  # type: ignore[call-overload]
failover.failover("wrong", single_flight="yes")  # type: ignore[call-overload]
failover.failover(name="wrong", ttl=[1])  # type: ignore[call-overload]
failover.failover(3)  # type: ignore[call-overload]
Failover(stor="memory://")  # type: ignore[call-arg]
Failover("memory://", enabeld=False)  # type: ignore[call-arg]
Failover("memory://", timeout_workers="16")  # type: ignore[arg-type]
