"""`StaleHeaders`: ASGI middleware telling HTTP clients that an answer is not live.

No framework dependency: it speaks plain ASGI, so it wraps a FastAPI, Starlette, Quart or
Litestar app alike. For each HTTP request it collects (`failover.served.collect`) the failover
calls made while handling it; when any of them was served stale or given a policy-made value,
the response start message gets:

- ``Age``: the age in seconds of the oldest stale value (RFC 9111), when stored values were served;
- ``Warning: 110 - "Response is Stale"``;
- ``X-Failover-Stale``: the names of the failovers, comma-separated;
- ``X-Failover-Partial: 1``, when a scatter/gather call was served only some of the slices it
  asked for (`failover.ReferentialPayload.partial`).

Headers the response already has are left as they are. Nothing is buffered: only the
``http.response.start`` message is touched, so streaming responses stream as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .errors import ConfigurationError
from .served import StaleReport, collect

__all__ = ["StaleHeaders"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_WARNING = b'110 - "Response is Stale"'


class StaleHeaders:
    """ASGI middleware: mark responses built from values that are not live.

    Args:
        app: the ASGI application to wrap.
        age: set ``Age`` to the age of the oldest stale value.
        warning: add ``Warning: 110 - "Response is Stale"`` (obsoleted by RFC 9111 but still
            understood by clients and tools that look for it).
        header: the header listing the failovers' names, or ``None`` for none (when the names
            should not reach clients).
        partial: the header set to ``1`` when an answer is partial, or ``None`` for none.

    Example (FastAPI)::

        app = FastAPI()
        app.add_middleware(failover.asgi.StaleHeaders)
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        age: bool = True,
        warning: bool = True,
        header: str | None = "X-Failover-Stale",
        partial: str | None = "X-Failover-Partial",
    ) -> None:
        for setting, value in (("header", header), ("partial", partial)):
            if value is not None and not _is_token(value):
                raise ConfigurationError(
                    f"StaleHeaders: {setting} {value!r} is not a valid header name"
                )
        self.app = app
        self.age = age
        self.warning = warning
        self.header = None if header is None else header.lower().encode("ascii")
        self.partial = None if partial is None else partial.lower().encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection; only ``http`` ones are watched."""
        if scope["type"] != "http":  # lifespan and websocket pass through untouched
            await self.app(scope, receive, send)
            return
        with collect() as report:

            async def send_marked(message: Message) -> None:
                if report and message["type"] == "http.response.start":
                    message = dict(message)  # the app's own message stays as it was
                    message["headers"] = self.headers(list(message.get("headers", ())), report)
                await send(message)

            await self.app(scope, receive, send_marked)

    def headers(self, headers: list[Any], report: StaleReport) -> list[Any]:
        """``headers`` (ASGI pairs) with the staleness headers added where absent."""
        has_age = has_warning = has_header = has_partial = False
        for raw, value in headers:
            name = raw.lower()  # bytes (or bytearray), lowercase by the ASGI spec already
            if name == b"age":
                has_age = True
            elif name == b"warning":
                has_warning = has_warning or value.startswith(b"110")
            elif name == self.header:
                has_header = True
            elif name == self.partial:
                has_partial = True
        age = report.age
        if self.age and age is not None and not has_age:
            headers.append((b"age", b"%d" % age))
        if self.warning and not has_warning:
            headers.append((b"warning", _WARNING))
        if self.header is not None and not has_header:
            headers.append((self.header, b", ".join(_safe(n) for n in report.names)))
        if report.partial and self.partial is not None and not has_partial:
            headers.append((self.partial, b"1"))
        return headers


def _is_token(name: str) -> bool:
    """Whether ``name`` is a valid HTTP header name (an RFC 9110 token)."""
    allowed = "!#$%&'*+-.^_`|~"
    return bool(name) and all(c.isascii() and (c.isalnum() or c in allowed) for c in name)


_safe_names: dict[str, bytes] = {}


def _safe(name: str) -> bytes:
    """A failover name fit for a comma-separated header value: printable ASCII, no commas."""
    safe = _safe_names.get(name)
    if safe is None:
        safe = "".join(c if "!" <= c <= "~" and c != "," else "_" for c in name).encode("ascii")
        if len(_safe_names) < 10_000:  # names are few; names made at run time must not pile up
            _safe_names[name] = safe
    return safe
