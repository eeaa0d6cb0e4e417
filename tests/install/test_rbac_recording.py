"""The recording proxy against a trivial aiohttp upstream: it forwards, streams and records."""

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.support.rbac.recording import RecordingProxy
from tests.support.rbac.requestinfo import RequestInfo


async def _echo(request: web.Request) -> web.StreamResponse:
    if request.query.get("watch") == "true":
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for i in range(3):
            await response.write(json.dumps({"type": "ADDED", "n": i}).encode() + b"\n")
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.path_qs,
            "body": body.decode(),
            "authorization": request.headers.get("Authorization", ""),
        },
        status=201 if request.method == "POST" else 200,
    )


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_forwards_and_records(upstream: str) -> None:
    async with RecordingProxy(upstream) as proxy, aiohttp.ClientSession() as session:
        assert proxy.url.startswith("http://127.0.0.1:")
        headers = {"Authorization": "Bearer t0ken"}
        async with session.patch(
            f"{proxy.url}/api/v1/namespaces/shop/pods/p-1",
            data=b'{"metadata":{}}',
            headers=headers,
        ) as rsp:
            echoed = await rsp.json()
        async with session.post(f"{proxy.url}/api/v1/namespaces/shop/events", json={}) as rsp:
            assert rsp.status == 201
        async with session.get(f"{proxy.url}/version") as rsp:
            assert rsp.status == 200
    assert echoed == {
        "method": "PATCH",
        "path": "/api/v1/namespaces/shop/pods/p-1",
        "body": '{"metadata":{}}',
        "authorization": "Bearer t0ken",
    }
    assert proxy.requests == [
        RequestInfo(verb="patch", api_version="v1", resource="pods", namespace="shop", name="p-1"),
        RequestInfo(verb="create", api_version="v1", resource="events", namespace="shop"),
        RequestInfo(verb="get", path="/version"),
    ]
    assert [r.status for r in proxy.recorded] == [200, 201, 200]


async def test_streams_watches(upstream: str) -> None:
    async with RecordingProxy(upstream) as proxy, aiohttp.ClientSession() as session:
        url = f"{proxy.url}/apis/eventhub-balancer.dev/v1alpha1/eventhubconsumers?watch=true"
        async with session.get(url) as rsp:
            lines = [json.loads(line) async for line in rsp.content if line.strip()]
    assert [e["n"] for e in lines] == [0, 1, 2]
    (recorded,) = proxy.requests
    assert recorded.verb == "watch"
    assert recorded.resource == "eventhubconsumers"
    assert recorded.api_group == "eventhub-balancer.dev"


async def test_closed_proxy_refuses_connections(upstream: str) -> None:
    proxy = RecordingProxy(upstream)
    await proxy.start()
    url = proxy.url
    await proxy.close()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"{url}/api")
