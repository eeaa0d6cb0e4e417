"""A pod's process for the node tests: it serves ``/readyz`` on ``--port`` until SIGTERM.

``python -m tests.support.readyservers --port=N`` stands for a container image whose readiness
probe is an HTTP GET. It writes nothing and exits 0 on SIGTERM, as a well-behaved container.
With ``--whoami`` it first prints, as one JSON line, who it is to the API server when it logs
kopf in as the operator does, and the credentials it was given.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import threading
import urllib.request
from types import FrameType
from typing import Any


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/readyz" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def whoami() -> dict[str, Any]:
    """The operator's way in (its client's configuration, handed to kopf's login), and the
    user the API server takes kopf's header for (a SelfSubjectReview)."""
    from eventhub_balancer.adapters import kubeclients
    from eventhub_balancer.handlers import kopfwiring

    client = kubeclients.KubeClient.from_environment()
    try:
        info = kopfwiring.kopf_connection(client.connection_info())
    finally:
        client.close()
    request = urllib.request.Request(
        f"{info.server}/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=json.dumps(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        ).encode(),
        headers={**info.as_http_headers(), "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=info.as_ssl_context(), timeout=30) as answer:
        review = json.load(answer)
    return {
        "username": review["status"]["userInfo"]["username"],
        "server": info.server,
        "kubeconfig": os.environ.get("KUBECONFIG"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--whoami", action="store_true")
    args = parser.parse_args()
    if args.whoami:
        print(json.dumps(whoami()), flush=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), _Ready)

    def stop(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
