"""The metrics guard's answers, as controller-runtime's metrics filter gives them: 401 without a
valid token, 403 for a user RBAC does not allow, 500 when the API server cannot review, the
page otherwise; /healthz open. The reviews are faked here; the real API server's are
tests/install/wire/test_metrics_access.py."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from eventhub_balancer import errors
from eventhub_balancer.adapters import accessreviews, metricsaccess

PROMETHEUS = accessreviews.User(name="system:serviceaccount:monitoring:prometheus")


class Reviews:
    """Tokens to users, users to their right on /metrics, and whether the API is down."""

    def __init__(self) -> None:
        self.users = {"prometheus-token": PROMETHEUS, "tenant-token": accessreviews.User(name="t")}
        self.down = False
        self.asked: list[tuple[str, str, str]] = []

    async def user(self, token: str) -> accessreviews.User | None:
        if self.down:
            raise errors.ApiUnavailable("TokenReview: the API server answered 503")
        return self.users.get(token)

    async def allowed(self, user: accessreviews.User, *, verb: str, path: str) -> bool:
        self.asked.append((user.name, verb, path))
        return user is PROMETHEUS and (verb, path) == ("get", "/metrics")


async def serve(reviews: Reviews) -> TestClient[Any, Any]:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text="ehb_cycles_total 1\n")

    app = web.Application(middlewares=[metricsaccess.guard(reviews)])  # type: ignore[arg-type]
    app.router.add_get("/metrics", page)
    app.router.add_get("/healthz", page)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_the_guard_answers_as_the_metrics_filter_does() -> None:
    reviews = Reviews()
    client = await serve(reviews)
    try:
        assert (await client.get("/metrics")).status == 401
        bad = await client.get("/metrics", headers={"Authorization": "Basic dTpw"})
        assert bad.status == 401
        unknown = await client.get("/metrics", headers={"Authorization": "Bearer who"})
        assert unknown.status == 401
        tenant = await client.get("/metrics", headers={"Authorization": "Bearer tenant-token"})
        assert tenant.status == 403
        assert await tenant.text() == "Authorization denied for user t"
        ok = await client.get("/metrics", headers={"Authorization": "Bearer prometheus-token"})
        assert (ok.status, await ok.text()) == (200, "ehb_cycles_total 1\n")
        assert reviews.asked[-1] == (PROMETHEUS.name, "get", "/metrics")
        assert (await client.get("/healthz")).status == 200
        reviews.down = True
        down = await client.get("/metrics", headers={"Authorization": "Bearer prometheus-token"})
        assert down.status == 500
        assert (await client.get("/healthz")).status == 200
    finally:
        await client.close()


def test_the_bearer_token_is_read_as_the_header_writes_it() -> None:
    assert accessreviews.bearer("Bearer abc") == "abc"
    assert accessreviews.bearer("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic abc"):
        assert accessreviews.bearer(header) is None


def test_a_self_signed_certificate_is_made_without_a_folder(tmp_path: Any) -> None:
    context = metricsaccess.server_context(None)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(errors.InvalidInput, match=r"tls\.crt and tls\.key"):
        metricsaccess.server_context(str(tmp_path))
