"""A pod's process for the node tests: it serves ``/readyz`` on ``--port`` until SIGTERM.

``python -m tests.support.readyservers --port=N`` stands for a container image whose readiness
probe is an HTTP GET. It writes nothing and exits 0 on SIGTERM, as a well-behaved container.
"""

from __future__ import annotations

import argparse
import http.server
import signal
import threading
from types import FrameType


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/readyz" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), _Ready)

    def stop(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
