"""The local kubelet keeps Pod objects in step with real processes, as a cluster would."""

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from eventhub_balancer.contracts import podstates
from eventhub_balancer_devstack import kubelet

# A pod process: serves /readyz on its port until SIGTERM, which it takes a moment to honour
# (as a consumer writing its final checkpoint would).
POD_PROGRAM = """
import http.server, signal, sys, threading, time
port = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/readyz" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
def stop(*_):
    time.sleep(0.3)
    threading.Thread(target=server.shutdown).start()
signal.signal(signal.SIGTERM, stop)
server.serve_forever()
"""


def wait_for(predicate: Any, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not true within {timeout_s} s: {predicate}")


@pytest.fixture
def pods(kube_client: Any) -> Iterator[kubelet.LocalKubelet]:
    template = kubelet.PodTemplate(
        name_prefix="worker",
        labels={"app": "worker"},
        command=lambda name, port: [sys.executable, "-c", POD_PROGRAM, str(port)],
        termination_grace_s=5,
    )
    with kubelet.LocalKubelet(api_client=kube_client, namespace="demo", template=template) as k:
        yield k


def ready_status(core: Any, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, "demo")
    for condition in pod.status.conditions or []:
        if condition.type == "Ready":
            return str(condition.status)
    return None


def test_pods_follow_their_processes(pods: kubelet.LocalKubelet, kube_client: Any) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    created = pods.scale(2)
    assert len(created) == 2
    pods.wait_ready(timeout_s=20)
    listed = core.list_namespaced_pod("demo", label_selector="app=worker").items
    assert sorted(p.metadata.name for p in listed) == sorted(created)
    assert all(ready_status(core, name) == "True" for name in created)
    assert all(p.status.phase == "Running" for p in listed)

    # A crash: NotReady, restarted in the same pod, Ready again.
    victim = created[0]
    old_pid = pods.pid(victim)
    pods.kill(victim)
    wait_for(lambda: pods.restarts(victim) == 1)
    assert pods.pid(victim) != old_pid
    pods.wait_ready([victim], timeout_s=20)
    wait_for(lambda: ready_status(core, victim) == "True")
    # Said as a kubelet says it, so that the operator tells a restart from a first start (and
    # puts the pod on probation): until 7 December the local kubelet wrote no lastState.
    body = kube_client.sanitize_for_serialization(core.read_namespaced_pod(victim, "demo"))
    (container,) = body["status"]["containerStatuses"]
    ended = container["lastState"]["terminated"]
    assert (ended["exitCode"], ended["reason"]) == (137, "Error")  # SIGKILL, as a runtime says
    assert ended["startedAt"] <= ended["finishedAt"] <= container["state"]["running"]["startedAt"]
    assert podstates.pod_state(body).restarted
    other = kube_client.sanitize_for_serialization(core.read_namespaced_pod(created[1], "demo"))
    assert other["status"]["containerStatuses"][0]["lastState"] == {}
    assert not podstates.pod_state(other).restarted


def test_deletion_is_graceful(pods: kubelet.LocalKubelet, kube_client: Any) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    (name,) = pods.scale(1)
    pods.wait_ready(timeout_s=20)
    pods.scale(0)
    # Terminating first: the object stays, with a deletionTimestamp, while the process exits.
    pod = core.read_namespaced_pod(name, "demo")
    assert pod.metadata.deletion_timestamp is not None
    wait_for(lambda: not core.list_namespaced_pod("demo", label_selector="app=worker").items)
    assert pods.names() == []
