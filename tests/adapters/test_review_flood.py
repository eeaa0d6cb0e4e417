"""A flood of requests to /metrics, each with a token nobody has reviewed yet, costs the API
server a bounded number of reviews and holds up neither the operator's other threads nor a
scrape whose token is already reviewed. The API server is a local HTTP server whose reviews
wait on a gate, so "the reviews are slow" is a state of the test, not a duration."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from eventhub_balancer.adapters import accessreviews, metricsaccess

PROMETHEUS = "prometheus-token"


class SlowApiServer:
    """TokenReviews and SubjectAccessReviews, each answered once `gate` opens; counts them."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.reviews = 0
        #: called (in the server's thread) as each review arrives
        self.on_arrival: Callable[[], object] = lambda: None
        self._lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner._lock:
                    owner.reviews += 1
                owner.on_arrival()
                owner.gate.wait(30)
                spec = body["spec"]
                if body["kind"] == "TokenReview":
                    ok = spec["token"] == PROMETHEUS
                    status: dict[str, Any] = {"authenticated": ok}
                    if ok:
                        status["user"] = {"username": "system:serviceaccount:monitoring:prom"}
                else:
                    status = {"allowed": True}
                answer = json.dumps({**body, "status": status}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def api() -> Iterator[SlowApiServer]:
    server = SlowApiServer()
    yield server
    server.close()


def _reviews(api: SlowApiServer) -> accessreviews.AccessReviews:
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{api.port}"
    return accessreviews.AccessReviews(configuration)


async def _serve(reviews: accessreviews.AccessReviews) -> TestClient[Any, Any]:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text="ehb_cycles_total 1\n")

    app = web.Application(middlewares=[metricsaccess.guard(reviews)])  # type: ignore[list-item]
    app.router.add_get("/metrics", page)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def _first_arrival(api: SlowApiServer) -> None:
    """Once a review has reached the API server (and waits at its gate)."""
    arrived = asyncio.Event()
    loop = asyncio.get_running_loop()
    api.on_arrival = lambda: loop.call_soon_threadsafe(arrived.set)
    async with asyncio.timeout(10):
        await arrived.wait()


async def test_concurrent_requests_with_one_token_cost_one_review(api: SlowApiServer) -> None:
    """Prometheus' replicas (or its retries) scraping at once with one fresh token."""
    reviews = _reviews(api)
    client = await _serve(reviews)
    try:
        header = {"Authorization": f"Bearer {PROMETHEUS}"}
        arrival = asyncio.ensure_future(_first_arrival(api))
        await asyncio.sleep(0)
        scrapes = [asyncio.ensure_future(client.get("/metrics", headers=header)) for _ in range(20)]
        await arrival
        await asyncio.sleep(0.2)  # what the other 19 would have sent by now
        api.gate.set()
        answers = await asyncio.gather(*scrapes)
        assert [a.status for a in answers] == [200] * 20
        assert api.reviews == 2, f"{api.reviews} reviews (one TokenReview, one SAR expected)"
    finally:
        await client.close()
        reviews.close()


async def test_a_flood_of_unknown_tokens_is_bounded_and_holds_up_nothing_else(
    api: SlowApiServer,
) -> None:
    reviews = _reviews(api)
    client = await _serve(reviews)
    loop = asyncio.get_running_loop()
    flood: list[asyncio.Future[Any]] = []
    try:
        # Prometheus' token is reviewed before the flood: its scrapes are answered from memory.
        api.gate.set()
        header = {"Authorization": f"Bearer {PROMETHEUS}"}
        assert (await client.get("/metrics", headers=header)).status == 200
        api.gate.clear()
        before = api.reviews
        arrival = asyncio.ensure_future(_first_arrival(api))
        await asyncio.sleep(0)
        flood += [
            asyncio.ensure_future(
                client.get("/metrics", headers={"Authorization": f"Bearer forged-{n}"})
            )
            for n in range(200)
        ]
        await arrival
        await asyncio.sleep(0.3)  # what the rest of the flood would have sent by now
        # The loop's default executor (DNS for kopf's and the SDKs' connections) still works.
        async with asyncio.timeout(5):
            assert await loop.run_in_executor(None, lambda: "resolved") == "resolved"
            assert await loop.getaddrinfo("localhost", 443)
        # The scrape whose token is known is answered while the flood waits.
        async with asyncio.timeout(5):
            assert (await client.get("/metrics", headers=header)).status == 200
        in_flight = api.reviews - before
        assert in_flight <= accessreviews.REVIEWS_AT_ONCE, f"{in_flight} reviews at once"
        api.gate.set()
        statuses = sorted({a.status for a in await asyncio.gather(*flood)})
        assert statuses == [401, 429], statuses  # past the bound: at once, "come back later"
        assert api.reviews - before <= accessreviews.REVIEWS_AT_ONCE + accessreviews.REVIEWS_WAITING
    finally:
        api.gate.set()
        await asyncio.gather(*flood, return_exceptions=True)
        await client.close()
        reviews.close()
