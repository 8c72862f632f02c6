"""Real HTTP servers on 127.0.0.1 for the dashboard's tests: wsgiref for WSGI, uvicorn for ASGI."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


@contextlib.contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, server_class=_Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextlib.contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields its base URL.

    The socket is bound before the server starts: requests wait in its backlog until uvicorn
    accepts them, so nothing has to wait for the server to be ready.
    """
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET ``url``: the status and the body (error statuses included)."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()
