"""The settings of a `SqlStore` URL that are the store's, not the driver's: the row options
(``accept_plain``, ``max_row_bytes``), taken out of the URL before SQLAlchemy sees it, and the
checks the per-tenant factories run before the first tenant comes."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ....masking import masked_url
from ....serialization.row_options import (
    DEFAULT_MAX_ROW_BYTES,
    checked_max_row_bytes,
    merged_row_options,
    split_row_options,
)
from .engine import make_engine

__all__ = ["check_settings", "check_url", "row_options", "url_settings"]


def row_options(url: str | sa.URL) -> tuple[str | sa.URL, dict[str, Any]]:
    """A store URL without its row options (``accept_plain``, ``max_row_bytes``: see
    `SqlStore`), which SQLAlchemy's drivers would refuse, and those options.

    Raises:
        ConfigurationError: an option's value is not one it takes.
    """
    if isinstance(url, sa.URL):
        names = [n for n in ("accept_plain", "max_row_bytes") if n in url.query]
        if not names:
            return url, {}
        values = {n: url.query[n] for n in names}  # a str, or a tuple when repeated
        query = "&".join(
            f"{n}={v}" for n, vs in values.items() for v in ((vs,) if isinstance(vs, str) else vs)
        )
        _, options = split_row_options(f"?{query}", masked_url(url))
        return url.difference_update_query(names), options
    return split_row_options(url, masked_url(url))


def check_settings(owner: str, store_kwargs: dict[str, Any]) -> None:
    """Refuse a bad ``max_row_bytes`` now, not at the first tenant's first call."""
    checked_max_row_bytes(store_kwargs.get("max_row_bytes", DEFAULT_MAX_ROW_BYTES), owner)


def check_url(url: str) -> None:
    make_engine(row_options(url)[0]).dispose()  # connects to nothing


def url_settings(
    owner: str, url: str | sa.URL, store_kwargs: dict[str, Any]
) -> tuple[str | sa.URL, dict[str, Any]]:
    """``url`` without its row options, and ``store_kwargs`` with them."""
    url, from_url = row_options(url)
    if not from_url:
        return url, store_kwargs
    return url, {**store_kwargs, **merged_row_options(owner, store_kwargs, from_url)}
