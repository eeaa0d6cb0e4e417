"""The local node's log server: what makes ``kubectl logs`` work on the local stack.

``kubectl logs POD`` asks kube-apiserver, which checks RBAC (``pods/log``) and then proxies
the request to the kubelet of the pod's node: ``GET /containerLogs/NS/POD/CONTAINER`` on the
port the Node's ``status.daemonEndpoints`` names, at the node's InternalIP, over TLS, with its
kubelet client certificate. This is that endpoint for `LocalNode`, serving the one log file
it writes per pod (``NAME.log``, every run of the container in order):

- ``tailLines``, ``limitBytes`` and ``follow`` are served as a kubelet serves them; a
  followed log ends when the pod's process does, when the node stops, or when the client
  goes;
- ``previous``, ``sinceSeconds``, ``sinceTime`` and ``timestamps`` are refused with a 400
  that says why: the node keeps no line's time and no run apart from the next;
- only kube-apiserver is answered: a client certificate of the cluster's CA, with
  `certificates.KUBELET_CLIENT` as its name, as a kubelet checks who proxies to it;
- ``kubectl exec``, ``attach``, ``cp`` and ``port-forward`` (a kubelet's streams, which the
  node does not serve) are refused with a 501 that says where the pod is instead: the API
  server passes the text on (``unable to upgrade connection: ...``), where it passed on
  Python's HTML error page.
"""

from __future__ import annotations

import http.server
import logging
import re
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

from eventhub_balancer_devstack.realkube import certificates

logger = logging.getLogger(__name__)

#: How often a followed log is read again for what the pod wrote since.
FOLLOW_POLL_S = 0.2

#: How long a client may keep a read or a write of its connection waiting.
CLIENT_TIMEOUT_S = 30.0

#: What a read of the log file takes at most at once.
CHUNK_BYTES = 64 * 1024

#: What the local node cannot answer, and why (the 400's message).
REFUSED = {
    "previous": "the local node keeps one log per pod, every run of its container in order: "
    "leave out --previous (a restart is where the output starts again)",
    "sinceSeconds": "the local node keeps no time of a line: use --tail instead of --since",
    "sinceTime": "the local node keeps no time of a line: use --tail instead of --since-time",
    "timestamps": "the local node keeps no time of a line: leave out --timestamps",
}

_PATH = re.compile(r"^/containerLogs/([a-z0-9][a-z0-9.-]*)/([a-z0-9][a-z0-9.-]*)/([^/]+)$")

#: A kubelet's streams: kubectl exec (and cp, which runs tar through it), attach, run and
#: port-forward.
_STREAMS = re.compile(r"^/(exec|attach|run|portForward)/([^/]+)/([^/]+)(/[^/]*)?$")

#: Whether the node holds a pod (namespace, name): True while its process runs, False while it
#: is on the node with its process ended (a crash, before the restart), None when it is not.
Holds = Callable[[str, str], bool | None]

#: The port the node gave a pod (namespace, name), its ``--port``; None when it is not here.
Ports = Callable[[str, str], int | None]


def tail(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data`` (a last line without its newline counts)."""
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogServer:
    """Serves the pods' logs in ``log_dir`` to kube-apiserver on 127.0.0.1, a free port."""

    def __init__(
        self,
        log_dir: Path,
        *,
        ca_certificate: Path,
        serving: certificates.ClientCredentials,
        holds: Holds,
        ports: Ports,
    ) -> None:
        self._log_dir = log_dir
        self._holds = holds
        self._ports = ports
        self._stop = threading.Event()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(serving.certificate), str(serving.key))
        context.load_verify_locations(cafile=str(ca_certificate))
        context.verify_mode = ssl.CERT_REQUIRED
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        # The handshake in the connection's own thread, not in accept(): a client that
        # connects and says nothing held up every other request behind it.
        self._server.socket = context.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="local-node logs", daemon=True
        )

    @classmethod
    def started(
        cls,
        node: str,
        log_dir: Path,
        *,
        ca_certificate: Path,
        holds: Holds,
        ports: Ports,
    ) -> LogServer:
        """The log server of ``node``, serving, with a certificate of the cluster's CA for
        127.0.0.1 (kube-apiserver checks it) beside the logs."""
        serving = certificates.serving_certificate(
            log_dir.parent / "pki", ca_certificate=ca_certificate, name=node, hosts=("127.0.0.1",)
        )
        server = cls(
            log_dir, ca_certificate=ca_certificate, serving=serving, holds=holds, ports=ports
        )
        server.start()
        return server

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def chunks(
        self, path: Path, *, query: dict[str, str], namespace: str, pod: str
    ) -> Iterator[bytes]:
        """What the answer carries: the tail asked for, then, when followed, what the pod
        writes until its process ends or the node stops."""
        with path.open("rb") as log:
            data = log.read()
            if "tailLines" in query:
                data = tail(data, int(query["tailLines"]))
            yield data
            if query.get("follow") != "true":
                return
            while not self._stop.is_set():
                more = log.read(CHUNK_BYTES)
                if more:
                    yield more
                    continue
                if not self._holds(namespace, pod):
                    yield log.read()
                    return
                self._stop.wait(FOLLOW_POLL_S)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = CLIENT_TIMEOUT_S

            def log_message(self, format: str, *args: object) -> None:
                logger.debug("logs: " + format, *args)

            def do_GET(self) -> None:
                served = server._answer(self)
                if served is not None:
                    self._refuse(*served)

            do_POST = do_GET  # kubectl exec and port-forward over SPDY: refused, with why

            def _refuse(self, status: int, message: str) -> None:
                body = (message + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def _no_streams(self, what: str, namespace: str, pod: str) -> str:
        """Why a kubelet's stream is refused, and what to do instead."""
        name = {"portForward": "port-forward", "run": "exec"}.get(what, what)
        refused = f"the local node serves logs only, not kubectl {name}: pod {namespace}/{pod}"
        port = self._ports(namespace, pod)
        if port is None:
            return f"{refused} does not run on this node"
        if what == "attach":
            return f"{refused} is a process of this machine: follow it with kubectl logs -f"
        if what == "portForward":
            return (
                f"{refused} is a process of this machine, listening on 127.0.0.1:{port}: "
                "connect there"
            )
        return (
            f"{refused} is a process of this machine: run the command here instead (kubectl cp "
            "runs through exec too)"
        )

    def _answer(self, request: http.server.BaseHTTPRequestHandler) -> tuple[int, str] | None:
        """Stream the log asked for; or the status and message of a refusal."""
        peer = (
            request.connection.getpeercert()
            if isinstance(request.connection, ssl.SSLSocket)
            else None
        )
        subject = (peer or {}).get("subject", ())
        names = [
            pair[1]
            for field in (subject if isinstance(subject, tuple) else ())
            for pair in field
            if pair[0] == "commonName"
        ]
        if names != [certificates.KUBELET_CLIENT]:
            return 403, f"only kube-apiserver ({certificates.KUBELET_CLIENT}) reads logs here"
        url = urllib.parse.urlsplit(request.path)
        stream = _STREAMS.match(url.path)
        if stream is not None:
            return 501, self._no_streams(stream.group(1), stream.group(2), stream.group(3))
        found = _PATH.match(url.path)
        if found is None:
            return 404, f"{url.path}: this node serves /containerLogs/NAMESPACE/POD/CONTAINER only"
        namespace, pod, _ = found.groups()
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        for name, why in REFUSED.items():
            if query.get(name) not in (None, "false", "0"):
                return 400, why
        for name in ("tailLines", "limitBytes"):
            if name in query and not query[name].isdigit():
                return 400, f"{name}: {query[name]!r} is not a whole number"
        path = self._log_dir / f"{pod}.log"
        if self._holds(namespace, pod) is None or not path.is_file():
            return 404, f"pod {namespace}/{pod} has no log on this node"
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        request.end_headers()
        left = int(query["limitBytes"]) if "limitBytes" in query else None
        try:
            for chunk in self.chunks(path, query=query, namespace=namespace, pod=pod):
                if left is not None:
                    chunk, left = chunk[:left], left - len(chunk[:left])
                request.wfile.write(chunk)
                request.wfile.flush()
                if left == 0:
                    break
        except (OSError, ssl.SSLError):
            pass  # the client went (Ctrl-C on kubectl logs -f): nothing more to send
        return None
