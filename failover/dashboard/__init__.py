"""A read-only dashboard: the failovers' health, their settings and their stored entries.

`make_asgi_app` and `make_wsgi_app` serve, with nothing beyond the standard library:

- ``/``: one HTML page (status, KPIs over the last minute, the failovers, a failover's entries);
- ``/api/failovers``, ``/api/entries?name=…&limit=…&after=…``: the same as JSON;
- ``/health``: `failover.health.HealthReport.to_dict`, answered with 503 when ``down``.

Mount either in a web framework (``app.mount("/failover", make_asgi_app(engine))``), or serve a
store on its own with ``failover dashboard --store URL``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from .app import AsgiApp, Dashboard, WsgiApp, asgi, wsgi
from .page import REFRESH_SECONDS
from .views import EngineView, StoreView

if TYPE_CHECKING:
    from ..engine import Failover
    from ..stores.base import FailoverStore

__all__ = ["make_asgi_app", "make_store_app", "make_wsgi_app"]


def make_asgi_app(
    engine: Failover | None = None,
    *,
    show_payloads: bool = False,
    token: str | None = None,
    refresh: float = REFRESH_SECONDS,
) -> AsgiApp:
    """The dashboard of ``engine`` as an ASGI application.

    Args:
        engine: the engine shown; ``None``: the default engine, looked up on each request.
        show_payloads: show a preview of each stored payload (they may hold personal data).
        token: a bearer token required on every request; ``None``: none (put the app behind
            your own authentication, as you would an admin page).
        refresh: seconds between two refreshes of the page.

    Returns:
        An ASGI application; store reads run on a worker thread.
    """
    view = EngineView(engine)
    return asgi(Dashboard(view, show_payloads=show_payloads, token=token, refresh=refresh))


def make_wsgi_app(
    engine: Failover | None = None,
    *,
    show_payloads: bool = False,
    token: str | None = None,
    refresh: float = REFRESH_SECONDS,
) -> WsgiApp:
    """The dashboard of ``engine`` as a WSGI application (arguments as `make_asgi_app`)."""
    view = EngineView(engine)
    return wsgi(Dashboard(view, show_payloads=show_payloads, token=token, refresh=refresh))


def make_store_app(
    store: FailoverStore,
    clock: Callable[[], datetime],
    *,
    show_payloads: bool = False,
    token: str | None = None,
) -> WsgiApp:
    """A WSGI dashboard of a store alone: its names and entries, for any process's failovers
    (``failover dashboard``). Per-call counts are per process: they come from Prometheus."""
    return wsgi(Dashboard(StoreView(store, clock), show_payloads=show_payloads, token=token))
