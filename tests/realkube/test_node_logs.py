"""The local node's log server, as kube-apiserver talks to it for ``kubectl logs``.

The server is started here on its own, with certificates of a CA made for the test, and asked
as kube-apiserver asks (its kubelet client certificate). ``kubectl logs`` through the real
API server is in ``tests/realkube/wire/test_local_node.py``.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer_devstack.realkube import certificates, nodelogs

#: A followed log is read again every `nodelogs.FOLLOW_POLL_S`; this bounds every wait here.
WAIT_S = 10.0


class Node:
    """What the server asks the node: whether a pod runs."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], bool] = {("shop", "c-0"): True}

    def holds(self, namespace: str, name: str) -> bool | None:
        return self.pods.get((namespace, name))

    def port(self, namespace: str, name: str) -> int | None:
        return 41843 if (namespace, name) in self.pods else None


@pytest.fixture
def pki(tmp_path: Path) -> certificates.ControlPlaneCredentials:
    return certificates.generate(tmp_path / "pki")


@pytest.fixture
def node() -> Node:
    return Node()


@pytest.fixture
def server(
    tmp_path: Path, pki: certificates.ControlPlaneCredentials, node: Node
) -> Iterator[nodelogs.LogServer]:
    logs = tmp_path / "node" / "logs"
    logs.mkdir(parents=True)
    (logs / "c-0.log").write_bytes(b"one\ntwo\nthree\n")
    server = nodelogs.LogServer.started(
        "ehb-local-node",
        logs,
        ca_certificate=pki.ca_certificate,
        holds=node.holds,
        ports=node.port,
    )
    yield server
    server.stop()


def ask(
    server: nodelogs.LogServer,
    path: str,
    pki: certificates.ControlPlaneCredentials,
    *,
    client: certificates.ClientCredentials | None = None,
    method: str = "GET",
) -> http.client.HTTPResponse:
    context = ssl.create_default_context(cafile=str(pki.ca_certificate))
    who = client or pki.kubelet_client
    context.load_cert_chain(str(who.certificate), str(who.key))
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=context, timeout=WAIT_S
    )
    connection.request(method, path)
    return connection.getresponse()


def test_the_log_is_served_whole_by_its_tail_and_by_its_bytes(
    server: nodelogs.LogServer, pki: certificates.ControlPlaneCredentials
) -> None:
    whole = ask(server, "/containerLogs/shop/c-0/consumer", pki)
    assert (whole.status, whole.read()) == (200, b"one\ntwo\nthree\n")
    assert (
        ask(server, "/containerLogs/shop/c-0/consumer?tailLines=2", pki).read() == b"two\nthree\n"
    )
    assert ask(server, "/containerLogs/shop/c-0/consumer?tailLines=0", pki).read() == b""
    assert ask(server, "/containerLogs/shop/c-0/consumer?limitBytes=5", pki).read() == b"one\nt"


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("previous=true", "leave out --previous"),
        ("sinceSeconds=60", "use --tail instead of --since"),
        ("timestamps=true", "leave out --timestamps"),
        ("tailLines=-1", "tailLines: '-1' is not a whole number"),
    ],
)
def test_what_the_node_cannot_answer_is_refused_with_why(
    server: nodelogs.LogServer, pki: certificates.ControlPlaneCredentials, query: str, said: str
) -> None:
    answer = ask(server, f"/containerLogs/shop/c-0/consumer?{query}", pki)
    assert answer.status == 400
    assert said in answer.read().decode()


@pytest.mark.parametrize("method", ["POST", "GET"])  # SPDY, and kubectl's WebSockets
def test_a_kubelets_streams_are_refused_with_where_the_pod_is(
    server: nodelogs.LogServer, pki: certificates.ControlPlaneCredentials, method: str
) -> None:
    """kube-apiserver passes the text on (``unable to upgrade connection: ...``), where it
    passed on Python's HTML error page for a POST."""
    said = {}
    for path in (
        "/exec/shop/c-0/consumer?command=sh&input=1&output=1&tty=1",
        "/attach/shop/c-0/consumer?output=1",
        "/portForward/shop/c-0",
        "/portForward/shop/gone",
    ):
        answer = ask(server, path, pki, method=method)
        assert answer.status == 501, path
        said[path.split("?")[0]] = answer.read().decode().strip()
    assert said == {
        "/exec/shop/c-0/consumer": "the local node serves logs only, not kubectl exec: pod "
        "shop/c-0 is a process of this machine: run the command here instead (kubectl cp runs "
        "through exec too)",
        "/attach/shop/c-0/consumer": "the local node serves logs only, not kubectl attach: pod "
        "shop/c-0 is a process of this machine: follow it with kubectl logs -f",
        "/portForward/shop/c-0": "the local node serves logs only, not kubectl port-forward: "
        "pod shop/c-0 is a process of this machine, listening on 127.0.0.1:41843: connect "
        "there",
        "/portForward/shop/gone": "the local node serves logs only, not kubectl port-forward: "
        "pod shop/gone does not run on this node",
    }


def test_a_pod_not_on_the_node_or_another_path_is_not_found(
    server: nodelogs.LogServer, pki: certificates.ControlPlaneCredentials
) -> None:
    for path in (
        "/containerLogs/other/c-0/consumer",  # the same name in a namespace the node does not run
        "/containerLogs/shop/c-1/consumer",
        "/containerLogs/shop/..%2Fpki%2Fca/consumer",
        "/pods",
    ):
        assert ask(server, path, pki).status == 404, path


def test_only_kube_apiserver_is_answered(
    tmp_path: Path, server: nodelogs.LogServer, pki: certificates.ControlPlaneCredentials
) -> None:
    """A kubelet answers only who may proxy to it: the cluster's administrator reads logs
    through the API server (RBAC ``pods/log``), not around it."""
    answer = ask(server, "/containerLogs/shop/c-0/consumer", pki, client=pki.admin)
    assert answer.status == 403
    assert "only kube-apiserver" in answer.read().decode()
    anonymous = ssl.create_default_context(cafile=str(pki.ca_certificate))
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=anonymous, timeout=WAIT_S
    )

    def without_a_certificate() -> bytes:
        connection.request("GET", "/containerLogs/shop/c-0/consumer")
        return connection.getresponse().read()

    with pytest.raises((ssl.SSLError, ConnectionError)):
        without_a_certificate()


def test_a_client_that_says_nothing_holds_up_no_other(
    server: nodelogs.LogServer, pki: certificates.ControlPlaneCredentials
) -> None:
    """The TLS handshake ran in accept(): one silent connection blocked every request."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S):
        answer = ask(server, "/containerLogs/shop/c-0/consumer?tailLines=1", pki)
        assert answer.read() == b"three\n"


def test_a_followed_log_carries_what_the_pod_writes_and_ends_with_its_process(
    tmp_path: Path,
    server: nodelogs.LogServer,
    pki: certificates.ControlPlaneCredentials,
    node: Node,
) -> None:
    answer = ask(server, "/containerLogs/shop/c-0/consumer?follow=true&tailLines=1", pki)
    assert answer.status == 200
    assert answer.read1() == b"three\n"
    with (tmp_path / "node" / "logs" / "c-0.log").open("ab") as log:
        log.write(b"four\n")
    assert answer.read1() == b"four\n"
    ended = threading.Event()
    rest: list[bytes] = []

    def read_to_the_end() -> None:
        rest.append(answer.read())
        ended.set()

    threading.Thread(target=read_to_the_end, daemon=True).start()
    with (tmp_path / "node" / "logs" / "c-0.log").open("ab") as log:
        log.write(b"five, the last\n")
    node.pods[("shop", "c-0")] = False  # its process ended
    assert ended.wait(WAIT_S), "the followed log did not end with the pod's process"
    assert rest == [b"five, the last\n"]


def test_the_tail_counts_a_last_line_without_its_newline() -> None:
    assert nodelogs.tail(b"a\nb\nc", 2) == b"b\nc"
    assert nodelogs.tail(b"a\n", 5) == b"a\n"
