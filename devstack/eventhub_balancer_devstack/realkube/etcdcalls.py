"""etcd's own API, for what the API server does not offer: health, revision, compaction.

etcd's gRPC gateway answers JSON on its client URL (``/v3/kv/range``, ``/v3/kv/compaction``,
``/health``), so no etcdctl is needed: a test compacts the history the API server's
resourceVersions point into, as a cluster's compaction does every few minutes.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

#: The longest wait for one call to etcd on loopback.
TIMEOUT_S = 10.0


def _post(port: int, method: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v3/{method}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


def healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
        return bool(json.loads(answer.read()).get("health") == "true")


def revision(port: int) -> int:
    """The current revision (what the API server's resourceVersions are)."""
    answer = _post(port, "kv/range", {"key": base64.b64encode(b"\0").decode()})
    return int(answer["header"]["revision"])


def compact(port: int) -> int:
    """Compact the history up to now; returns the revision compacted to."""
    current = revision(port)
    _post(port, "kv/compaction", {"revision": str(current), "physical": True})
    return current
