"""The consumer pod's Kubernetes requests that get no answer end within their own bound: an
acknowledgement within its 2 s, a list within its 10 s, and neither is sent again.

urllib3 sends a request that timed out again (a GET three more times after a read timeout,
any request three more times after a connect timeout): an acknowledgement patch towards an
API server whose packets are dropped kept a thread for 8 s past its await's 3 s, and a pod
stopped by SIGTERM in such an outage exited only when it ended. Against sockets on
127.0.0.1: one that takes requests and never answers, one whose accept queue is full so
that connecting hangs as behind a firewall that drops packets.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import kuberetries, podconfig
from tests.adapters.wire.test_kube_request_timeouts import Silent

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def pod_client(tmp_path: Path, port: int) -> podconfig.PodConfigMaps:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(port=port))
    return podconfig.PodConfigMaps(
        namespace="shop", consumer="orders", pod="pod-a", pod_uid="u", kubeconfig=str(kubeconfig)
    )


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


@pytest.fixture
def unconnectable() -> Iterator[int]:
    """A port whose accept queue is full: a new connection neither opens nor is refused."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    queued = []
    for _ in range(3):
        client = socket.socket()
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            client.connect(("127.0.0.1", port))
        queued.append(client)
    time.sleep(0.2)
    yield port
    for client in queued:
        client.close()
    server.close()


def test_sigterm_in_an_outage_exits_within_the_acknowledgement_bound(
    tmp_path: Path, unconnectable: int
) -> None:
    """The runtime's drain awaits its last acknowledgement for at most 2.5 s; then the
    process ends with its loop (``asyncio.run``), which waits for the patch's thread."""
    maps = pod_client(tmp_path, unconnectable)

    async def drain() -> None:
        with pytest.raises((TimeoutError, errors.TransientError)):
            async with asyncio.timeout(2.5):
                await maps.annotate({"eventhub-balancer.dev/released": "{}"})

    start = time.monotonic()
    asyncio.run(drain())
    took = time.monotonic() - start
    maps.close()
    assert took <= podconfig.ANNOTATE_TIMEOUT_S + 1.5, f"exited after {took:.1f} s"


async def test_a_list_that_times_out_is_sent_once(
    tmp_path: Path, silent: Silent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(podconfig, "SHORT_REQUEST_TIMEOUT_S", 0.5)
    maps = pod_client(tmp_path, silent.port)
    try:
        with pytest.raises(errors.TransientError):
            async with asyncio.timeout(30):
                await maps.get()
    finally:
        maps.close()
    assert silent.requests == 1, f"sent {silent.requests} times"


async def test_a_refused_connection_is_still_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[object] = []
    real = kuberetries.Retries.increment

    def counted(self: kuberetries.Retries, *args: object, **kwargs: object) -> object:
        attempts.append(kwargs.get("error"))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(kuberetries.Retries, "increment", counted)
    monkeypatch.setattr(kuberetries.Retries, "sleep", lambda self, response=None: None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    maps = pod_client(tmp_path, port)  # nothing listens there now
    try:
        with pytest.raises(errors.TransientError):
            async with asyncio.timeout(30):
                await maps.get()
    finally:
        maps.close()
    assert len(attempts) == 4  # three retries, as urllib3 makes them
