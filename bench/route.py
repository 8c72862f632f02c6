"""The route of one decorated call through failover's modules, as it runs.

Run with ``.venv/bin/python bench/route.py``. For the success path (sync and ``async def``) and
the recover path (the upstream raises, the entry is found), one warm call is traced with
``sys.setprofile``; every change of the running module of ``failover/`` (a call into a module,
or a return to one) is one move. It prints how many modules the call enters, its moves, and
how many of those come back to a module it had already left (fewer: a call whose code reads
from top to bottom), then the route itself. It measures the layout, not speed; the figures
are in ``docs/architecture.md``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import failover

ROOT = os.path.dirname(failover.__file__)


def country(code: str) -> dict[str, str]:
    return {"code": code, "name": "Ruritania"}


def broken(code: str) -> dict[str, str]:
    raise ConnectionError("upstream down")


async def acountry(code: str) -> dict[str, str]:
    return {"code": code, "name": "Ruritania"}


def route(fn: Callable[[str], Any], arg: str, is_async: bool) -> list[str]:
    """The modules of ``failover/`` one warm call of ``fn(arg)`` runs in, in order."""
    moves: list[str] = []

    def profile(frame: FrameType, event: str, _: object) -> None:
        if event not in ("call", "return"):
            return
        running = frame if event == "call" else frame.f_back  # a return runs its caller again
        path = running.f_code.co_filename if running is not None else ""
        if path.startswith(ROOT):
            module = os.path.relpath(path, ROOT)
            if not moves or moves[-1] != module:
                moves.append(module)

    if is_async:
        loop = asyncio.new_event_loop()

        async def traced() -> None:
            sys.setprofile(profile)
            try:
                await fn(arg)
            finally:
                sys.setprofile(None)

        loop.run_until_complete(fn(arg))  # warm: the runtime made, the key memoised
        loop.run_until_complete(traced())
        loop.close()
    else:
        fn(arg)
        sys.setprofile(profile)
        try:
            fn(arg)
        finally:
            sys.setprofile(None)
    return moves


def main() -> None:
    engine = failover.Failover("memory://", metrics=False)
    ok = failover.failover("route.ok", engine=engine)(country)
    filling = failover.failover("route.country", domain="route", engine=engine)(country)
    failing = failover.failover("route.broken", domain="route", engine=engine)(broken)
    aok = failover.failover("route.async", engine=engine)(acountry)
    filling("FR")  # the entry the failing call recovers
    print("| path | modules | moves | returns to a module already left |")
    print("|---|---:|---:|---:|")
    routes = []
    for label, fn, is_async in (
        ("success", ok, False),
        ("async success", aok, True),
        ("recover (entry found)", failing, False),
    ):
        moves = route(fn, "FR", is_async)
        back = sum(1 for i, m in enumerate(moves) if m in moves[:i])
        print(f"| {label} | {len(set(moves))} | {len(moves)} | {back} |")
        routes.append((label, moves))
    print()
    for label, moves in routes:
        print(f"{label}: {' > '.join(moves)}")


if __name__ == "__main__":
    main()
