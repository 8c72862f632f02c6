"""The one way a URL is shown (a store's ``repr``, a warning, an error, the dashboard, the
command line): its password and every secret-bearing query option masked.

A store URL may carry secrets in two places: the authority's password
(``postgresql://user:PASSWORD@host/db``) and query options (``?password=``, ``?sslpassword=``,
``?token=``, ``?api_key=``...). `masked_url` replaces both with ``***`` and leaves the rest of
the text as it was given (nothing re-encoded), so that the shown URL still says which store it is.
Standard library only: any layer may show a URL without importing a driver.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "masked_url", "secret_option"]

MASK = "***"

# A query option whose name holds one of these (lower case, without "_", "-" or ".") carries a
# secret: password, sslpassword, passwd, pwd, secret, client_secret, token, access_token,
# api_key, access_key, auth, authorization, credentials, private_key... Masking a harmless option
# by mistake costs a less readable URL; showing a secret costs the secret.
_SECRET = re.compile(r"pass|pwd|secret|token|apikey|accesskey|auth|credential|privatekey|signature")
# scheme://user:password@ (the password runs to the first "@", as SQLAlchemy and redis-py
# parse it: an "@" inside a password must be percent-encoded).
_AUTHORITY = re.compile(r"(://[^:/@?#]*:)[^@]*@")


def secret_option(name: str) -> bool:
    """Whether a URL query option named ``name`` carries a secret (a password, a token, a key)."""
    return _SECRET.search(re.sub(r"[-_.\s]|%5[fF]|%2[dD]", "", name.lower())) is not None


def _masked_query(query: str) -> str:
    parts = []
    for part in re.split(r"([&;])", query):
        name, equals, _ = part.partition("=")
        parts.append(f"{name}={MASK}" if equals and secret_option(name) else part)
    return "".join(parts)


def masked_url(url: object) -> str:
    """``url`` as text, fit for printing: the password of its authority and the value of every
    secret-bearing query option (`secret_option`) replaced with ``***``.

    Args:
        url: a URL as text, or a SQLAlchemy URL (shown as ``str()`` shows it, then masked).

    Returns:
        The URL's text, masked; any other object as ``str(url)``, masked as if it were a URL.
    """
    text = str(url)
    start = 0
    found = _AUTHORITY.search(text)  # first: a password may hold a "?" or a "#"
    if found is not None:
        text = f"{text[: found.start()]}{found.group(1)}{MASK}@{text[found.end() :]}"
        start = found.start() + len(found.group(1)) + len(MASK) + 1
    mark = text.find("?", start)
    if mark < 0:
        return text
    query, hash_, fragment = text[mark + 1 :].partition("#")
    return f"{text[:mark]}?{_masked_query(query)}{hash_}{_masked_query(fragment) if hash_ else ''}"
