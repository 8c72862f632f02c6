"""The small pieces of HTML the dashboard's pages are made of: escaped text, status badges,
ages, times, sizes and links. Everything shown goes through `e` (`html.escape`)."""

from __future__ import annotations

from datetime import datetime
from html import escape
from urllib.parse import urlencode

__all__ = ["NONE", "age", "badge", "cards", "e", "link", "percent", "size", "time_of"]

NONE = "\u2013"
"""What the page shows for "none": an en dash."""


def e(value: object) -> str:
    """``value`` as text, HTML-escaped (quotes included)."""
    return escape(str(value), quote=True)


def badge(status: str) -> str:
    """A status badge (its CSS class is the status)."""
    return f'<span class="badge {e(status)}">{e(status)}</span>'


def age(seconds: float | None) -> str:
    """A duration in its two largest units (``"1h 5m"``); a dash for ``None``."""
    if seconds is None:
        return NONE
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{u}" for n, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return " ".join(parts[:2]) or "0s"


def time_of(value: datetime | None) -> str:
    """A time to the second, with its zone; a dash for ``None``."""
    if value is None:
        return NONE
    return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def percent(value: float | None) -> str:
    """A percentage; a dash for ``None``."""
    return NONE if value is None else f"{value:g}%"


def size(value: int | None) -> str:
    """A size in bytes, KiB or MiB; a dash for ``None``."""
    if value is None:
        return NONE
    if value < 1024:
        return f"{value} B"
    return f"{value / 1024:.1f} KiB" if value < 1024 * 1024 else f"{value / 1048576:.1f} MiB"


def link(base: str, **query: str | None) -> str:
    """An escaped link to the page under ``base`` with ``query`` (``None`` values left out),
    to its entries section when there is a query."""
    params = {k: v for k, v in query.items() if v is not None}
    return e(f"{base}/?{urlencode(params)}#entries" if params else f"{base}/")


def cards(section_id: str, kpis: list[tuple[str, str, str]]) -> str:
    """A section of KPI cards, each ``(label, value, note)`` (its ``data-kpi`` is the label)."""
    html = [f'<section class="kpis" id="{e(section_id)}">']
    for label, value, note in kpis:
        html.append(
            f'<div class="kpi" data-kpi="{e(label)}"><div class="label">{e(label)}</div>'
            f'<div class="value">{e(value)}</div><div class="muted">{e(note)}</div></div>'
        )
    html.append("</section>")
    return "".join(html)
