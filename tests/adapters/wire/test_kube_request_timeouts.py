"""A Kubernetes API request that gets no answer fails once its timeout passes, and is not
sent again: against a socket on 127.0.0.1 that takes requests and never answers."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import kubernetes.client
import pytest
import urllib3.exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi, kubeclients, kuberetries


class Silent:
    """Accepts connections and reads requests; answers none. Counts the requests."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.requests = 0
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            conn.settimeout(5.0)
            try:
                if conn.recv(65536):
                    self.requests += 1
            except OSError:
                pass
            self.held.append(conn)  # open and silent

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5.0)
        for conn in self.held:
            conn.close()
        self.server.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


def _api(port: int) -> kubeapi.KubeAPI:
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return kubeapi.KubeAPI(configuration)


@pytest.mark.parametrize("read", ["get", "list"])
async def test_a_request_that_times_out_is_sent_once(
    silent: Silent, read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubeclients, "REQUEST_TIMEOUT", 0.5)
    api = _api(silent.port)
    read_it = (
        api.get_consumer(namespace="shop", name="orders")
        if read == "get"
        else api.list_pods(namespace="shop", label_selector="app=orders")
    )
    try:
        with pytest.raises(errors.ApiUnavailable, match=r"ReadTimeout|timed out"):
            await asyncio.wait_for(read_it, 30)
    finally:
        api.close()
    assert silent.requests == 1, f"sent {silent.requests} times"


async def test_a_refused_connection_is_still_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The retries stay for what they are for: a connection that never opened."""
    attempts: list[object] = []
    real = kuberetries.Retries.increment

    def counted(self: kuberetries.Retries, *args: object, **kwargs: object) -> kuberetries.Retries:
        attempts.append(kwargs.get("error"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(kuberetries.Retries, "increment", counted)
    monkeypatch.setattr(kuberetries.Retries, "sleep", lambda self, response=None: None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    api = _api(port)  # nothing listens there now
    try:
        with pytest.raises(errors.ApiUnavailable):
            async with asyncio.timeout(30):
                await api.get_consumer(namespace="shop", name="orders")
    finally:
        api.close()
    assert len(attempts) == 4  # three retries, as urllib3 makes them


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"), False),  # type: ignore[arg-type]
        (urllib3.exceptions.ConnectTimeoutError("connect timed out"), False),
        (urllib3.exceptions.NewConnectionError(None, "refused"), True),  # type: ignore[arg-type]
        (urllib3.exceptions.ProtocolError("connection closed"), True),
    ],
)
def test_only_what_failed_at_once_is_sent_again(error: Exception, retried: bool) -> None:
    """A timeout, connecting or reading, took the request's whole bound: not sent again."""
    retries = kuberetries.client_retries()
    if retried:
        assert retries.increment(method="GET", url="/", error=error).total == 2
    else:
        with pytest.raises(urllib3.exceptions.MaxRetryError):
            retries.increment(method="GET", url="/", error=error)
