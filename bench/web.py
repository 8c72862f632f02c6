"""What reporting staleness to HTTP clients costs: the recover path with and without a
`failover.served.collect()` block, and one ASGI request (an app answering at once, called
directly: no server, no framework) with and without `StaleHeaders`.

Run with ``.venv/bin/python bench/web.py``. Prints a markdown table: nanoseconds per call (best
of several interleaved rounds) and ratios against the case without reporting, in one process.
"""

from __future__ import annotations

import asyncio
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import failover
from failover.asgi import StaleHeaders

NUMBER = 2_000
ROUNDS = 30


def main() -> None:
    engine = failover.Failover(metrics=False)
    up = {"on": True}

    @failover.failover("bench-web", engine=engine)
    def rates(code: str) -> dict[str, float]:
        if not up["on"]:
            raise ConnectionError(code)
        return {"EUR": 1.0, "USD": 1.08}

    rates("EUR")
    up["on"] = False

    def recover_plain() -> None:
        for _ in range(NUMBER):
            rates("EUR")

    def recover_collected() -> None:
        with failover.served.collect():
            for _ in range(NUMBER):
                rates("EUR")

    def endpoint(stale: bool) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            if stale:
                rates("EUR")  # served stale: the wrapped app reports it
            headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"{}"})

        return app

    live, stale = endpoint(False), endpoint(True)

    def fastapi_app(middleware: bool) -> Any:
        from fastapi import FastAPI

        app = FastAPI()
        if middleware:
            app.add_middleware(StaleHeaders)

        @app.get("/")
        async def index() -> dict[str, float]:
            return {"EUR": 1.0}

        return app

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 50000),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        return None

    loop = asyncio.new_event_loop()

    def requests(target: Any) -> Callable[[], None]:
        async def many() -> None:
            for _ in range(NUMBER):
                await target(scope, receive, send)

        return lambda: loop.run_until_complete(many())

    cases = {
        "recover (entry found), nothing collecting": recover_plain,
        "recover (entry found), inside served.collect()": recover_collected,
        "ASGI request, nothing stale, bare app": requests(live),
        "ASGI request, nothing stale, StaleHeaders": requests(StaleHeaders(live)),
        "FastAPI request (async endpoint), nothing stale": requests(fastapi_app(False)),
        "FastAPI request (async endpoint), nothing stale, StaleHeaders": requests(
            fastapi_app(True)
        ),
        "ASGI request serving one stale value, bare app": requests(stale),
        "ASGI request serving one stale value, StaleHeaders": requests(StaleHeaders(stale)),
    }
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(ROUNDS):
        for label, run in cases.items():
            start = time.perf_counter_ns()
            run()
            best[label] = min(best[label], (time.perf_counter_ns() - start) / NUMBER)
    loop.close()
    engine.close()

    labels = list(cases)
    print(f"Python {sys.version.split()[0]} on {platform.machine()}\n")
    print("| path | ns/call | ratio |")
    print("|---|---:|---:|")
    for i, label in enumerate(labels):
        base = best[labels[i - i % 2]]
        print(f"| {label} | {best[label]:,.0f} | {best[label] / base:.2f} |")


if __name__ == "__main__":
    main()
