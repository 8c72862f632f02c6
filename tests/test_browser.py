"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium), served by a real WSGI server on 127.0.0.1.

The screenshot of the docs (docs/img/dashboard.png) comes from `test_what_a_person_sees`: run
``FAILOVER_SCREENSHOT=docs/img/dashboard.png .venv/bin/pytest tests/test_browser.py`` to renew it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.dashboard import make_wsgi_app
from failover.payload import envelope

from .conftest import FakeClock, Upstream
from .servers import fetch, serve_wsgi

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
HOSTILE = "<img src=x onerror=\"document.title='pwned'\"><script>alert(1)</script>"

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)


def _driver(profile: Path, javascript: bool = True) -> Any:
    """Chromium under Selenium, its profile in ``profile`` (a pytest temporary directory, so
    that runs leave no profiles behind)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1360,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = _driver(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def _wait(driver: Any, condition: Any, seconds: float = 5) -> Any:
    """Wait for ``condition`` (bounded); the page may be replaced by a refresh meanwhile."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, seconds, 0.1, ignored).until(condition)


def _badge(driver: Any, name: str) -> str:
    from selenium.webdriver.common.by import By

    row = driver.find_element(By.CSS_SELECTOR, f'#failovers tr[data-name="{name}"]')
    return str(row.find_element(By.CSS_SELECTOR, ".badge").text)


def _scenario(clock: FakeClock, upstream: Upstream) -> tuple[Failover, Any]:
    engine = Failover(clock=clock, metrics=False)

    @failover.failover("countries", engine=engine, policy="never_throw", ttl="24h")
    def countries(code: str) -> object:
        return upstream({"code": code, "currency": "EUR"})

    return engine, countries


def test_what_a_person_sees(browser: Any, clock: FakeClock, upstream: Upstream) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    engine, countries = _scenario(clock, upstream)

    @failover.failover("exchange-rates", engine=engine, ttl="15m")
    def rates(currency: str) -> float:
        return 1.08

    @failover.failover("payments", engine=engine, policy="return_default", ttl="5m")
    def payments(account: str) -> list[str]:
        raise ConnectionError("payments down")

    failover.failover("weather", engine=engine, ttl="1h")(lambda city: city)

    for code in ("FR", "DE", "IT", "ES", "PT", "NL"):
        countries(code)
    for currency in ("USD", "GBP", "JPY"):
        rates(currency)
    with serve_wsgi(make_wsgi_app(engine, refresh=0.3)) as url:
        browser.get(url + "/")
        _wait(browser, lambda d: _badge(d, "countries") == "up")
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "up")

        # The upstream fails: the page refreshes itself and shows the failover degraded.
        clock.advance(minutes=40)
        upstream.fail()
        for code in ("FR", "DE", "FR"):
            countries(code)
        for currency in ("USD", "GBP", "JPY", "USD", "CHF", "USD"):
            rates(currency)
        _wait(browser, lambda d: _badge(d, "countries") == "degraded")
        assert fetch(url + "/health")[0] == 200

        for _ in range(5):
            payments("acme")  # nothing stored: not recovered, five times (at least half)
        _wait(browser, lambda d: _badge(d, "payments") == "down")
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "down")
        status, body = fetch(url + "/health")
        assert (status, json.loads(body)["status"]) == (503, "down")

        # A click shows the failover's entries, a hostile key among them, shown as text.
        now = clock()
        engine.raw_store.store(
            envelope("countries", HOSTILE, 1, now, now + timedelta(hours=1), True)
        )
        browser.find_element(By.ID, "pause").click()  # no refresh under the click
        assert browser.find_element(By.ID, "pause").text == "Resume"
        row = browser.find_element(By.CSS_SELECTOR, '#failovers tr[data-name="countries"]')
        assert "40m" in row.text  # the stale age
        row.find_element(By.LINK_TEXT, "countries").click()
        keys = _wait(
            browser,
            lambda d: [c.text for c in d.find_elements(By.CSS_SELECTOR, "#entries-table td.key")],
        )
        assert len(keys) == 7
        assert HOSTILE in keys
        assert browser.title != "pwned"
        assert len(browser.find_elements(By.TAG_NAME, "script")) == 1
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert  # noqa: B018  # an alert would have opened by now

        browser.save_screenshot(str(Path(tempfile.gettempdir()) / "failover-dashboard.png"))
        target = os.environ.get("FAILOVER_SCREENSHOT")
        if target:
            browser.execute_script("window.scrollTo(0, 0)")
            browser.save_screenshot(target)


def test_themes(browser: Any, clock: FakeClock, upstream: Upstream) -> None:
    from selenium.webdriver.common.by import By

    engine, countries = _scenario(clock, upstream)
    countries("FR")
    with serve_wsgi(make_wsgi_app(engine, refresh=60)) as url:
        browser.get(url + "/")
        browser.execute_script("localStorage.clear()")
        browser.get(url + "/")
        light = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        browser.find_element(By.ID, "theme").click()
        dark = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert light != dark
        browser.get(url + "/")  # the choice is remembered
        again = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert again == dark
        browser.find_element(By.ID, "theme").click()
        browser.execute_script("localStorage.clear()")


def test_works_without_javascript(clock: FakeClock, upstream: Upstream, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    engine, countries = _scenario(clock, upstream)
    countries("FR")
    driver = _driver(tmp_path / "chromium", javascript=False)
    try:
        with serve_wsgi(make_wsgi_app(engine)) as url:
            driver.get(url + "/")
            assert _badge(driver, "countries") == "up"
            assert not driver.find_element(By.ID, "theme").is_displayed()  # needs the script
            driver.find_element(By.LINK_TEXT, "countries").click()
            cells = driver.find_elements(By.CSS_SELECTOR, "#entries-table td.key")
            assert len(cells) == 1
    finally:
        driver.quit()


def test_entry_labels(browser: Any, clock: FakeClock, tmp_path: Path) -> None:
    """A failover that opts in shows its entries' labels (escaped, like every stored text); one
    that does not shows digests only, with no label column. The engine's page and the store's
    (``failover dashboard --store``) alike."""
    from selenium.webdriver.common.by import By

    from failover.dashboard import make_store_app
    from failover.stores.backends.sql import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    engine = Failover(store, clock=clock, metrics=False, async_writes=False, store_timeout=None)

    @failover.failover("countries", engine=engine, label=True)
    def country(code: str) -> dict[str, str]:
        return {"code": code}

    @failover.failover("accounts", engine=engine)
    def account(email: str) -> dict[str, str]:
        return {"plan": "pro"}

    country("FR")
    country(HOSTILE)
    account("ada@example.com")

    def cells(name: str, css: str) -> list[str]:
        browser.find_element(By.LINK_TEXT, name).click()
        return list(
            _wait(browser, lambda d: [c.text for c in d.find_elements(By.CSS_SELECTOR, css)])
        )

    for app in (make_wsgi_app(engine, refresh=60), make_store_app(store, clock)):
        with serve_wsgi(app) as url:
            browser.get(url + "/")
            shown = cells("countries", "#entries-table td.label")
            hostile = next(label for label in shown if label != "country(code='FR')")
            assert hostile.startswith("country(code='<img src=x onerror=")  # text, not markup
            headers = [
                th.text for th in browser.find_elements(By.CSS_SELECTOR, "#entries-table th")
            ]
            assert [h.lower() for h in headers[:2]] == ["key", "label"]  # CSS capitalises
            assert browser.title != "pwned"
            browser.get(url + "/")
            assert len(cells("accounts", "#entries-table td.key")) == 1
            assert browser.find_elements(By.CSS_SELECTOR, "#entries-table td.label") == []
            assert "ada@example.com" not in browser.page_source
    engine.close()
