"""The local API's kubelet ends a deleted pod's reaper quietly when the API went first.

Stopping a stack (or a test's teardown) while a pod terminated left the reaper thread's
``Connection refused`` traceback on stderr, which pytest reported as an unhandled thread
exception of whichever test ran then (seen in CI, in ``test_deletion_is_graceful``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack import kubelet


class Core:
    """CoreV1Api's pod patch, failing as told."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.patches: list[tuple[str, Any]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self.patches.append((name, body))
        if self.error is not None:
            raise self.error


def finished(error: BaseException | None) -> tuple[Core, kubelet._Pod]:
    pods = kubelet.LocalKubelet.__new__(kubelet.LocalKubelet)
    core = Core(error)
    pods._core = core  # type: ignore[assignment]
    pods._namespace = "demo"
    pods._pods = {}
    pods._lock = threading.RLock()
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=30)
    pod = kubelet._Pod(name="worker-a", uid="u", port=1, process=process)
    pods._pods[pod.name] = pod
    pods._finish(pod)
    return core, pod


@pytest.mark.parametrize(
    "error",
    [
        None,
        ApiException(status=404),
        urllib3.exceptions.MaxRetryError(None, "/api/v1/namespaces/demo/pods/worker-a"),  # type: ignore[arg-type]
        ConnectionRefusedError(111, "Connection refused"),
    ],
)
def test_the_finalizer_is_released_or_the_api_was_away(error: BaseException | None) -> None:
    core, pod = finished(error)
    assert core.patches == [("worker-a", {"metadata": {"finalizers": None}})]
    assert pod.gone
