"""Instructions of the write path of stores that do I/O, counted by valgrind's callgrind (as
``bench/instructions.py`` counts the decorated call: repeatable on a loaded machine).

    python bench/write_instructions.py [--tree PATH ...]

Paths (each in a process of its own, counted inside ``builtin_sorted`` only):

- ``sqlite batch, per row``: `SqlStore.store_many` of 500 entries (a small dict each, every key
  stored already, so each row is an update) on a SQLite file, per row: the encoding, the upsert
  and SQLite's own work, as the async-writes worker pays it.
- ``queued success, hot key`` and ``queued success, new key``: a decorated call's success on an
  `AsyncWriteStore`, counted on the caller's thread while the worker is held inside the store
  (so that it takes no instruction of the count): a key whose write still waits in the queue
  (replaced), or a key not queued (a new place).

``--tree`` compares checkouts, as in ``bench/instructions.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from instructions import command_line, instructions

PATHS = ("sqlite batch, per row", "queued success, hot key", "queued success, new key")
ROWS = 500
BATCHES = 10

_ONE = """
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta

import failover
from failover import ReferentialPayload
from failover.stores import AsyncWriteStore, InMemoryStore

path, n = sys.argv[1], int(sys.argv[2])

if path == "sqlite batch, per row":
    from failover.stores.backends.sql import SqlStore

    store = SqlStore(f"sqlite:///{tempfile.mkdtemp()}/batch.db")
    now = datetime.now(UTC)

    def batch(i):
        return [
            ReferentialPayload("country", f"K{j:04d}", {"code": f"K{j:04d}", "name": "France",
                               "currency": "EUR"}, now + timedelta(seconds=i),
                               now + timedelta(days=1), True)
            for j in range(%(rows)d)
        ]

    batches = [batch(i) for i in range(n + 2)]
    store.store_many(batches[0])
    store.store_many(batches[1])
    sorted(range(n), key=lambda i: store.store_many(batches[i + 2]))
    store.close()
    raise SystemExit

gate = threading.Event()


class Held(InMemoryStore):
    def store_many(self, payloads):
        gate.wait()
        return super().store_many(payloads)

    def store(self, payload):
        gate.wait()
        return super().store(payload)


engine = failover.Failover(AsyncWriteStore(Held(), queue_size=100_000), metrics=False)
country = failover.failover("country", engine=engine)(
    lambda code: {"code": code, "name": "France", "currencies": ["EUR"]}
)
keys = [f"K{i:05d}" for i in range(1_000 if path.endswith("hot key") else 20_000)]
for k in keys[:1_000]:  # the worker starts, takes the first write and is held
    country(k)
size = len(keys)
sorted(range(n), key=lambda i: country(keys[(i + 1_000) %% size]) and 0)
gate.set()
engine.close()
"""


def main() -> None:
    args, trees = command_line(__doc__ or "", PATHS, 5_000)  # --calls: per queued path
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "one.py"
        script.write_text(_ONE % {"rows": ROWS})
        print("| path | " + " | ".join(str(t) for t in trees) + " |")
        print("|---|" + "---:|" * len(trees))
        for path in args.path or PATHS:
            if path.startswith("sqlite"):
                n, per = BATCHES, BATCHES * ROWS
            else:
                n = per = args.calls
            counts = [instructions(t, path, n, script) // per for t in trees]
            print(f"| {path} | " + " | ".join(f"{c:,}" for c in counts) + " |")


if __name__ == "__main__":
    main()
