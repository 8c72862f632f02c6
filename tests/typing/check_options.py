"""Checked by ``mypy --strict`` (``make types``), never run: every setting of
`failover.settings.Options` spelled as a keyword is accepted, typed as `Options` says, and a
wrong value or name is refused. ``tests/test_public_face.py`` checks that the call below spells
each setting of `Options` once (an option added there needs its line here)."""

from __future__ import annotations

from datetime import timedelta

import pybreaker

import failover
from failover import ExceptionPolicy, FixedTtl, ListSplitter


def to_key(code: str) -> object:
    return code


every = failover.failover(
    "every",
    ttl=timedelta(hours=1),
    domain="countries",
    key=to_key,
    expiry=FixedTtl(timedelta(hours=1)),
    exceptions=lambda exc: isinstance(exc, OSError),
    exclude=(KeyError, LookupError),
    store_if=lambda value: value is not None,
    policy=ExceptionPolicy.NEVER_THROW,
    on_recovered=lambda ctx, value: value,
    splitter=ListSplitter("code"),
    recover_all=False,
    breaker=pybreaker.CircuitBreaker(),
    max_concurrency=None,
    bulkhead="upstream",
    weight=2,
    acquire_timeout="250ms",
    timeout=2.5,
    store_interval=None,
    single_flight=True,
    fresh_for="5m",
    refresh_ahead=0.8,
    throttle="30s",
    ttl_jitter=0.0,
    label=True,
    tags=lambda code: [f"country:{code}"],
    rate="100/s",
    engine=failover.Failover(),
)

failover.failover(name="by-keyword", ttl="15m", label=lambda code: code)
failover.failover(ttl=None)  # type: ignore[call-overload]
failover.failover("wrong", weight="2")  # type: ignore[call-overload]
failover.failover("wrong", tll="1h")  # type: ignore[call-overload]
