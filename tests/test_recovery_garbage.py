"""A recovered call leaves no reference cycle behind: the cause's traceback holds the shell's
frame, so a local of that frame holding the envelope (which holds the cause) made one cycle per
recovery, freed only by the garbage collector (its passes cost the recovery path about a tenth
of its instructions)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

import failover
from failover import Failover

from .conftest import FakeClock


class Down(Exception):
    """The upstream's error."""


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_recovered_value_leaves_no_cycle(kind: str, clock: FakeClock, no_gc: None) -> None:
    engine = Failover(clock=clock)
    down: list[int] = []
    try:
        if kind == "sync":

            @failover.failover("garbage", engine=engine)
            def fetch(code: str) -> dict[str, object]:
                if down:
                    raise Down(code)
                return {"code": code, "currencies": ["EUR"]}

            def call(code: str) -> object:
                return fetch(code)
        else:

            @failover.failover("garbage", engine=engine)
            async def afetch(code: str) -> dict[str, object]:
                if down:
                    raise Down(code)
                return {"code": code, "currencies": ["EUR"]}

            loop = asyncio.new_event_loop()

            def call(code: str) -> object:
                return loop.run_until_complete(afetch(code))

        assert call("FR") == {"code": "FR", "currencies": ["EUR"]}
        down.append(1)
        assert call("FR") == {"code": "FR", "currencies": ["EUR"]}  # warm: recovered once
        gc.collect()
        for _ in range(10):
            assert call("FR") == {"code": "FR", "currencies": ["EUR"]}
        assert gc.collect() == 0
        if kind == "async":
            loop.close()
    finally:
        engine.close()
