"""A breaker whose state lives in Redis trips for every process at once (issue 12): two real
processes, one real ``redis-server``, pybreaker's own ``CircuitRedisStorage``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import redis_server

ROOT = Path(__file__).resolve().parent.parent

PROCESS = r"""
import json, sys
import pybreaker, redis
import failover

url, namespace, role = sys.argv[1:4]
client = redis.Redis.from_url(url)  # bytes replies, as pybreaker expects
engine = failover.Failover(
    metrics=False,
    breaker_defaults={
        "fail_max": 3,
        "reset_timeout": 600,
        "state_storage": lambda name: pybreaker.CircuitRedisStorage(
            pybreaker.STATE_CLOSED, client, namespace=f"{namespace}:{name}"
        ),
    },
)
calls = []


@failover.failover("shared.rates", engine=engine, breaker=True, policy="never_throw")
def rates(base: str) -> dict[str, float]:
    calls.append(base)
    if role == "tripper":
        raise ConnectionError("rates service down")
    return {"USD": 1.08}


causes = [type(rates.referential("EUR").cause).__name__ for _ in range(5)]
breaker = engine.breaker(rates.definition)
print(json.dumps({"calls": len(calls), "causes": causes, "state": breaker.current_state}))
engine.close()
"""


def run(url: str, namespace: str, role: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, url, namespace, role],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_one_process_trips_the_breaker_for_every_process() -> None:
    server = redis_server.server()
    namespace = redis_server.unique_prefix().rstrip(":")

    tripper = run(server.url, namespace, "tripper")
    # Three failures reach the upstream and open the shared breaker; the next two are refused.
    assert tripper["calls"] == 3
    assert tripper["causes"] == ["ConnectionError"] * 3 + ["CircuitBreakerError"] * 2
    assert tripper["state"] == "open"

    other = run(server.url, namespace, "other")
    # A process that never saw a failure finds the breaker open in Redis: its upstream, which
    # would answer, is not called at all; every call is refused at once and recovers.
    assert other["calls"] == 0
    assert other["causes"] == ["CircuitBreakerError"] * 5
    assert other["state"] == "open"

    # The control: the same process on another namespace (another shared breaker) calls its
    # upstream every time: what stopped the second process was the first one's trip.
    alone = run(server.url, namespace + "-other", "other")
    assert alone["calls"] == 5
    assert alone["causes"] == ["NoneType"] * 5
    assert alone["state"] == "closed"
