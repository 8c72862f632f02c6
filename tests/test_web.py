"""`failover.served` and `failover.asgi.StaleHeaders`, through real FastAPI and Starlette apps
and their test client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from fastapi import BackgroundTasks, FastAPI, Response, WebSocket
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.routing import Mount, Route

import failover
from failover import served
from failover.asgi import StaleHeaders

from .conftest import FakeClock, Upstream

STALE_HEADERS = ("age", "warning", "x-failover-stale")
WARNING = '110 - "Response is Stale"'


class Service:
    """Three failovers over one controllable upstream each, on an engine with a fake clock."""

    def __init__(self, clock: FakeClock, registry: CollectorRegistry | None = None) -> None:
        self.clock = clock
        self.engine = failover.Failover(clock=clock, metrics=registry or False)
        self.rates_up = Upstream()
        self.news_up = Upstream()
        self.tags_up = Upstream()

        @failover.failover("rates", engine=self.engine)
        def rates() -> dict[str, float]:
            return self.rates_up({"eur": 1.1})  # type: ignore[return-value]

        @failover.failover("news", engine=self.engine)
        async def news() -> list[str]:
            return self.news_up(["live news"])  # type: ignore[return-value]

        @failover.failover("tags", engine=self.engine, policy="return_default")
        def tags() -> list[str]:
            return self.tags_up(["a", "b"])  # type: ignore[return-value]

        self.rates, self.news, self.tags = rates, news, tags

    def warm(self) -> None:
        """One live call of each, stored at the clock's time."""
        self.rates()
        asyncio.run(self.news())
        self.tags()


@pytest.fixture
def service(clock: FakeClock) -> Iterator[Service]:
    s = Service(clock)
    yield s
    s.engine.close()


def make_app(service: Service, **options: Any) -> FastAPI:
    app = FastAPI()
    app.add_middleware(StaleHeaders, **options)

    @app.get("/sync")
    def sync_endpoint() -> dict[str, float]:  # runs in Starlette's threadpool
        return service.rates()

    @app.get("/async")
    async def async_endpoint() -> list[str]:
        return await service.news()

    @app.get("/both")
    async def both() -> dict[str, Any]:
        # A sync failover handed to the threadpool from an async endpoint, then an async one.
        return {"rates": await run_in_threadpool(service.rates), "news": await service.news()}

    @app.get("/tags")
    def tags() -> list[str]:
        return service.tags()

    @app.get("/own-age")
    def own_age(response: Response) -> dict[str, float]:
        response.headers["Age"] = "7"
        return service.rates()

    return app


def stale_headers(response: Any) -> dict[str, str]:
    return {h: response.headers[h] for h in STALE_HEADERS if h in response.headers}


def test_live_answers_get_no_headers(service: Service) -> None:
    with TestClient(make_app(service)) as client:
        for path in ("/sync", "/async", "/both", "/tags"):
            response = client.get(path)
            assert response.status_code == 200
            assert stale_headers(response) == {}


def test_a_stale_answer_from_a_sync_endpoint(service: Service) -> None:
    service.warm()
    service.clock.advance(90.7)
    service.rates_up.fail()
    with TestClient(make_app(service)) as client:
        response = client.get("/sync")
    assert response.json() == {"eur": 1.1}
    assert stale_headers(response) == {"age": "90", "warning": WARNING, "x-failover-stale": "rates"}


def test_a_stale_answer_from_an_async_endpoint(service: Service) -> None:
    service.warm()
    service.clock.advance(30)
    service.news_up.fail()
    with TestClient(make_app(service)) as client:
        response = client.get("/async")
        assert response.json() == ["live news"]
        assert stale_headers(response) == {
            "age": "30",
            "warning": WARNING,
            "x-failover-stale": "news",
        }
        service.news_up.recover()
        assert stale_headers(client.get("/async")) == {}  # nothing carried over between requests


def test_age_is_the_oldest_value_and_every_name_is_listed(service: Service) -> None:
    service.rates()
    service.clock.advance(600)
    asyncio.run(service.news())  # stored 10 minutes after rates
    service.clock.advance(60)
    service.rates_up.fail()
    service.news_up.fail()
    with TestClient(make_app(service)) as client:
        response = client.get("/both")
    assert response.json() == {"rates": {"eur": 1.1}, "news": ["live news"]}
    assert stale_headers(response) == {
        "age": "660",
        "warning": WARNING,
        "x-failover-stale": "rates, news",
    }


def test_a_policy_made_value_is_reported_without_age(service: Service) -> None:
    service.tags_up.fail()
    with TestClient(make_app(service)) as client:
        response = client.get("/tags")
    assert response.json() == []
    assert stale_headers(response) == {"warning": WARNING, "x-failover-stale": "tags"}


def test_headers_the_response_has_are_kept(service: Service) -> None:
    service.warm()
    service.clock.advance(90)
    service.rates_up.fail()
    with TestClient(make_app(service)) as client:
        response = client.get("/own-age")
    assert response.headers.get_list("age") == ["7"]
    assert response.headers["x-failover-stale"] == "rates"


def test_options(service: Service) -> None:
    service.warm()
    service.clock.advance(90)
    service.rates_up.fail()
    app = make_app(service, age=False, warning=False, header="X-Served-Stale")
    with TestClient(app) as client:
        response = client.get("/sync")
    assert stale_headers(response) == {}
    assert response.headers["x-served-stale"] == "rates"
    with TestClient(make_app(service, header=None)) as client:
        assert stale_headers(client.get("/sync")) == {"age": "90", "warning": WARNING}


@pytest.mark.parametrize("header", ["", "X Stale", "X-Stale:", "Ünïcode"])
def test_a_bad_header_name_is_refused(header: str) -> None:
    with pytest.raises(failover.ConfigurationError, match="StaleHeaders: header"):
        StaleHeaders(FastAPI(), header=header)


def test_names_are_made_safe_for_a_header(clock: FakeClock) -> None:
    engine = failover.Failover(clock=clock, metrics=False)

    @failover.failover("prix, café", engine=engine, policy="never_throw")
    def odd() -> None:
        raise ConnectionError

    app = FastAPI()
    app.add_middleware(StaleHeaders)
    app.get("/")(odd)
    with TestClient(app) as client:
        assert client.get("/").headers["x-failover-stale"] == "prix__caf_"
    engine.close()


def test_streaming_responses_get_what_was_known_when_they_started(service: Service) -> None:
    service.warm()
    service.clock.advance(45)
    service.rates_up.fail()
    service.news_up.fail()
    app = make_app(service)

    @app.get("/stream")
    def stream() -> StreamingResponse:
        rates = service.rates()  # before the response starts: reported

        async def body() -> AsyncIterator[bytes]:
            yield f"eur={rates['eur']}\n".encode()
            news = await service.news()  # after the headers went out: cannot be
            yield f"{news[0]}\n".encode()

        return StreamingResponse(body(), media_type="text/plain")

    with TestClient(app) as client:
        response = client.get("/stream")
    assert response.text == "eur=1.1\nlive news\n"
    assert response.headers["x-failover-stale"] == "rates"


async def test_the_start_message_is_passed_on_at_once() -> None:
    """Nothing is held back: the app's next message waits for nothing but the middleware."""
    sent: list[dict[str, Any]] = []
    seen_before_body: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        made = failover.ReferentialPayload("x", "k", 1, None, None, False)  # no time: no Age
        served.record(made, failover.get_engine().clock)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen_before_body.extend(m["type"] for m in sent)
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    await StaleHeaders(app)({"type": "http"}, receive, send)
    assert seen_before_body == ["http.response.start"]
    assert sent[0]["headers"] == [
        (b"warning", b'110 - "Response is Stale"'),
        (b"x-failover-stale", b"x"),
    ]
    assert [m.get("body") for m in sent[1:]] == [b"a", b"b"]


def test_background_tasks_run_after_the_response(service: Service) -> None:
    service.warm()
    service.clock.advance(45)
    service.news_up.fail()
    app = make_app(service)
    done = threading.Event()

    async def refresh() -> None:
        await service.news()  # stale, after the response went out: nowhere to report it
        done.set()

    @app.get("/with-background")
    def with_background(tasks: BackgroundTasks) -> dict[str, float]:
        tasks.add_task(refresh)
        return service.rates()

    with TestClient(app) as client:
        response = client.get("/with-background")
        assert done.wait(5)
        assert stale_headers(response) == {}
        assert stale_headers(client.get("/sync")) == {}


def test_nested_apps(service: Service) -> None:
    service.warm()
    service.clock.advance(90)
    service.rates_up.fail()

    def rates(request: Any) -> Response:
        return Response(str(service.rates()["eur"]))

    inner = Starlette(routes=[Route("/rates", rates)])
    outer = FastAPI()
    outer.mount("/inner", inner)
    outer.add_middleware(StaleHeaders)
    with TestClient(outer) as client:
        response = client.get("/inner/rates")
    assert response.text == "1.1"
    assert stale_headers(response) == {"age": "90", "warning": WARNING, "x-failover-stale": "rates"}

    # Both levels wrapped: each header once.
    wrapped = Starlette(routes=[Route("/rates", rates)])
    wrapped.add_middleware(StaleHeaders)
    both = Starlette(routes=[Mount("/inner", wrapped)])
    both.add_middleware(StaleHeaders)
    with TestClient(both) as client:
        response = client.get("/inner/rates")
    for header in STALE_HEADERS:
        assert len(response.headers.get_list(header)) == 1, header


def test_websockets_and_lifespan_pass_through(clock: FakeClock) -> None:
    service = Service(clock, CollectorRegistry())
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        events.append("startup")
        yield
        service.engine.close()  # flush pending writes, stop schedulers
        events.append("closed")

    app = FastAPI(lifespan=lifespan)
    app.add_middleware(StaleHeaders)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_json(await service.news())
        await websocket.close()

    service.warm()
    service.news_up.fail()
    with TestClient(app) as client, client.websocket_connect("/ws") as socket:
        assert socket.receive_json() == ["live news"]
    assert events == ["startup", "closed"]


def test_metrics_route_answers_without_a_redirect(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    service = Service(clock, registry)
    app = make_app(service)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    service.warm()
    service.rates_up.fail()
    with TestClient(app) as client:
        client.get("/sync")
        response = client.get("/metrics", follow_redirects=False)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'failover_recoveries_total{name="rates",outcome="recovered"} 1.0' in response.text
    service.engine.close()


# -- failover.served without a web framework -------------------------------------------------------


def test_collect_outside_a_web_app(service: Service) -> None:
    service.warm()
    service.clock.advance(timedelta(minutes=5).total_seconds())
    service.rates_up.fail()
    assert served._current.get() is None
    service.rates()  # nothing collects: nothing recorded anywhere
    with served.collect() as outer:
        service.rates()
        with served.collect() as inner:
            service.tags.invalidate()
            service.tags_up.fail()
            service.tags()  # nothing stored: the policy's value
        worker = threading.Thread(target=service.rates)  # a plain thread copies no context
        worker.start()
        worker.join()
    assert (inner.names, inner.age) == (("tags",), None)
    assert (outer.names, outer.age) == (("rates", "tags"), 300.0)
    assert bool(outer)
    assert repr(outer) == "StaleReport(names=('rates', 'tags'), age=300.0)"
    with served.collect() as quiet:
        service.rates_up.recover()
        service.rates()
    assert not quiet
    assert (quiet.names, quiet.age) == ((), None)


def test_a_failing_clock_costs_the_age_not_the_call(service: Service) -> None:
    service.warm()
    service.rates_up.fail()

    def broken() -> Any:
        raise OSError("clock gone")

    stale = service.rates.referential()
    with served.collect() as report:
        served.record(stale, broken)
    assert (report.names, report.age) == (("rates",), None)


def test_the_stale_header_names_the_failover_not_its_domain(clock: FakeClock) -> None:
    engine = failover.Failover(clock=clock, metrics=False)
    up = Upstream()

    @failover.failover("countries.v2", domain="countries", engine=engine)
    def countries() -> list[str]:
        return up(["FR"])  # type: ignore[return-value]

    app = FastAPI()
    app.add_middleware(StaleHeaders)

    @app.get("/countries")
    def endpoint() -> list[str]:
        return countries()

    with TestClient(app) as client:
        assert client.get("/countries").json() == ["FR"]
        up.fail()
        stale = client.get("/countries")
    assert stale.json() == ["FR"]
    assert stale.headers["x-failover-stale"] == "countries.v2"  # what the user wrote
    assert countries.referential().name == "countries"  # the entry's address: the domain
    engine.close()
