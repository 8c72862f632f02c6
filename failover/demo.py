"""The scenario behind ``failover demo``: a flaky HTTP upstream on loopback, called through
``@failover``, going down and coming back while a fake clock moves on.

`run` plays the scenario and returns its steps; the command line renders them as a table.
The clock is injected, so the demo shows values hours old without waiting for them.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.error import HTTPError
from urllib.request import urlopen

from .decorator import failover
from .engine import Failover, utcnow
from .stores.base import FailoverStore

__all__ = ["DemoClock", "DemoRun", "FlakyUpstream", "Step", "default_store", "run"]

COUNTRIES: dict[str, dict[str, str]] = {
    "FR": {"code": "FR", "name": "France", "capital": "Paris"},
    "DE": {"code": "DE", "name": "Germany", "capital": "Berlin"},
    "JP": {"code": "JP", "name": "Japan", "capital": "Tokyo"},
}
TTL = timedelta(hours=1)


def default_store() -> str:
    """The demo's store: a SQLite file in the system's temporary directory (kept afterwards,
    so that ``failover inspect`` can show what the demo stored)."""
    return f"sqlite:///{Path(tempfile.gettempdir()) / 'failover-demo.db'}"


class FlakyUpstream:
    """A JSON HTTP server on 127.0.0.1 (a free port) serving ``/countries/<code>``.

    While ``up`` is ``False`` every request gets ``503 Service Unavailable``.
    """

    def __init__(self, countries: dict[str, dict[str, str]] = COUNTRIES) -> None:
        self.up = True
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = self.path.removeprefix("/countries/")
                if not upstream.up:
                    self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "upstream down"})
                elif code in countries:
                    self._send(HTTPStatus.OK, countries[code])
                else:
                    self._send(HTTPStatus.NOT_FOUND, {"error": f"no country {code!r}"})

            def _send(self, status: HTTPStatus, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the demo prints its own timeline."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # shutdown() waits for the serving loop's next poll: keep the demo's exit quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="failover-demo-upstream",
            daemon=True,
        )

    @property
    def url(self) -> str:
        """The server's base URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def fetch(self, code: str) -> dict[str, Any]:
        """GET ``/countries/<code>`` like any HTTP client would; raises `HTTPError` on non-2xx."""
        try:
            with urlopen(f"{self.url}/countries/{code}", timeout=5) as response:
                body: dict[str, Any] = json.load(response)
                return body
        except HTTPError as exc:
            exc.close()  # it holds the response's socket
            raise

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class DemoClock:
    """The demo's clock: moves only when the scenario says so.

    Args:
        start: where it starts.
    """

    def __init__(self, start: datetime) -> None:
        self.start = self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward."""
        self.now += delta


@dataclass(frozen=True, slots=True)
class Step:
    """One call of the scenario and what the caller got.

    Attributes:
        number: 1, 2, …
        elapsed: the scenario's (fake) time since its start.
        upstream: ``"up"`` or ``"down"``.
        call: the call made, e.g. ``find_country('FR')``.
        value: the value returned, or the type of the exception raised.
        up_to_date: the envelope's ``up_to_date``; ``None`` when the call raised.
        age: how old the value served is; ``None`` when the call raised.
        outcome: ``"live"``, ``"stale"`` or ``"error"``.
        error: for an error, the exception, as ``Type: message``.
        note: for an error, the note failover added to the exception.
    """

    number: int
    elapsed: timedelta
    upstream: str
    call: str
    value: str
    up_to_date: bool | None
    age: timedelta | None
    outcome: str
    error: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class DemoRun:
    """What `run` did: the upstream it called, the ttl, and each step."""

    upstream_url: str
    ttl: timedelta
    steps: list[Step]


# The scenario: (time to move the clock on, upstream up?, country code).
SCENARIO: list[tuple[timedelta, bool, str]] = [
    (timedelta(0), True, "FR"),
    (timedelta(minutes=5), False, "FR"),
    (timedelta(minutes=25), False, "FR"),
    (timedelta(minutes=15), True, "FR"),
    (timedelta(0), False, "DE"),
    (timedelta(minutes=65), False, "FR"),
    (timedelta(minutes=5), True, "FR"),
]


def run(store: FailoverStore | str) -> DemoRun:
    """Play the scenario against a real HTTP upstream on loopback.

    Args:
        store: the demo engine's store, or its URL.

    Returns:
        The steps, in order.

    Raises:
        FailoverError: the store URL is invalid.
    """
    # The scenario ends at the real time, so what it leaves in the store looks right to
    # `failover inspect` afterwards.
    clock = DemoClock(utcnow() - sum((delta for delta, _, _ in SCENARIO), timedelta(0)))
    steps: list[Step] = []
    with Failover(store, clock=clock, metrics=False) as engine, FlakyUpstream() as upstream:

        @failover("demo.find_country", ttl=TTL, engine=engine)
        def find_country(code: str) -> dict[str, Any]:
            return upstream.fetch(code)

        for number, (delta, up, code) in enumerate(SCENARIO, start=1):
            clock.advance(delta)
            upstream.up = up
            steps.append(_play(number, clock, up, code, find_country.referential))
    return DemoRun(upstream.url, TTL, steps)


def _play(number: int, clock: DemoClock, up: bool, code: str, call: Callable[[str], Any]) -> Step:
    common: dict[str, Any] = {
        "number": number,
        "elapsed": clock.now - clock.start,
        "upstream": "up" if up else "down",
        "call": f"find_country({code!r})",
    }
    try:
        env = call(code)
    except Exception as exc:
        return Step(
            **common,
            value=f"{type(exc).__name__} raised",
            up_to_date=None,
            age=None,
            outcome="error",
            error=f"{type(exc).__name__}: {exc}",
            note="; ".join(getattr(exc, "__notes__", [])) or None,
        )
    country = env.payload
    return Step(
        **common,
        value=f"{country['name']} ({country['capital']})",
        up_to_date=env.up_to_date,
        age=clock.now - env.as_of,
        outcome="live" if env.up_to_date else "stale",
    )
