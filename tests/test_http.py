"""`failover.http.transient` against the real exceptions of httpx, httpx2, requests and urllib,
raised by real requests to a server on loopback."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
import pytest
import requests

import failover
from failover.http import status_of, transient, transient_status

from .conftest import FakeClock


class Server:
    """An HTTP server on 127.0.0.1: ``/status/<n>`` answers status n, ``/hang`` never answers,
    ``/drop`` closes the connection without answering, ``/text`` is not JSON."""

    def __init__(self) -> None:
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/hang":
                    # Never answers: the client times out first. Bounded: the fixture releases
                    # it at teardown, and then it closes without a word (the client is gone).
                    server.release.wait(5)
                    self.close_connection = True
                elif self.path == "/drop":
                    self.close_connection = True  # not a byte of answer
                elif self.path == "/text":
                    self._send(200, b"<html>maintenance</html>")
                else:
                    status = int(self.path.removeprefix("/status/"))
                    self._send(status, json.dumps({"status": status}).encode())

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    s.thread.start()
    yield s
    s.release.set()
    s.httpd.shutdown()
    s.httpd.server_close()
    s.thread.join()


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _httpx(url: str) -> Any:
    response = httpx.get(url, timeout=0.2)
    response.raise_for_status()
    return response.json()


def _httpx2(url: str) -> Any:
    response = httpx2.get(url, timeout=0.2)
    response.raise_for_status()
    return response.json()


def _requests(url: str) -> Any:
    response = requests.get(url, timeout=0.2)
    response.raise_for_status()
    return response.json()


def _urllib(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=0.2) as response:
        return json.load(response)


CLIENTS: dict[str, Callable[[str], Any]] = {
    "httpx": _httpx,
    "httpx2": _httpx2,
    "requests": _requests,
    "urllib": _urllib,
}


def _raised(call: Callable[..., Any], *args: str) -> Exception:
    try:
        call(*args)
    except Exception as exc:
        close = getattr(exc, "close", None)
        if callable(close):  # urllib's HTTPError holds the response's socket
            close()
        return exc
    raise AssertionError(f"{call} raised nothing")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/status/500", True),
        ("/status/502", True),
        ("/status/503", True),
        ("/status/504", True),
        ("/status/429", True),
        ("/status/400", False),
        ("/status/401", False),
        ("/status/403", False),
        ("/status/404", False),
        ("/status/409", False),
        ("/status/422", False),
        ("/drop", True),
        ("/text", False),  # a body that is not JSON: a bug or a contract change, not an outage
    ],
)
def test_what_each_client_raises(server: Server, client: str, path: str, expected: bool) -> None:
    exc = _raised(CLIENTS[client], server.url + path)
    assert transient(exc) is expected, repr(exc)
    if path.startswith("/status/"):
        assert status_of(exc) == int(path.removeprefix("/status/"))
    else:
        assert status_of(exc) is None


@pytest.mark.parametrize("client", CLIENTS)
def test_refused_connections_are_transient(client: str, closed_port: int) -> None:
    exc = _raised(CLIENTS[client], f"http://127.0.0.1:{closed_port}/")
    assert transient(exc), repr(exc)


@pytest.mark.parametrize("client", CLIENTS)
def test_timeouts_are_transient(server: Server, client: str) -> None:
    exc = _raised(CLIENTS[client], server.url + "/hang")  # the client gives up after 0.2 s
    assert transient(exc), repr(exc)


@pytest.mark.parametrize(
    "call",
    [
        lambda: httpx.get("ftp://127.0.0.1/"),  # httpx.UnsupportedProtocol
        lambda: httpx2.get("ftp://127.0.0.1/"),
        lambda: requests.get("ftp://127.0.0.1/"),  # requests.InvalidSchema
        lambda: requests.get("http://"),  # requests.InvalidURL
    ],
)
def test_mistakes_of_the_caller_are_not_transient(call: Callable[[], Any]) -> None:
    exc = _raised(call)
    assert not transient(exc), repr(exc)


async def test_httpx_async_client(server: Server, closed_port: int) -> None:
    async with httpx.AsyncClient(timeout=0.2) as client:
        with pytest.raises(httpx.HTTPStatusError) as info:
            (await client.get(server.url + "/status/503")).raise_for_status()
        assert transient(info.value)
        with pytest.raises(httpx.ConnectError) as refused:
            await client.get(f"http://127.0.0.1:{closed_port}/")
        assert transient(refused.value)


def test_plain_exceptions() -> None:
    assert transient(ConnectionResetError())
    assert transient(TimeoutError())
    assert not transient(ValueError("bad"))
    assert not transient(KeyError("x"))
    assert not transient(OSError("disk"))  # not a network error


def test_duck_typed_statuses_and_properties_that_raise() -> None:
    class Gone(Exception):
        status = 410

    class Overloaded(Exception):
        status = 503

    class Strange(Exception):
        status = "503"  # not an int: no status

        @property
        def response(self) -> Any:
            raise RuntimeError("no response attached")

    class NotHttp(Exception):
        status = 1  # out of the HTTP range

    assert (status_of(Gone()), transient(Gone())) == (410, False)
    assert (status_of(Overloaded()), transient(Overloaded())) == (503, True)
    assert (status_of(Strange()), transient(Strange())) == (None, False)
    assert (status_of(NotHttp()), transient(NotHttp())) == (None, False)
    assert [s for s in (200, 404, 429, 499, 500, 599) if transient_status(s)] == [429, 500, 599]


def test_as_the_decorator_filter(server: Server, clock: FakeClock) -> None:
    engine = failover.Failover(clock=clock, metrics=False)
    path = {"now": "/status/200"}

    @failover.failover("http-filter", exceptions=failover.http.transient, engine=engine)
    def fetch() -> dict[str, Any]:
        body: dict[str, Any] = _httpx(server.url + path["now"])
        return body

    assert fetch() == {"status": 200}
    clock.advance(60)
    path["now"] = "/status/503"
    env = fetch.referential()
    assert (env.payload, env.up_to_date) == ({"status": 200}, False)
    assert isinstance(env.cause, httpx.HTTPStatusError)
    assert env.cause.response.status_code == 503
    path["now"] = "/status/404"  # an answer, not an outage: the caller sees it as is
    with pytest.raises(httpx.HTTPStatusError) as info:
        fetch()
    assert info.value.response.status_code == 404
    assert not getattr(info.value, "__notes__", None)
    engine.close()
