"""Checked by ``mypy --strict`` (``make types``), never run: the built-in splitters are
`PayloadSplitter`s of the types they split, and the decorator keeps signatures with one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_type

import failover
from failover import DictSplitter, ListSplitter, PayloadSplitter


@dataclass(frozen=True)
class Country:
    code: str


by_code: PayloadSplitter[list[Country], Country] = ListSplitter[Country]("code")
by_callable: PayloadSplitter[list[Country], Country] = ListSplitter[Country](lambda c: c.code)
by_key: PayloadSplitter[dict[str, float], float] = DictSplitter[str, float]()


@failover.failover("countries", domain="country", splitter=ListSplitter[Country]("code"))
def find_countries(codes: str) -> list[Country]:
    return [Country(c) for c in codes.split(",")]


assert_type(find_countries("FR,DE"), list[Country])
