"""Which exceptions of an HTTP client mean "the upstream is unavailable": `transient`.

Duck-typed, with no dependency on any client: it reads the exception's class names and its HTTP
status. Use it as the decorator's ``exceptions=`` predicate::

    @failover.failover("rates", exceptions=failover.http.transient)
    def rates() -> dict:
        response = httpx.get(URL, timeout=2)
        response.raise_for_status()
        return response.json()

Recovery runs for network errors and timeouts: ``httpx.TransportError`` (and httpx2's) but a bad
URL scheme or a client-side protocol error; ``requests.ConnectionError``, ``requests.Timeout``, a
body cut off mid-transfer; the standard library's ``ConnectionError``, ``TimeoutError`` and
``URLError``. And for answers with status 5xx or 429: ``httpx.HTTPStatusError``,
``requests.HTTPError``, ``urllib.error.HTTPError``, any exception with ``.response.status_code``
or ``.status``. Other 4xx answers, and everything else (a ``ValueError`` from decoding the body,
a bug), propagate unchanged: serving a stored answer would hide them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["status_of", "transient", "transient_status"]

# (top-level package, class name) of the client exceptions that mean "unavailable, try later".
# Matched against the exception's MRO, so subclasses (httpx.ConnectTimeout, requests.ReadTimeout,
# requests.SSLError...) count too.
_TRANSIENT = frozenset(
    {
        ("httpx", "TransportError"),  # timeouts, network and server-side protocol errors
        ("httpx2", "TransportError"),  # httpx's successor, same exception tree
        ("requests", "ConnectionError"),  # refused, reset, DNS, TLS, proxy, connect timeout
        ("requests", "Timeout"),
        ("requests", "ChunkedEncodingError"),  # the connection broke mid-body
        ("requests", "RetryError"),  # urllib3's own retries gave up
        ("urllib", "URLError"),  # urllib.request: the server could not be reached
    }
)
# Subclasses of the above that are the caller's mistake, not the upstream's state.
_PERMANENT = frozenset(
    {
        ("httpx", "UnsupportedProtocol"),  # a URL without http(s)://
        ("httpx", "LocalProtocolError"),  # the client built an invalid request
        ("httpx2", "UnsupportedProtocol"),
        ("httpx2", "LocalProtocolError"),
    }
)
_by_type: dict[type, bool] = {}
_MAX_TYPES = 1000


def transient_status(status: int) -> bool:
    """Whether an HTTP status says "try later": 5xx and 429 (Too Many Requests)."""
    return status >= 500 or status == 429


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, or ``None``.

    Read from ``exc.response.status_code`` (httpx, httpx2, requests) or ``exc.status`` (urllib's
    ``HTTPError``, and clients that use that name); only an ``int`` from 100 to 599 counts.
    """
    for get in (_response_status, _own_status):
        try:
            status = get(exc)
        except Exception:  # a property that raises (httpx's .request when unset) is no status
            continue
        if type(status) is int and 100 <= status <= 599:
            return status
    return None


def _response_status(exc: BaseException) -> Any:
    return getattr(getattr(exc, "response", None), "status_code", None)


def _own_status(exc: BaseException) -> Any:
    return getattr(exc, "status", None)


def transient(exc: BaseException) -> bool:
    """Whether ``exc``, raised by an HTTP client, should trigger recovery.

    ``True`` for network errors, timeouts, and answers with status 5xx or 429; ``False`` for
    other statuses (a 404 is an answer, not an outage) and for anything else. Never raises.
    """
    status = status_of(exc)
    if status is not None:
        return transient_status(status)
    tp = type(exc)
    known = _by_type.get(tp)
    if known is None:
        known = _transient_type(tp)
        if len(_by_type) < _MAX_TYPES:  # classes made at run time must not grow it forever
            _by_type[tp] = known
    return known


def _transient_type(tp: type) -> bool:
    marks = {(c.__module__.partition(".")[0], c.__name__) for c in tp.__mro__}
    if marks & _PERMANENT:
        return False
    return bool(marks & _TRANSIENT) or issubclass(tp, ConnectionError | TimeoutError)
