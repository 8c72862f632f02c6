"""The dashboard's routes, behind a WSGI and an ASGI adapter (standard library only).

Routes, all read-only (``GET`` and ``HEAD``): ``/`` the page, ``/api/failovers``,
``/api/entries?name=…&limit=…&after=…``, ``/health`` (503 when ``down``) and ``/livez``
(200 while the process serves).

A store that cannot be read (down, refusing, timing out) answers 503 with its reason, logged
once, then at most once per interval; the probes never wait on it: ``/livez`` is answered before
anything else (by the ASGI adapter on the event loop itself), and no request waits for a worker
thread that a call can hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from ..errors import StoreError
from ..logs import LogLimiter
from . import page as _page
from .views import EngineView, StoreView

__all__ = ["Dashboard", "Response"]

log = logging.getLogger(__name__)

MAX_LIMIT = 500
COOKIE = "failover_dashboard_token"

View = EngineView | StoreView

# A failure raised by a store's driver is the store's trouble (503), not the dashboard's (500).
_DRIVERS = frozenset({"redis", "sqlalchemy", "psycopg", "psycopg2", "sqlite3", "pymysql"})
_USERINFO = re.compile(r"(\b[a-zA-Z][\w+.-]*://)[^/@\s]*@")


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot be read (rather than a bug of the dashboard)."""
    if isinstance(exc, StoreError | ConnectionError | TimeoutError):
        return True
    return type(exc).__module__.partition(".")[0] in _DRIVERS


def reason(exc: BaseException) -> str:
    """``exc`` in one line, for an operator: its type and its message's first line, with any
    credentials of a URL in it masked."""
    lines = str(exc).strip().splitlines()
    text = _USERINFO.sub(r"\1***@", lines[0] if lines else "")[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True, slots=True)
class Response:
    """A status, headers and a body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


class _BadRequest(Exception):
    pass


class Dashboard:
    """Answers one request: the routing and rendering the two adapters share.

    Args:
        view: what to show (an engine, or a store alone).
        show_payloads: show a preview of each stored payload (off by default: payloads may hold
            personal data).
        token: a bearer token every request must carry (header, or a cookie set by visiting
            ``/?token=…`` once); ``None``: no authentication.
        refresh: seconds between two refreshes of the page by its script.
    """

    def __init__(
        self,
        view: View,
        *,
        show_payloads: bool = False,
        token: str | None = None,
        refresh: float = _page.REFRESH_SECONDS,
    ) -> None:
        self.view = view
        self.show_payloads = show_payloads
        self.token = token
        self.refresh = refresh
        self._said = LogLimiter(log)  # one line per kind of trouble, not one per request

    def __call__(
        self, method: str, base: str, path: str, query: str, headers: dict[str, str]
    ) -> Response:
        """Answer a request (``headers`` with lower-case names)."""
        if method not in ("GET", "HEAD"):
            return _text(HTTPStatus.METHOD_NOT_ALLOWED, "read-only", [("Allow", "GET, HEAD")])
        if path.rstrip("/") == "/livez":
            # Liveness only: the process serves. Says nothing of upstreams or stores, so a
            # shared outage never restarts every replica; no token: it discloses nothing.
            return _text(HTTPStatus.OK, "ok")
        params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if self.token is not None:
            refused = self._authenticate(base, path, params, headers)
            if refused is not None:
                return refused
        path = path.rstrip("/") or "/"
        try:
            if path == "/":
                return self._page(base, params)
            if path == "/api/failovers":
                return _json(HTTPStatus.OK, self.view.overview().to_dict())
            if path == "/api/entries":
                return self._entries(params)
            if path == "/health":
                health = self.view.health()
                down = health.get("status") == "down"
                return _json(HTTPStatus.SERVICE_UNAVAILABLE if down else HTTPStatus.OK, health)
        except _BadRequest as exc:
            return _json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Exception as exc:
            if unreachable(exc):
                why = self._unavailable(path, exc)
                return _json(
                    HTTPStatus.SERVICE_UNAVAILABLE, {"error": "store unavailable", "reason": why}
                )
            self._said.report(("failed", path), "failover dashboard: %s failed", path, exc_info=exc)
            return _json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": type(exc).__name__})
        return _text(HTTPStatus.NOT_FOUND, "not found")

    def _unavailable(self, path: str, exc: BaseException) -> str:
        """Log that the store cannot be read (once, then at most once per interval); the
        reason shown."""
        why = reason(exc)
        self._said.report(
            "unavailable",  # one outage, whichever route meets it
            "failover dashboard: %s: the store cannot be read (%s); answering 503 until it does",
            path,
            why,
            exc_info=exc,
            what="requests answered 503",
        )
        return why

    def _authenticate(
        self, base: str, path: str, params: dict[str, str], headers: dict[str, str]
    ) -> Response | None:
        assert self.token is not None
        given = params.get("token")
        if given is not None and _same(given, self.token):
            # Once from a link: keep it in a cookie and take it out of the address bar.
            rest = urlencode({k: v for k, v in params.items() if k != "token"})
            # The path quoted (no header injection), and never starting "//" (another host).
            here = "/" + quote(path.lstrip("/"), safe="/")
            location = f"{quote(base, safe='/')}{here}" + (f"?{rest}" if rest else "")
            cookie = f"{COOKIE}={self.token}; Path={base or '/'}; HttpOnly; SameSite=Strict"
            return Response(303, [("Location", location), ("Set-Cookie", cookie)], b"")
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and _same(auth[7:].strip(), self.token):
            return None
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and _same(value, self.token):
                return None
        return _text(
            HTTPStatus.UNAUTHORIZED,
            "a token is required: send 'Authorization: Bearer TOKEN', or open /?token=TOKEN once",
            [("WWW-Authenticate", 'Bearer realm="failover"')],
        )

    def _page(self, base: str, params: dict[str, str]) -> Response:
        overview = error = page = entries_error = None
        status = HTTPStatus.OK
        try:
            overview = self.view.overview()
        except Exception as exc:
            if unreachable(exc):
                status = HTTPStatus.SERVICE_UNAVAILABLE
                why = self._unavailable("/", exc)
                error = (
                    f"The store cannot be read just now ({why}). This page shows it again "
                    "as soon as the store answers."
                )
            else:
                self._said.report(
                    "overview", "failover dashboard: reading the overview failed", exc_info=exc
                )
                error = f"Reading the failovers failed: {type(exc).__name__}"
        name = params.get("name") or None
        limit = 50
        if name is not None:
            try:
                limit = _limit(params)
                page = self.view.entries(name, params.get("after"), limit, self.show_payloads)
            except _BadRequest as exc:
                entries_error = str(exc)
            except Exception as exc:
                if unreachable(exc):
                    status = HTTPStatus.SERVICE_UNAVAILABLE
                    why = self._unavailable("/", exc)
                    entries_error = f"The store cannot be read just now ({why})."
                else:
                    self._said.report(
                        "entries", "failover dashboard: listing entries failed", exc_info=exc
                    )
                    entries_error = f"Listing the entries failed: {type(exc).__name__}"
        body = _page.render(
            overview,
            base=base,
            selected=name,
            entries=page,
            limit=limit,
            after=params.get("after"),
            error=error,
            entries_error=entries_error,
            refresh=self.refresh,
        )
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", _page.CSP),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            ("Cache-Control", "no-store"),
        ]
        return Response(status, headers, body.encode())

    def _entries(self, params: dict[str, str]) -> Response:
        name = params.get("name")
        if not name:
            raise _BadRequest("name= is required")
        page = self.view.entries(name, params.get("after"), _limit(params), self.show_payloads)
        now = self.view.now()
        return _json(
            HTTPStatus.OK,
            {
                "name": page.name,
                "total": page.total,
                "next_after": page.next_after,
                "entries": [e.to_dict(now) for e in page.entries],
            },
        )


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def _limit(params: dict[str, str]) -> int:
    raw = params.get("limit", "50")
    if not raw.isdigit() or not 0 < int(raw) <= MAX_LIMIT:
        raise _BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {raw!r}")
    return int(raw)


def _json(status: int, data: Any) -> Response:
    body = json.dumps(data, ensure_ascii=False, allow_nan=False).encode()
    return Response(
        status,
        [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
        body,
    )


def _text(status: int, text: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), *(headers or [])],
        text.encode(),
    )


# -- adapters -------------------------------------------------------------------------------------

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
AsgiApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


async def _on_own_thread(dashboard: Dashboard, *args: Any) -> Response:
    """``dashboard(*args)`` on a daemon thread of its own: a request that waits on a hung store
    holds only its own thread (and one left hanging never holds up the interpreter's exit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Response] = loop.create_future()

    def settle(result: Response | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            assert result is not None
            done.set_result(result)

    def run() -> None:
        try:
            result = dashboard(*args)
        except BaseException as exc:  # handed to the request's task, which raises it
            error: BaseException | None = exc
            result = None
        else:
            error = None
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for it
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="failover-dashboard", daemon=True).start()
    return await done


def wsgi(dashboard: Dashboard) -> WsgiApp:
    """The dashboard as a WSGI application (mountable: ``SCRIPT_NAME`` is its base)."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        method = environ.get("REQUEST_METHOD", "GET")
        response = dashboard(
            method,
            environ.get("SCRIPT_NAME", "").rstrip("/"),
            environ.get("PATH_INFO", "") or "/",
            environ.get("QUERY_STRING", ""),
            headers,
        )
        reason = HTTPStatus(response.status).phrase
        start_response(f"{response.status} {reason}", response.headers)
        return [b""] if method == "HEAD" else [response.body]

    return app


def asgi(dashboard: Dashboard) -> AsgiApp:
    """The dashboard as an ASGI application (mountable: ``root_path`` is its base).

    ``/livez`` is answered on the event loop at once. Every other request runs on a thread of
    its own, never on the event loop, and never on the loop's default executor, which the
    calls of the service share (a hung store's reads, permit asks): a probe never queues
    behind them.
    """

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # served on its own (uvicorn): nothing to set up
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        root = scope.get("root_path", "").rstrip("/")
        path = scope.get("path", "/")
        if root and path.startswith(root):  # Starlette's Mount keeps the full path
            path = path[len(root) :]
        method = scope.get("method", "GET")
        if method in ("GET", "HEAD") and path.rstrip("/") == "/livez":
            response = _text(HTTPStatus.OK, "ok")  # the process serves: nothing to wait for
        else:
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            response = await _on_own_thread(
                dashboard,
                method,
                root,
                path or "/",
                scope.get("query_string", b"").decode("latin-1"),
                headers,
            )
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in response.headers],
            }
        )
        body = b"" if method == "HEAD" else response.body
        await send({"type": "http.response.body", "body": body})

    return app
