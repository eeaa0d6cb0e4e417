"""Raw requests to a Kubernetes API server, from a kubeconfig, with the whole answer kept.

The conformance tests send one request to the local API and to a real kube-apiserver and
compare what came back. Neither the kubernetes client nor the harness's own calls fit: both
turn a refusal into an exception that keeps the message only, and the tests compare the
status, the ``Status`` body's reason and code, and the fields callers read. So this is a
small client over urllib3 (the kubernetes client's transport) that reads the kubeconfig's
server, CA and credentials, and returns every answer as an `Answer`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import urllib3
import yaml

#: The longest wait for one plain request; both servers answer in milliseconds.
REQUEST_TIMEOUT_S = 10.0

#: The longest a test reads one watch stream for what it expects.
WATCH_TIMEOUT_S = 10.0

#: The longest wait between a watch answered 429 and the next ask (`Wire.watch`).
RETRY_AFTER_MAX_S = 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """One HTTP answer: its status, its Content-Type, its body parsed from JSON (or None)."""

    status: int
    content_type: str
    body: Any
    raw: bytes

    @property
    def reason(self) -> str | None:
        """A ``Status`` body's ``reason`` (None for an object, or a Status without one)."""
        if isinstance(self.body, dict) and self.body.get("kind") == "Status":
            reason = self.body.get("reason")
            return str(reason) if reason else None
        return None

    @property
    def message(self) -> str:
        if isinstance(self.body, dict):
            return str(self.body.get("message") or "")
        return ""

    @property
    def metadata(self) -> dict[str, Any]:
        if isinstance(self.body, dict):
            return dict(self.body.get("metadata") or {})
        return {}

    @property
    def version(self) -> int:
        """The object's (or list's) resourceVersion as a number; 0 when there is none."""
        return int(self.metadata.get("resourceVersion") or 0)


def _ssl_context(cluster: Mapping[str, Any], user: Mapping[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context.load_verify_locations(cadata=ca)
    elif cluster.get("certificate-authority"):
        context.load_verify_locations(cafile=str(cluster["certificate-authority"]))
    if user.get("client-certificate"):
        context.load_cert_chain(str(user["client-certificate"]), str(user["client-key"]))
    elif user.get("client-certificate-data"):
        # ssl loads a chain from files only: write the pair to a private temporary folder.
        folder = Path(tempfile.mkdtemp(prefix="ehb-conformance-"))
        certificate, key = folder / "client.crt", folder / "client.key"
        certificate.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(str(certificate), str(key))
    return context


class Wire:
    """Requests to the server of one kubeconfig (its current context's cluster and user)."""

    def __init__(self, kubeconfig: Path, *, name: str) -> None:
        document = yaml.safe_load(Path(kubeconfig).read_text(encoding="utf-8"))
        cluster = document["clusters"][0]["cluster"]
        user = document["users"][0]["user"]
        self.name = name
        self.server = str(cluster["server"]).rstrip("/")
        self.headers: dict[str, str] = {}
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        if self.server.startswith("https://"):
            self.pool = urllib3.PoolManager(ssl_context=_ssl_context(cluster, user))
        else:
            self.pool = urllib3.PoolManager()

    def __repr__(self) -> str:
        return f"Wire({self.name})"

    def close(self) -> None:
        self.pool.clear()

    def _url(self, path: str, query: Mapping[str, str] | None) -> str:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(dict(query))
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        data: bytes | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Answer:
        """One request; ``body`` is sent as JSON, ``data`` as it is (a protobuf body, say)."""
        payload = data if data is not None else (None if body is None else json.dumps(body))
        headers = {**self.headers, "Accept": accept}
        if payload is not None:
            headers["Content-Type"] = content_type
        try:
            response = self.pool.request(
                method,
                self._url(path, query),
                body=payload,
                headers=headers,
                timeout=REQUEST_TIMEOUT_S,
                retries=False,
            )
        except urllib3.exceptions.ProtocolError:
            # A kept-alive connection the server closed while idle: it never saw this
            # request, so it is sent again once, on a new connection.
            self.pool.clear()
            response = self.pool.request(
                method,
                self._url(path, query),
                body=payload,
                headers=headers,
                timeout=REQUEST_TIMEOUT_S,
                retries=False,
            )
        raw = bytes(response.data)
        answer_type = str(response.headers.get("Content-Type", "")).split(";")[0].strip()
        try:
            parsed = json.loads(raw) if raw and answer_type == "application/json" else None
        except ValueError:
            parsed = None
        return Answer(status=response.status, content_type=answer_type, body=parsed, raw=raw)

    def watch(
        self,
        path: str,
        query: Mapping[str, str],
        *,
        until: Callable[[list[dict[str, Any]]], bool],
        timeout: float = WATCH_TIMEOUT_S,
        during: Callable[[], object] | None = None,
    ) -> tuple[int, list[dict[str, Any]]]:
        """Open a watch; once it is open, call ``during`` (a write the watch should see);
        read its events until ``until(events)`` holds, the stream ends, or ``timeout``
        passes. Returns the HTTP status and the events read.

        A 429 with a ``Retry-After`` is asked again after it (at most 1 s each), within
        ``timeout``, as client-go does: a real kube-apiserver answers so ("storage is
        (re)initializing") to a watch of a resource whose watch cache is still filling, as a
        custom resource's is just after its CRD is served."""
        asking_until = time.monotonic() + timeout
        while True:
            response = self.pool.request(
                "GET",
                self._url(path, {"watch": "true", **query}),
                headers={**self.headers, "Accept": "application/json"},
                timeout=urllib3.Timeout(connect=REQUEST_TIMEOUT_S, read=timeout),
                preload_content=False,
                retries=False,
            )
            retry_after = response.headers.get("Retry-After")
            if response.status != 429 or retry_after is None:
                break
            pause = min(float(retry_after), RETRY_AFTER_MAX_S)
            if time.monotonic() + pause > asking_until:
                break
            response.drain_conn()
            response.release_conn()
            time.sleep(pause)
        events: list[dict[str, Any]] = []
        if response.status != 200:
            body = response.read()
            response.release_conn()
            events.append({"type": "HTTP", "object": json.loads(body) if body else None})
            return response.status, events
        if during is not None:
            during()
        deadline = time.monotonic() + timeout
        pending = b""
        try:
            for chunk in response.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                events.extend(json.loads(line) for line in lines if line.strip())
                if until(events) or time.monotonic() > deadline:
                    break
        except urllib3.exceptions.ReadTimeoutError:
            pass  # nothing more came within the timeout: the events read so far are the answer
        finally:
            response.close()
        return response.status, events


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pair:
    """The same request's answers from both servers."""

    local: Answer
    real: Answer

    def __iter__(self) -> Iterator[Answer]:
        return iter((self.local, self.real))

    def of(self, wire: Wire) -> Answer:
        """The answer of ``wire``'s server."""
        return self.local if wire.name == "local" else self.real

    def shown(self) -> str:
        """Both answers, for an assertion's message."""
        return (
            f"\n  local: {self.local.status} {self.local.raw[:600]!r}"
            f"\n  real:  {self.real.status} {self.real.raw[:600]!r}"
        )

    def agree(self, status: int, reason: str | None = None) -> Pair:
        """Both answered ``status`` (and, for a Status body, ``reason``); returns itself."""
        assert (self.local.status, self.real.status) == (status, status), self.shown()
        assert self.local.reason == self.real.reason == reason, self.shown()
        return self

    def same_message(self) -> Pair:
        """Both Status bodies carry the same message (what kubectl and the clients print)."""
        assert self.local.message == self.real.message, self.shown()
        return self


class Servers:
    """The local API and a real kube-apiserver, sent the same requests."""

    def __init__(self, *, local: Wire, real: Wire) -> None:
        self.local = local
        self.real = real

    def __iter__(self) -> Iterator[Wire]:
        return iter((self.local, self.real))

    def request(self, method: str, path: str, **kwargs: Any) -> Pair:
        return Pair(
            local=self.local.request(method, path, **kwargs),
            real=self.real.request(method, path, **kwargs),
        )

    def each(self, send: Callable[[Wire], Answer]) -> Pair:
        """``send`` to each server: for requests that carry what that server answered before
        (its own resourceVersion or uid)."""
        return Pair(local=send(self.local), real=send(self.real))
