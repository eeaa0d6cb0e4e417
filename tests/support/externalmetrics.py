"""An external metrics API (``external.metrics.k8s.io/v1beta1``) for the real control plane, as
prometheus-adapter serves one: kube-apiserver's aggregator proxies to it, and the HPA
controller reads ``ehb_recommended_replicas`` through it. The figure is what the test sets.

`serve` registers it: an ExternalName Service for ``localhost`` (the aggregator dials the name
and port), and the APIService with ``insecureSkipTLSVerify``; the server's certificate is one
the devstack makes for loopback."""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from eventhub_balancer_devstack.realkube import certificates

GROUP_VERSION = "external.metrics.k8s.io/v1beta1"
METRIC = "ehb_recommended_replicas"
NAMESPACE = "external-metrics"


class Figures:
    """The value served for each label selector the HPA asks with; asked ones are recorded."""

    def __init__(self) -> None:
        self.value = 1
        self.selectors: list[str] = []


def _handler(figures: Figures) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads `Figures.selectors`."""

        def _send(self, body: dict[str, Any], code: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            parts = url.path.strip("/").split("/")
            if url.path.rstrip("/") == f"/apis/{GROUP_VERSION}":
                resource = {"name": METRIC, "singularName": "", "namespaced": True}
                resource |= {"kind": "ExternalMetricValueList", "verbs": ["get"]}
                body = {"kind": "APIResourceList", "apiVersion": "v1"}
                self._send(body | {"groupVersion": GROUP_VERSION, "resources": [resource]})
            elif len(parts) == 6 and parts[3] == "namespaces" and parts[5] == METRIC:
                query = urllib.parse.parse_qs(url.query)
                figures.selectors.append(query.get("labelSelector", [""])[0])
                item = {"metricName": METRIC, "metricLabels": {}, "value": str(figures.value)}
                item["timestamp"] = "2026-01-01T00:00:00Z"
                body = {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION}
                self._send(body | {"metadata": {}, "items": [item]})
            else:
                self._send({"kind": "Status", "apiVersion": "v1", "code": 404}, code=404)

    return Handler


@contextlib.contextmanager
def serve(folder: Path, kubectl: Callable[..., Any]) -> Iterator[Figures]:
    """Run the API on a free loopback port and register it with kube-apiserver."""
    credentials = certificates.generate(folder)
    figures = Figures()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(figures))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(credentials.serving_certificate, credentials.serving_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "metrics", "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]},
    }
    api = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
        "spec": {
            "service": {"name": "metrics", "namespace": NAMESPACE, "port": port},
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "insecureSkipTLSVerify": True,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    kubectl("create", "namespace", NAMESPACE)
    kubectl("apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1",
                                                  "items": [service, api]}))  # fmt: skip
    try:
        yield figures
    finally:
        kubectl("delete", "apiservice", "v1beta1.external.metrics.k8s.io", check=False)
        server.shutdown()
        server.server_close()
