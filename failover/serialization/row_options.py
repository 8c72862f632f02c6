"""The row settings a store URL may carry (``accept_plain``, ``max_row_bytes``), their defaults
and checks, shared by every store that keeps its entries as text (`failover.serialization.rows`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import unquote

from ..errors import ConfigurationError

__all__ = [
    "DEFAULT_MAX_ROW_BYTES",
    "ROW_DEFAULTS",
    "checked_max_row_bytes",
    "merged_row_options",
    "over_limit",
    "split_row_options",
    "utf8_size",
]

DEFAULT_MAX_ROW_BYTES: Final = 8 * 1024 * 1024
"""The default ``max_row_bytes`` of `SqlStore` and `RedisStore`: 8 MiB."""

_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def checked_max_row_bytes(value: object, owner: str) -> int:
    """``value``, checked as a ``max_row_bytes`` setting.

    Raises:
        ConfigurationError: not a positive integer (naming ``owner`` and the setting).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(
            f"{owner}: max_row_bytes must be a positive number of bytes (an int), got {value!r}"
        )
    return value


def split_row_options(url: str, shown: str) -> tuple[str, dict[str, Any]]:
    """``url`` without the row options a store URL may carry (``accept_plain=true|false``,
    ``max_row_bytes=<bytes>``), and those options as `Serializer` settings; the URL's other
    options (a driver's, redis-py's) stay as they were.

    Args:
        url: a store URL.
        shown: the URL as error messages show it (its password masked).

    Raises:
        ConfigurationError: an option's value is not one it takes.
    """
    base, sep, query = url.partition("?")
    if not sep or ("accept_plain" not in query and "max_row_bytes" not in query):
        return url, {}
    options: dict[str, Any] = {}
    rest = []
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "accept_plain":
            flag = _FLAGS.get(unquote(value).lower())
            if flag is None:
                raise ConfigurationError(
                    f"store URL {shown!r}: accept_plain must be true or false, got {value!r}"
                )
            options["accept_plain"] = flag
        elif name == "max_row_bytes":
            try:
                number = int(unquote(value))
            except ValueError:
                number = -1
            if number <= 0:
                raise ConfigurationError(
                    f"store URL {shown!r}: max_row_bytes must be a positive integer (bytes), "
                    f"got {value!r}"
                )
            options["max_row_bytes"] = number
        else:
            rest.append(pair)
    return base + (f"?{'&'.join(rest)}" if rest else ""), options


ROW_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {"accept_plain": False, "max_row_bytes": DEFAULT_MAX_ROW_BYTES}
)
"""The row settings a store URL may carry, and their defaults."""


def merged_row_options(
    owner: str, given: Mapping[str, Any], from_url: Mapping[str, Any]
) -> dict[str, Any]:
    """The row settings of a store from its arguments (``given``: those passed, the others
    default) and its URL's options: an argument left at its default takes the URL's.

    Raises:
        ConfigurationError: an argument and the URL's option that disagree.
    """
    merged = {name: given.get(name, default) for name, default in ROW_DEFAULTS.items()}
    for name, value in from_url.items():
        if merged[name] != ROW_DEFAULTS[name] and merged[name] != value:
            raise ConfigurationError(
                f"{owner}: {name}={merged[name]!r} and the URL's {name}={value!r} disagree; "
                "give one"
            )
        merged[name] = value
    return merged


def over_limit(text: str | bytes, limit: int) -> bool:
    """Whether ``text`` is longer than ``limit`` bytes in UTF-8: measured from its length
    alone unless it is text, not ASCII, and within four bytes a character of the limit."""
    n = len(text)
    return n > limit or (n * 4 > limit and utf8_size(text) > limit)


def utf8_size(text: str | bytes) -> int:
    """The length of ``text`` in UTF-8 bytes; encoded only when it is not ASCII (which
    `str.isascii` says at once), so a huge ASCII row is never copied to be measured."""
    if isinstance(text, bytes) or text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))
