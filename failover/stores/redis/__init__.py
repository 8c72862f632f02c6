"""`RedisStore`: entries in Redis, which expires them itself.

- ``client``: the redis-py client from a URL (timeouts, retry), errors, the store's keys;
- ``browsing``: pages of a name's entries, as stored, through its key-order index;
- ``store``: `RedisStore` itself.
"""

from ..browsing import StoredEntry
from .client import DEFAULT_PREFIX, make_client, split_url
from .store import RedisStore

__all__ = ["DEFAULT_PREFIX", "RedisStore", "StoredEntry", "make_client", "split_url"]
