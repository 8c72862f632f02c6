"""`RedisStore`: entries in Redis, which expires them itself.

- ``client``: the redis-py client from a URL (timeouts, retry), errors, key prefixes;
- ``entries``: an entry as stored, for listing (`StoredEntry`);
- ``store``: `RedisStore` itself.
"""

from .client import DEFAULT_PREFIX, make_client, split_url
from .entries import StoredEntry
from .store import RedisStore

__all__ = ["DEFAULT_PREFIX", "RedisStore", "StoredEntry", "make_client", "split_url"]
