"""A pod's acknowledgement lands on a real API server that takes seconds to answer writes,
and after a quiet spell behind a network that silently drops idle connections.

An admission webhook on ConfigMap updates (a policy engine, say) that takes 3 s makes every
patch take 3 s. The runtime's loop waits for its acknowledgement for at most
``podconfig.ANNOTATE_TIMEOUT_S`` (2 s); the request used to be given up with it, and the real
kube-apiserver drops a request whose client went away: the acknowledgement was never written
however often it was sent (11 patches in 40 s, none applied), so a hand-off waited for
``handoffTimeoutSeconds`` and ``Ready`` stayed ``AssignmentNotApplied`` for as long as the
webhook was slow. Now the request goes on after the loop stopped waiting, one at a time.

Going on that long, a patch sent on a pooled connection that a NAT gateway or load balancer
had silently dropped while idle (no reset: Azure's NAT gateway after 4 minutes) waited 30 s
for an answer that could not come. A patch after a quiet spell opens a fresh connection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import acknowledgements, assignments
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.realkube import RealControlPlane, certificates
from tests.support.consumerfakes import configmap

NAMESPACE = "shop"
#: How long the webhook takes to answer: more than the loop waits, far less than its timeout.
WEBHOOK_DELAY_S = 3.0
WEBHOOKS = "admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
WITHIN_S = 30.0


class IdleDrop:
    """A TCP proxy to the API server that silently stops forwarding on a connection once it
    has been idle for ``idle`` seconds: the flow is forgotten, nothing is reset."""

    def __init__(self, upstream: str, idle: float) -> None:
        self.upstream = ("127.0.0.1", int(upstream.rsplit(":", 1)[1]))
        self.idle = idle
        self.dropped = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", 0), self.loop
        ).result(timeout=10)
        self.port = self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        flow: dict[str, Any] = {"last": time.monotonic(), "dropped": False}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                now = time.monotonic()
                if not flow["dropped"] and now - flow["last"] >= self.idle:
                    flow["dropped"] = True
                    self.dropped += 1
                flow["last"] = now
                if not flow["dropped"]:
                    sink.write(data)
                    await sink.drain()
            if not flow["dropped"]:
                sink.close()

        await asyncio.gather(
            pipe(reader, upstream_writer), pipe(upstream_reader, writer), return_exceptions=True
        )


class SlowWebhook(ThreadingHTTPServer):
    """An HTTPS admission webhook on 127.0.0.1 that allows everything after a pause."""

    daemon_threads = True

    def __init__(self, folder: Path) -> None:
        self.pki = certificates.generate(folder)
        self.reviews = 0
        super().__init__(("127.0.0.1", 0), _Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.pki.serving_certificate), str(self.pki.serving_key))
        self.socket = context.wrap_socket(self.socket, server_side=True)

    def configuration(self, labels: dict[str, str]) -> dict[str, object]:
        ca = base64.b64encode(self.pki.ca_certificate.read_bytes()).decode()
        return {
            "metadata": {"name": "slow-policy"},
            "webhooks": [
                {
                    "name": "slow.policy.example.dev",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.server_address[1]}/validate",
                        "caBundle": ca,
                    },
                    "rules": [
                        {
                            "operations": ["UPDATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "objectSelector": {"matchLabels": labels},
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }
            ],
        }


class _Handler(BaseHTTPRequestHandler):
    server: SlowWebhook

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.reviews += 1
        time.sleep(WEBHOOK_DELAY_S)
        answer = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True},
            }
        ).encode()
        # The API server hangs up on a review whose request its client gave up.
        with contextlib.suppress(OSError):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slow_webhook(real_kube: RealControlPlane, tmp_path: Path) -> Iterator[SlowWebhook]:
    server = SlowWebhook(tmp_path / "webhook-pki")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    labels = configmaps.labels(consumer="orders", pod="pod-a")
    real_kube.create_object(WEBHOOKS, server.configuration(labels))
    try:
        yield server
    finally:
        real_kube.delete_object(WEBHOOKS, "slow-policy")
        server.shutdown()
        server.server_close()


async def test_an_acknowledgement_lands_when_every_write_takes_3_s(
    real_kube: RealControlPlane, slow_webhook: SlowWebhook, tmp_path: Path
) -> None:
    kube = real_kube
    kube.create_object("v1/namespaces", {"metadata": {"name": NAMESPACE}})
    name = configmaps.configmap_name(consumer="orders", pod="pod-a")
    body = configmap(1, {"0": (1, "owned"), "3": (2, "revoking")})
    body["metadata"] = {"name": name, "labels": configmaps.labels(consumer="orders", pod="pod-a")}
    kube.create_object("v1/configmaps", body, namespace=NAMESPACE)
    # The webhook takes effect a moment after it is written: wait until a write meets it.
    deadline = time.monotonic() + WITHIN_S
    while slow_webhook.reviews == 0:
        assert time.monotonic() < deadline, "the webhook was never called"
        kube.patch_object(
            "v1/configmaps", name, {"metadata": {"annotations": {"x": "y"}}}, namespace=NAMESPACE
        )
    before = slow_webhook.reviews
    kubeconfig = kube.write_kubeconfig(tmp_path / "pod.kubeconfig")
    client = podconfig.PodConfigMaps(
        namespace=NAMESPACE, consumer="orders", pod="pod-a", kubeconfig=str(kubeconfig)
    )
    source = assignments.ConfigMapSource(client)
    # As a pod does: the assignment it acknowledges is the one its watch read first (a pod
    # with no ConfigMap of its own sends nothing).
    updates = source.updates()
    assert (await asyncio.wait_for(anext(updates), WITHIN_S)).generation == 1
    acks = acknowledgements.Acknowledgements(source, min_interval=1.0)
    held: list[float] = []
    landed = None
    start = time.monotonic()
    try:
        while time.monotonic() - start < WITHIN_S:
            began = time.monotonic()
            await acks.write(applied_generation=1, released={"3": 2}, reports={})
            held.append(time.monotonic() - began)
            annotations = kube.get_object("v1/configmaps", name, namespace=NAMESPACE)["metadata"]
            released = configmaps.parse_released(annotations.get("annotations") or {})
            if released == {"3": 2}:
                landed = time.monotonic() - start
                break
            await asyncio.sleep(0.2)
    finally:
        await updates.aclose()
        client.close()
    assert landed is not None, (
        f"the release was never written in {WITHIN_S:g} s "
        f"({slow_webhook.reviews - before} patches sent)"
    )
    assert landed <= WEBHOOK_DELAY_S + acknowledgements.RETRY_MAX_S + 2
    # The runtime's loop is never held past the acknowledgement's bound (its heartbeat).
    assert max(held) <= podconfig.ANNOTATE_TIMEOUT_S + 0.5
    # One request at a time: the slow server is not sent a new patch per turn of the loop.
    assert slow_webhook.reviews - before <= 2


async def test_an_acknowledgement_after_a_quiet_spell_is_not_sent_into_a_dropped_connection(
    real_kube: RealControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = real_kube
    namespace = "quiet"
    kube.create_object("v1/namespaces", {"metadata": {"name": namespace}})
    name = configmaps.configmap_name(consumer="orders", pod="pod-a")
    body = configmap(1, {"0": (1, "owned")})
    body["metadata"] = {"name": name, "labels": configmaps.labels(consumer="orders", pod="pod-a")}
    kube.create_object("v1/configmaps", body, namespace=namespace)
    idle = 2.0
    monkeypatch.setattr(podconfig, "PATCH_IDLE_S", idle / 2)
    proxy = IdleDrop(kube.url, idle=idle)
    kubeconfig = kube.write_kubeconfig(tmp_path / "pod.kubeconfig")
    kubeconfig.write_text(
        kubeconfig.read_text().replace(kube.url, f"https://127.0.0.1:{proxy.port}")
    )
    client = podconfig.PodConfigMaps(
        namespace=namespace, consumer="orders", pod="pod-a", kubeconfig=str(kubeconfig)
    )
    try:
        await client.annotate({configmaps.ANNOTATION_RELEASED: "{}"})
        await asyncio.sleep(idle + 1)  # quiet: the flow of the pooled connection is dropped
        # The next acknowledgement lands at its first attempt, within the loop's wait.
        version = await client.annotate({configmaps.ANNOTATION_RELEASED: '{"0":1}'})
    finally:
        client.close()
        proxy.close()
    metadata = kube.get_object("v1/configmaps", name, namespace=namespace)["metadata"]
    assert configmaps.parse_released(metadata["annotations"]) == {"0": 1}
    # The answer's version, which the pod's watch shows with the patch (`ConfigMapSource`).
    assert version == metadata["resourceVersion"]
