"""`RedisStore`: entries in Redis, which expires them itself.

- ``client``: the redis-py client from a URL (timeouts, retry), errors, the store's keys;
- ``values``: an entry's stored value (header and payload), written and read back;
- ``writes``: the commands of a write, the name's indexes kept up with it;
- ``commands``: a store's commands run, their errors named; ``topology``: server, sentinels or
  cluster; ``aio``: the async side, one client per event loop;
- ``browsing``: pages of a name's entries, as stored, through its key-order index;
- ``permits``: the keys and Lua scripts of `failover.RedisPermits`;
- ``sharing``: the client the stores of `RedisStore.per_tenant` share;
- ``store``: `RedisStore` itself.
"""

from ...browsing import StoredEntry
from .client import DEFAULT_PREFIX, make_client, split_url
from .store import RedisStore

__all__ = ["DEFAULT_PREFIX", "RedisStore", "StoredEntry", "make_client", "split_url"]
