"""Checked by ``mypy --strict`` (``make types``), never run: the decorator keeps signatures."""

from __future__ import annotations

from typing import Any, assert_type

import failover
from failover import ReferentialPayload


@failover.failover("country", ttl="24h")
def find_country(code: str, lang: str = "en") -> dict[str, str]:
    return {"code": code}


@failover.failover("rates", ttl="15m", policy="never_throw")
async def fetch_rates(base: str) -> list[float]:
    return [1.0]


@failover.failover
def bare(x: int) -> int:
    return x


class Repo:
    @failover.failover("repo.get")
    def get(self, code: str) -> int:
        return 1


async def check() -> None:
    assert_type(find_country("FR"), dict[str, str])
    assert_type(find_country("FR", lang="fr"), dict[str, str])
    assert_type(find_country.referential("FR"), ReferentialPayload[dict[str, str]])
    assert_type(find_country.peek("FR"), ReferentialPayload[dict[str, str]] | None)
    assert_type(find_country.invalidate("FR"), None)
    assert_type(find_country.expire("FR"), bool)
    assert_type(find_country.invalidate_all(), int)
    assert_type(fetch_rates.expire("EUR"), bool)
    assert_type(fetch_rates.invalidate_all(), int)
    assert_type(find_country.definition, failover.FailoverDefinition)
    assert_type(await fetch_rates("EUR"), list[float])
    assert_type(await fetch_rates.referential("EUR"), ReferentialPayload[list[float]])
    assert_type(fetch_rates.peek("EUR"), ReferentialPayload[list[float]] | None)
    assert_type(find_country.refresh("FR"), dict[str, str])
    assert_type(await fetch_rates.refresh("EUR"), list[float])
    with failover.refreshing(), failover.disabled():
        assert_type(failover.stale_entry(), ReferentialPayload[Any] | None)
    assert_type(bare(1), int)
    assert_type(Repo().get("x"), int)
    assert_type(Repo().get.referential("x"), ReferentialPayload[int])

    find_country(1)  # type: ignore[arg-type]
    find_country("FR", language="fr")  # type: ignore[call-arg]
    await fetch_rates.referential(base=2)  # type: ignore[arg-type]
    find_country.refresh(2)  # type: ignore[arg-type]
