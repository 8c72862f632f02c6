"""One process of a service, for tests/test_cluster_dashboard.py: an engine on a shared store
that publishes its health (``publish_health``), driven line by line on stdin.

Usage: ``python tests/cluster_worker.py STORE_URL ROLE INTERVAL``. It prints ``ready`` once its
engine runs (its first publish done), then for each line on stdin:

- ``go``: make the calls of ``ROLE``, flush the writes, publish; prints ``published PROCESS_ID``;
- ``close``: close the engine (which removes its row); prints ``closed`` and exits.

Roles: ``ok`` (the upstream answers: FR, DE, IT, and a rate live then fresh), ``stale`` (the
upstream is down: FR and DE served stale from what ``ok`` stored, ES not recovered), ``partial``
(FR live, then the upstream goes down and FR is served stale).
"""

from __future__ import annotations

import sys

import failover
from failover import Failover


def main() -> int:
    url, role, every = sys.argv[1:4]
    # A generous store deadline: a loaded test machine must not turn a stale answer into a miss.
    engine = Failover(store=url, metrics=False, publish_health=every, store_timeout="10s")
    down = role == "stale"

    @failover.failover("countries", engine=engine, policy="never_throw", ttl="1d")
    def countries(code: str) -> dict[str, str]:
        if down:
            raise ConnectionError("upstream down")
        return {"code": code}

    @failover.failover("rates", engine=engine, policy="never_throw", ttl="1h", fresh_for="10m")
    def rates(currency: str) -> float:
        if down:
            raise TimeoutError("rates down")
        return 1.08

    publisher = engine.publisher
    assert publisher is not None
    assert publisher.published.wait(30)
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "go":
            if role == "ok":
                for code in ("FR", "DE", "IT"):
                    countries(code)
                rates("EUR")
                rates("EUR")  # within fresh_for: from the store
            elif role == "stale":
                for code in ("FR", "DE", "ES"):
                    countries(code)
            else:
                countries("FR")
                down = True
                countries("FR")
            engine.flush(30)
            assert publisher.publish()
            print("published", publisher.process, flush=True)
        elif command == "close":
            engine.close()
            print("closed", flush=True)
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
