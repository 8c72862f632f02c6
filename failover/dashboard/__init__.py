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

from ..health import DOWN_MIN, DOWN_RATIO, down_thresholds
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
    down_ratio: float = DOWN_RATIO,
    down_min: int = DOWN_MIN,
) -> AsgiApp:
    """The dashboard of ``engine`` as an ASGI application.

    Args:
        engine: the engine shown; ``None``: the default engine, looked up on each request.
        show_payloads: show a preview of each stored payload (they may hold personal data).
        token: a bearer token required on every request; ``None``: none (put the app behind
            your own authentication, as you would an admin page).
        refresh: seconds between two refreshes of the page.
        down_ratio: ``/health`` answers 503 (``down``) only when at least this share of a
            failover's calls in the window got nothing usable...
        down_min: ... and at least this many: fewer make it ``degraded`` (200).

    Returns:
        An ASGI application; store reads run on a worker thread.

    Raises:
        ConfigurationError: a threshold out of range.
    """
    view = EngineView(engine, down_thresholds(down_ratio, down_min, "make_asgi_app"))
    return asgi(Dashboard(view, show_payloads=show_payloads, token=token, refresh=refresh))


def make_wsgi_app(
    engine: Failover | None = None,
    *,
    show_payloads: bool = False,
    token: str | None = None,
    refresh: float = REFRESH_SECONDS,
    down_ratio: float = DOWN_RATIO,
    down_min: int = DOWN_MIN,
) -> WsgiApp:
    """The dashboard of ``engine`` as a WSGI application (arguments as `make_asgi_app`)."""
    view = EngineView(engine, down_thresholds(down_ratio, down_min, "make_wsgi_app"))
    return wsgi(Dashboard(view, show_payloads=show_payloads, token=token, refresh=refresh))


def make_store_app(
    store: FailoverStore,
    clock: Callable[[], datetime],
    *,
    show_payloads: bool = False,
    token: str | None = None,
) -> WsgiApp:
    """A WSGI dashboard of a store alone (``failover dashboard``): the health the processes
    publish to it (``Failover(publish_health=...)``), added up per failover across them
    (`failover.dashboard.cluster`; rows expired at ``clock()`` are left out), then the names it
    holds and their entries."""
    return wsgi(Dashboard(StoreView(store, clock), show_payloads=show_payloads, token=token))
