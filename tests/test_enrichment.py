"""Values that carry their own freshness get it set, live and recovered."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import pytest

import failover
from failover import Failover, Referential, ReferentialAware

from .conftest import FakeClock, Upstream


class Country(Referential):
    def __init__(self, code: str) -> None:
        self.code = code


class Aware:
    """Not a subclass: matches the ReferentialAware protocol by its attributes."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.up_to_date = False
        self.as_of: datetime | None = None


@dataclass(frozen=True)
class FrozenRate:
    value: float
    up_to_date: bool = True
    as_of: datetime | None = None


def run(engine: Failover, clock: FakeClock, upstream: Upstream, make: object, name: str) -> None:
    @failover.failover(name, engine=engine)
    def f() -> object:
        return upstream(make)

    upstream.recover()
    live = f()
    assert (live.up_to_date, live.as_of) == (True, clock())  # type: ignore[attr-defined]
    stored_at = clock()
    clock.advance(30)
    upstream.fail()
    stale = f()
    assert (stale.up_to_date, stale.as_of) == (False, stored_at)  # type: ignore[attr-defined]


def test_referential_mixin(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    run(engine, clock, upstream, Country("FR"), "mixin")


def test_referential_aware_protocol(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    assert isinstance(Aware("x"), ReferentialAware)
    run(engine, clock, upstream, Aware("FR"), "protocol")


def test_frozen_dataclass_gets_a_copy(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    original = FrozenRate(1.5)
    run(engine, clock, upstream, original, "frozen")
    assert original.as_of is None  # the caller's object was never mutated


def test_pydantic_models(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Mutable(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        code: str
        up_to_date: bool = True
        as_of: datetime | None = None

    class Frozen(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        model_config = pydantic.ConfigDict(frozen=True)
        code: str
        up_to_date: bool = True
        as_of: datetime | None = None

    run(engine, clock, upstream, Mutable(code="FR"), "pyd-mutable")
    run(engine, clock, upstream, Frozen(code="FR"), "pyd-frozen")


def test_plain_values_are_untouched(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("plain", engine=engine)
    def f() -> dict[str, str]:
        return upstream({"up_to_date": "not mine"})  # type: ignore[return-value]

    assert f() == {"up_to_date": "not mine"}


def test_fast_envelopes_are_ordinary_frozen_payloads() -> None:
    import dataclasses
    import pickle

    from failover.payload import envelope

    fast = envelope("n", "k", [1], None, None, True)
    slow = failover.ReferentialPayload("n", "k", [1], None, None, True)
    assert type(fast) is failover.ReferentialPayload
    assert fast == slow
    assert repr(fast) == repr(slow)
    assert pickle.loads(pickle.dumps(fast)) == slow
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.name = "other"  # type: ignore[misc]
    assert dataclasses.replace(fast, up_to_date=False).up_to_date is False


def test_every_fast_envelope_builder_sets_every_field(clock: FakeClock) -> None:
    """The hot paths build envelopes slot by slot (`payload.envelope`, `copying.copied`, the
    default handler's stored entry): each sets every field, so a field added to
    `ReferentialPayload` and forgotten by one of them fails here, not in a caller's hands."""
    import dataclasses

    from failover.payload import Building, envelope
    from failover.stores.layers.copying import copied

    fields = [f.name for f in dataclasses.fields(failover.ReferentialPayload)]
    assert sorted(Building.__slots__) == sorted(fields)

    class Kept(failover.InMemoryStore):
        isolating = True  # no copying layer in front: this sees the handler's own envelope

        def __init__(self) -> None:
            super().__init__()
            self.given: list[failover.ReferentialPayload[object]] = []

        def store(self, payload: failover.ReferentialPayload[object]) -> None:
            self.given.append(payload)
            super().store(payload)

    kept = Kept()
    engine = Failover(kept, clock=clock, metrics=False)

    @failover.failover("fields", engine=engine, label=True, ttl="1h")
    def f(code: str) -> dict[str, str]:
        return {"code": code}

    f("FR")
    (stored,) = kept.given
    built = [
        stored,
        envelope("n", "k", {"a": 1}, clock(), None, False, ValueError("x"), "label"),
        copied(stored),
    ]
    for payload in built:
        assert type(payload) is failover.ReferentialPayload
        values = {name: getattr(payload, name) for name in fields}  # none unset
        assert payload == failover.ReferentialPayload(**values)
    assert stored.label == "f(code='FR')"
    assert copied(stored) == stored
    engine.close()


def test_the_first_instance_of_a_type_does_not_decide_for_the_others(
    engine: Failover, clock: FakeClock
) -> None:
    from types import SimpleNamespace

    results = iter(
        [
            SimpleNamespace(code="FR"),  # plain: no freshness attributes
            SimpleNamespace(code="DE", up_to_date=False, as_of=None),  # aware
            SimpleNamespace(code="IT"),  # plain again
        ]
    )

    @failover.failover("namespaces", engine=engine)
    def f(code: str) -> SimpleNamespace:
        return next(results)

    assert not hasattr(f("FR"), "up_to_date")
    aware = f("DE")
    assert (aware.up_to_date, aware.as_of) == (True, clock())
    assert not hasattr(f("IT"), "up_to_date")  # never given fields it does not have


@dataclass(frozen=True)
class FrozenCountry(Referential):
    code: str


class NamedRate(NamedTuple):
    value: float
    up_to_date: bool = True
    as_of: datetime | None = None


def test_frozen_dataclass_with_the_mixin(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    original = FrozenCountry("FR")
    run(engine, clock, upstream, original, "frozen-mixin")
    assert (original.up_to_date, original.as_of) == (True, None)  # the class defaults


def test_named_tuple_gets_a_copy(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    original = NamedRate(1.5)
    run(engine, clock, upstream, original, "named-tuple")
    assert original.as_of is None


class FrozenByHand(Referential):
    """Immutable the way attrs' frozen classes are: ``__setattr__`` refuses."""

    __slots__ = ("as_of", "code", "up_to_date")

    def __init__(self, code: str) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "up_to_date", True)
        object.__setattr__(self, "as_of", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __reduce__(self) -> tuple[object, ...]:  # copyable, as attrs makes its classes
        return _rebuild, (self.code, self.up_to_date, self.as_of)


def _rebuild(code: str, up_to_date: bool, as_of: datetime | None) -> FrozenByHand:
    value = FrozenByHand(code)
    object.__setattr__(value, "up_to_date", up_to_date)
    object.__setattr__(value, "as_of", as_of)
    return value


class ReadOnly:
    """Declares the fields as read-only properties: it cannot carry the call's freshness."""

    up_to_date = property(lambda self: True)
    as_of = property(lambda self: None)


def test_a_value_refusing_setattr_gets_a_copy(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    # Before: every live call of such a type raised, although the upstream answered.
    original = FrozenByHand("FR")
    run(engine, clock, upstream, original, "frozen-by-hand")
    assert (original.up_to_date, original.as_of) == (True, None)


def test_a_value_that_cannot_carry_freshness_passes_unchanged(engine: Failover) -> None:
    value = ReadOnly()

    @failover.failover("read-only", engine=engine)
    def f() -> ReadOnly:
        return value

    assert f() is value
    assert f.referential().up_to_date
