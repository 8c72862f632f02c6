"""The cluster dashboard: three real processes (tests/cluster_worker.py) publish their health
to one SQLite file, or to one real redis-server, and the store dashboard (what ``failover
dashboard --store URL`` serves) adds them up, read in a real headless Chromium.

The screenshot of the docs (docs/img/cluster-dashboard.png) comes from this test: run
``FAILOVER_CLUSTER_SCREENSHOT=docs/img/cluster-dashboard.png .venv/bin/pytest
tests/test_cluster_dashboard.py -k sqlite`` to renew it.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from failover.dashboard import make_store_app
from failover.stores import make_store

from . import redis_server
from .conftest import FakeClock
from .servers import fetch, serve_wsgi
from .test_browser import CHROMEDRIVER, CHROMIUM, _driver, _wait

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)

WORKER = Path(__file__).with_name("cluster_worker.py")
ROOT = WORKER.parent.parent


class Worker:
    """One process of the service: tests/cluster_worker.py, driven through its stdin."""

    def __init__(self, url: str, role: str, every: str) -> None:
        self.role = role
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), url, role, every],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.process = ""

    def line(self, timeout: float = 60) -> str:
        """The worker's next line (bounded: a worker that hangs fails the test)."""
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            assert sel.select(timeout), f"worker {self.role} said nothing in {timeout}s"
        return self.proc.stdout.readline().strip()

    def tell(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.line()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cluster.db'}"
    return f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = _driver(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def _kpi(driver: Any, label: str) -> str:
    from selenium.webdriver.common.by import By

    card = driver.find_element(By.CSS_SELECTOR, f'#cluster-kpis [data-kpi="{label}"] .value')
    return str(card.text)


def _cell(driver: Any, name: str, column: str) -> str:
    from selenium.webdriver.common.by import By

    row = f'#cluster-failovers tr[data-name="{name}"]'
    return str(driver.find_element(By.CSS_SELECTOR, f'{row} [data-col="{column}"]').text)


def _processes(driver: Any) -> set[str]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "#cluster-processes tr[data-process]")
    return {str(r.get_attribute("data-process")) for r in rows}


def test_three_processes_add_up_on_the_store_dashboard(store_url: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    # "stale" publishes every minute: its row expires 3 minutes after its last publish.
    workers = [Worker(store_url, "ok", "1h"), Worker(store_url, "stale", "1m")]
    workers.append(Worker(store_url, "partial", "1h"))
    ok, stale, partial = workers
    store = make_store(store_url)
    try:
        for worker in workers:
            assert worker.line() == "ready"
        for worker in workers:  # in turn: "stale" recovers what "ok" stored
            said, worker.process = worker.tell("go").split()
            assert said == "published"

        clock = FakeClock(datetime.now(UTC))  # the dashboard's: moved to expire rows
        with serve_wsgi(make_store_app(store, clock)) as url:
            browser.get(url + "/")
            assert _kpi(browser, "Processes") == "3"
            assert _kpi(browser, "Calls") == "10"  # 3 + 3 + 2 countries, a rate live then fresh
            assert _kpi(browser, "Served stale") == "3"
            assert _kpi(browser, "Not recovered") == "1"
            expected = {"processes": "3", "calls": "8", "live": "4", "stale": "3"}
            assert {c: _cell(browser, "countries", c) for c in expected} == expected
            assert _cell(browser, "countries", "not_recovered") == "1"
            assert _cell(browser, "rates", "processes") == "3"
            assert _cell(browser, "rates", "calls") == "2"
            assert _cell(browser, "rates", "fresh") == "1"
            countries = browser.find_element(
                By.CSS_SELECTOR, '#cluster-failovers tr[data-name="countries"]'
            )
            assert countries.find_element(By.CSS_SELECTOR, ".badge").text == "degraded"
            assert "2 degraded, 1 up" in countries.text
            assert browser.find_element(By.ID, "status").text == "degraded"
            assert _processes(browser) == {w.process for w in workers}
            # The store's own view is still there: the names it holds.
            assert browser.find_element(By.CSS_SELECTOR, '#failovers tr[data-name="countries"]')

            screenshot = os.environ.get("FAILOVER_CLUSTER_SCREENSHOT")
            if screenshot and "sqlite" in store_url:
                browser.execute_script("window.scrollTo(0, 0)")
                browser.save_screenshot(screenshot)

            status, body = fetch(url + "/api/failovers")
            cluster = json.loads(body)["cluster"]
            assert status == 200
            totals = cluster["totals"]
            assert (totals["processes"], totals["calls"], totals["stale"]) == (3, 10, 3)
            assert len(cluster["processes"]) == 3
            by_name = {f["name"]: f for f in cluster["failovers"]}
            assert by_name["countries"]["statuses"] == {"degraded": 2, "up": 1}
            assert by_name["countries"]["last_failure"] == "ConnectionError"
            assert by_name["rates"]["statuses"] == {"up": 1, "idle": 2}

            # "partial" closes (its row goes); "stale" dies (its row stays until it expires).
            assert partial.tell("close") == "closed"
            stale.stop()
            browser.refresh()
            _wait(browser, lambda d: _processes(d) == {ok.process, stale.process})
            assert _kpi(browser, "Processes") == "2"
            assert _kpi(browser, "Served stale") == "2"

            clock.advance(minutes=4)  # past the dead process's row, within the live one's
            browser.refresh()
            _wait(browser, lambda d: _processes(d) == {ok.process})
            assert _kpi(browser, "Calls") == "5"
            assert _kpi(browser, "Served stale") == "0"
            assert browser.find_element(By.ID, "status").text == "up"

        assert ok.tell("close") == "closed"
        assert store.health_rows(clock()) == []  # type: ignore[attr-defined]
    finally:
        for worker in workers:
            worker.stop()
        store.close()
