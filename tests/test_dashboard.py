"""The dashboard's routes through WSGI and ASGI, mounted in Flask and FastAPI, on real stores."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

import failover
from failover import Failover
from failover.dashboard import make_asgi_app, make_store_app, make_wsgi_app
from failover.payload import envelope

from .conftest import FakeClock, Upstream
from .servers import fetch, serve_asgi

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def countries(engine: Failover, upstream: Upstream) -> Any:
    @failover.failover("countries", engine=engine, policy="never_throw", ttl="1h")
    def find(code: str) -> object:
        return upstream({"code": code})

    return find


def get(client: Client, url: str, **kwargs: Any) -> tuple[int, dict[str, str], str]:
    response = client.get(url, **kwargs)
    return response.status_code, dict(response.headers), response.get_data(as_text=True)


def test_page_api_and_health(
    engine: Failover, clock: FakeClock, upstream: Upstream, countries: Any
) -> None:
    client = Client(make_wsgi_app(engine))
    countries("FR")
    status, headers, page = get(client, "/")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert 'data-name="countries"' in page
    assert '<span class="badge up">up</span>' in page

    status, _, body = get(client, "/api/failovers")
    data = json.loads(body)
    assert data["status"] == "up"
    assert data["kpis"] == {
        "calls": 1,
        "live_percent": 100.0,
        "fresh_percent": 0.0,
        "stale_percent": 0.0,
        "not_recovered_percent": 0.0,
    }
    (row,) = data["failovers"]
    assert row["name"] == "countries"
    assert row["ttl_seconds"] == 3600  # a JSON number
    assert isinstance(row["ttl_seconds"], int)
    assert row["policy"] == "never_throw"

    assert get(client, "/health")[0] == 200
    upstream.fail()
    clock.advance(10)
    countries("FR")
    status, _, body = get(client, "/health")
    assert (status, json.loads(body)["status"]) == (200, "degraded")
    countries("DE")  # nothing stored: one call is not an outage, still degraded
    assert get(client, "/health")[0] == 200
    for _ in range(4):
        countries("DE")  # 5 of 7 calls got nothing usable: down
    status, _, body = get(client, "/health")
    assert status == 503
    assert json.loads(body)["failovers"]["countries"]["counts"]["not_recovered"] == 5
    assert client.head("/health").status_code == 503
    status, _, body = get(client, "/livez")  # the process serves: liveness says only that
    assert (status, body) == (200, "ok")


def test_entries_are_paged(engine: Failover, countries: Any, clock: FakeClock) -> None:
    client = Client(make_wsgi_app(engine))
    for code in ("FR", "DE", "IT", "ES", "PT"):
        countries(code)
    clock.advance(30)
    status, _, body = get(client, "/api/entries?name=countries&limit=2")
    assert status == 200
    first = json.loads(body)
    assert first["total"] == 5
    assert len(first["entries"]) == 2
    assert first["entries"][0]["age_seconds"] == 30
    assert "payload" not in first["entries"][0]  # payloads hidden by default
    keys = [e["key"] for e in first["entries"]]
    after = first["next_after"]
    while after is not None:
        page = json.loads(get(client, f"/api/entries?name=countries&limit=2&after={after}")[2])
        keys += [e["key"] for e in page["entries"]]
        after = page["next_after"]
    assert keys == sorted(keys)
    assert len(set(keys)) == 5

    _, _, html = get(client, "/?name=countries&limit=2")
    assert html.count('<td class="key">') == 2
    assert 'rel="next"' in html

    assert get(client, "/api/entries?name=countries&limit=0")[0] == 400
    assert get(client, "/api/entries?name=countries&limit=x")[0] == 400
    assert get(client, "/api/entries")[0] == 400
    assert get(client, "/nowhere")[0] == 404
    assert client.post("/api/failovers").status_code == 405


def test_payloads_only_when_asked(engine: Failover, countries: Any) -> None:
    countries("FR")
    hidden = Client(make_wsgi_app(engine))
    shown = Client(make_wsgi_app(engine, show_payloads=True))
    assert '"FR"' not in get(hidden, "/?name=countries")[2]
    (entry,) = json.loads(get(shown, "/api/entries?name=countries")[2])["entries"]
    assert json.loads(entry["payload"]) == {"code": "FR"}


def test_every_value_is_escaped(engine: Failover, clock: FakeClock) -> None:
    fn = failover.failover(HOSTILE, engine=engine)(lambda: 1)
    fn()
    now = clock()
    engine.raw_store.store(envelope(HOSTILE, HOSTILE, 1, now, now + timedelta(hours=1), True))
    client = Client(make_wsgi_app(engine))
    _, _, page = get(client, "/?" + "name=" + HOSTILE.replace('"', "%22"))
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # the page's own
    # Nothing is fetched from elsewhere: no URL with a host in the page.
    assert not re.search(r"(src|href)=\"(https?:)?//", page)


def test_token(engine: Failover, countries: Any) -> None:
    client = Client(make_wsgi_app(engine, token="s3cret"))
    assert get(client, "/api/failovers")[0] == 401
    assert get(client, "/api/failovers", headers={"Authorization": "Bearer nope"})[0] == 401
    ok = get(client, "/api/failovers", headers={"Authorization": "Bearer s3cret"})
    assert ok[0] == 200
    # Opened once with ?token=, the browser keeps a cookie and the address loses the token.
    response = client.get("/?token=s3cret&name=countries")
    assert response.status_code == 303
    assert response.headers["Location"] == "/?name=countries"
    assert "HttpOnly" in response.headers["Set-Cookie"]
    assert get(client, "/?name=countries")[0] == 200


def test_store_view_over_sqlite(tmp_path: Path, clock: FakeClock) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with Failover(url, clock=clock, metrics=False, async_writes=False) as eng:

        @failover.failover("rates", engine=eng, ttl="1m")
        def rate(currency: str) -> float:
            return 1.0

        for i in range(120):
            rate(f"C{i:03d}")
        clock.advance(90)
        rate("EUR")  # the only live one now
    store = failover.SqlStore(url)
    client = Client(make_store_app(store, clock))
    data = json.loads(get(client, "/api/failovers")[2])
    (name,) = data["names"]
    assert name["name"] == "rates"
    assert (name["entries"], name["live"], name["expired"]) == (121, 1, 120)
    page = json.loads(get(client, "/api/entries?name=rates&limit=50")[2])
    assert page["total"] == 121
    assert len(page["entries"]) == 50
    assert page["next_after"] == page["entries"][-1]["key"]
    assert json.loads(get(client, "/health")[2]) == {"status": "up"}
    _, _, html = get(client, "/?name=rates")
    assert "121 stored" in html
    store.close()


def test_store_view_lists_hand_written_rows_instead_of_failing(
    tmp_path: Path, clock: FakeClock
) -> None:
    import sqlite3

    path = tmp_path / "junk.db"
    store = failover.SqlStore(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO failover_store VALUES ('junk', ?, ?, ?, ?, ?, ?)",
            [
                ("huge", 1, 2**62, "json:1", "builtins.int", None),  # past datetime's range
                ("text", "abc", "def", "json:1", "builtins.int", b"\xff"),  # no time; a blob label
            ],
        )
    conn.close()
    client = Client(make_store_app(store, clock))
    status, _, _ = get(client, "/api/failovers")
    assert status == 200
    status, _, body = get(client, "/api/entries?name=junk")
    assert status == 200
    assert {e["key"]: e["label"] for e in json.loads(body)["entries"]} == {
        "huge": None,
        "text": None,
    }
    assert get(client, "/?name=junk")[0] == 200
    store.close()


def test_store_view_down(tmp_path: Path, clock: FakeClock) -> None:
    store = failover.SqlStore(f"sqlite:///{tmp_path / 'gone.db'}")
    store.close()
    (tmp_path / "gone.db").unlink()
    (tmp_path / "gone.db").mkdir()  # unopenable: a directory
    client = Client(make_store_app(store, clock))
    assert get(client, "/health")[0] == 503
    status, _, page = get(client, "/")
    assert status == 503  # the store cannot be read: said on the page, and by the status
    assert 'role="alert"' in page


# -- mounted in web frameworks -----------------------------------------------------------------


@pytest.fixture
def default_engine(clock: FakeClock) -> Failover:
    return failover.configure(clock=clock, metrics=False)  # conftest closes it


def test_mounted_in_fastapi(default_engine: Failover, upstream: Upstream) -> None:
    from fastapi import FastAPI

    @failover.failover("fx")  # the default engine, looked up per request
    def fx(code: str) -> object:
        return upstream(code)

    app = FastAPI()
    app.mount("/failover", make_asgi_app())
    fx("EUR")
    with serve_asgi(app) as url:
        status, page = fetch(f"{url}/failover/")
        assert status == 200
        assert 'data-name="fx"' in page
        assert 'href="/failover/?name=fx' in page  # links stay under the mount
        status, body = fetch(f"{url}/failover/health")
        assert (status, json.loads(body)["status"]) == (200, "up")
        assert json.loads(fetch(f"{url}/failover/api/entries?name=fx")[1])["total"] == 1
    with serve_asgi(make_asgi_app(default_engine)) as url:  # on its own, lifespan included
        assert fetch(f"{url}/health")[0] == 200


def test_mounted_in_flask(engine: Failover, countries: Any) -> None:
    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    app = Flask(__name__)
    app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, {"/failover": make_wsgi_app(engine)}
    )
    countries("FR")
    client = app.test_client()
    page = client.get("/failover/")
    assert page.status_code == 200
    assert 'href="/failover/?name=countries' in page.get_data(as_text=True)
    assert client.get("/failover/health").get_json()["status"] == "up"


# -- failover dashboard (the command) ----------------------------------------------------------


def test_the_command_serves_a_store_and_stops_on_a_signal(tmp_path: Path) -> None:
    import signal

    from .test_cli import free_port, start_cli

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with Failover(url, metrics=False, async_writes=False) as eng:
        failover.failover("rates", engine=eng)(_rate)("EUR")
    port = free_port()
    command = ["dashboard", "--store", url, "--port", str(port), "--auth-token", "t0k"]
    proc, started = start_cli(*command)
    try:
        assert f"on http://127.0.0.1:{port}/" in started, started
        base = f"http://127.0.0.1:{port}"
        assert fetch(f"{base}/api/failovers")[0] == 401
        status, body = fetch(f"{base}/api/failovers", {"Authorization": "Bearer t0k"})
        assert status == 200
        assert [n["name"] for n in json.loads(body)["names"]] == ["rates"]
        assert fetch(f"{base}/health", {"Authorization": "Bearer t0k"})[0] == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "dashboard stopped (SIGTERM)" in out
    assert err == ""


def _rate(currency: str) -> float:
    return 1.0


def test_the_command_refuses_beyond_loopback_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from failover.cli import main
    from failover.cli.dashboard import loopback as _loopback

    assert _loopback("127.0.0.1")
    assert _loopback("::1")
    assert _loopback("localhost")
    assert not _loopback("0.0.0.0")
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    failover.SqlStore(url).close()
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: refused without a token; with
    # --insecure, the warning, then one error line.
    command = ["dashboard", "--store", url, "--host", "192.0.2.1", "--port", "8050"]
    assert main(command) == 1
    assert "refusing to serve the dashboard on 192.0.2.1 without a token" in capsys.readouterr().err
    assert main([*command, "--insecure"]) == 1
    err = capsys.readouterr().err
    assert "without a token (--insecure)" in err
    assert "cannot listen on 192.0.2.1:8050" in err
    assert main(["dashboard", "--store", "memory://"]) == 1
    assert "needs a durable store" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("//evil.example/", "/evil.example/"),  # never a redirect to another host
        ("/a b\r\nSet-Cookie: x=1", "/a%20b%0D%0ASet-Cookie%3A%20x%3D1"),
    ],
)
def test_the_token_redirect_stays_on_the_dashboard(
    engine: Failover, path: str, location: str
) -> None:
    client = Client(make_wsgi_app(engine, token="s3cret"))
    response = client.get("/", query_string="token=s3cret", environ_overrides={"PATH_INFO": path})
    assert response.status_code == 303
    assert response.headers["Location"] == location
    assert "x=1" not in response.headers.get("Set-Cookie", "")
