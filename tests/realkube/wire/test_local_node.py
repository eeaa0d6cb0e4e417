"""This machine as a node of the real control plane: Deployments become running pods.

The real kube-controller-manager makes a Deployment's ReplicaSet and Pods; the local node
binds them to itself, runs each as a process and reports it Ready from its readiness probe.
``kubectl scale`` and ``kubectl delete pod`` then work as on a cluster, the node stays Ready on
its Lease, and a pod's dependents are collected through their ownerReference.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventhub_balancer_devstack import deployments
from eventhub_balancer_devstack.realkube import (
    RealControlPlane,
    accountmounts,
    nodes,
    podwatches,
    secretvolumes,
    writerecords,
)
from tests.support.fixtures.kube import kubectl_binary
from tests.support.fixtures.realkube import READY_SERVER, Kubectl

NAMESPACE = "node-test"
IMAGE = "local/ready-server"
#: The same server, which first says who it is to the API server (``--whoami``).
WHOAMI = "local/whoami"
#: Pods start in about a second (the controllers, the binding, a Python process); the bound is
#: generous for a loaded 2-core machine.
WAIT_S = 60.0


def deployment(
    replicas: int, *, name: str = "ready", image: str = IMAGE, account: str = "default"
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "server",
                            "image": image,
                            "args": ["--port=8080"],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                        }
                    ],
                },
            },
        },
    }


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def ready_pods(kube: RealControlPlane, app: str = "ready") -> list[str]:
    pods = kube.list_objects("v1/pods", namespace=NAMESPACE, label_selector=f"app={app}")
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


@pytest.fixture(scope="module")
def node(
    real_kube: RealControlPlane,
    local_node_factory: Callable[[Mapping[str, deployments.LocalImage]], nodes.LocalNode],
) -> nodes.LocalNode:
    whoami = deployments.LocalImage(entrypoint=(*READY_SERVER.entrypoint, "--whoami"))
    return local_node_factory({IMAGE: READY_SERVER, WHOAMI: whoami})


def test_a_deployment_runs_on_the_node_and_scales(
    real_kube: RealControlPlane, real_kubectl: Kubectl, node: nodes.LocalNode
) -> None:
    real_kubectl("create", "namespace", NAMESPACE)
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump(deployment(2)))
    two = wait_for(
        "two Ready pods", lambda: len(ready_pods(real_kube)) == 2 and ready_pods(real_kube)
    )
    for name in two:
        pod = real_kube.get_object("v1/pods", name, namespace=NAMESPACE)
        assert pod is not None
        assert pod["spec"]["nodeName"] == node.name
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert len(node.running()) == 2

    real_kubectl("-n", NAMESPACE, "scale", "deployment/ready", "--replicas=3")
    wait_for("three Ready pods", lambda: len(ready_pods(real_kube)) == 3)

    real_kubectl("-n", NAMESPACE, "scale", "deployment/ready", "--replicas=1")
    wait_for(
        "one pod left", lambda: len(real_kube.list_objects("v1/pods", namespace=NAMESPACE)) == 1
    )
    wait_for("one process left", lambda: len(node.running()) == 1)


def test_a_deleted_pod_stops_and_is_replaced_and_its_dependents_collected(
    real_kube: RealControlPlane, real_kubectl: Kubectl, node: nodes.LocalNode
) -> None:
    (pod,) = wait_for("one Ready pod", lambda: ready_pods(real_kube))
    body = real_kube.get_object("v1/pods", pod, namespace=NAMESPACE)
    assert body is not None
    real_kube.create_object(
        "v1/configmaps",
        {
            "metadata": {
                "name": f"{pod}-assignment",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": body["metadata"]["uid"]}
                ],
            },
            "data": {"partitions": "0,1"},
        },
        namespace=NAMESPACE,
    )
    pid = node.running()[f"{NAMESPACE}/{pod}"]

    real_kubectl("-n", NAMESPACE, "delete", "pod", pod, "--wait=false")
    wait_for(
        "the old pod gone",
        lambda: real_kube.get_object("v1/pods", pod, namespace=NAMESPACE) is None,
    )
    assert f"{NAMESPACE}/{pod}" not in node.running()
    assert pid not in node.running().values()
    (replacement,) = wait_for("a Ready replacement", lambda: ready_pods(real_kube))
    assert replacement != pod
    wait_for(
        "the garbage collector to delete the pod's ConfigMap",
        lambda: (
            real_kube.get_object("v1/configmaps", f"{pod}-assignment", namespace=NAMESPACE) is None
        ),
    )


def test_the_node_is_ready_on_its_lease(real_kube: RealControlPlane, node: nodes.LocalNode) -> None:
    body = real_kube.get_object("v1/nodes", node.name)
    assert body is not None
    ready = [c for c in body["status"]["conditions"] if c["type"] == "Ready"]
    assert ready
    assert ready[0]["status"] == "True"
    lease = real_kube.get_object(
        "coordination.k8s.io/v1/leases", node.name, namespace="kube-node-lease"
    )
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == node.name


def test_a_crashed_process_restarts_in_its_pod(
    real_kube: RealControlPlane, node: nodes.LocalNode
) -> None:
    (pod,) = wait_for("one Ready pod", lambda: ready_pods(real_kube))
    node.kill(NAMESPACE, pod)

    def restarted() -> bool:
        body = real_kube.get_object("v1/pods", pod, namespace=NAMESPACE) or {}
        statuses = (body.get("status") or {}).get("containerStatuses") or [{}]
        return bool(statuses[0].get("restartCount", 0) >= 1 and pod in ready_pods(real_kube))

    wait_for("the pod Ready again after one restart", restarted)


def test_a_pod_is_its_serviceaccount_through_the_in_cluster_configuration(
    real_kube: RealControlPlane, real_kubectl: Kubectl, node: nodes.LocalNode
) -> None:
    """As on a cluster, a pod finds its token where a kubelet mounts it and the API server in
    ``KUBERNETES_SERVICE_HOST``: kopf's login, as the operator gives it, is the pod's
    ServiceAccount. So every pod of the real-control-plane tests (the operator's included)
    loads the in-cluster configuration, which no test loaded while pods had a kubeconfig."""
    if os.geteuid() != 0:
        pytest.skip("a mount namespace of each pod's own needs root; the node gives a kubeconfig")
    assert node.unmountable is None, f"the node gives pods a kubeconfig: {node.unmountable}"
    real_kubectl("-n", NAMESPACE, "create", "serviceaccount", "who")
    real_kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(deployment(1, name="whoami", image=WHOAMI, account="who")),
    )
    (pod,) = wait_for("the whoami pod Ready", lambda: ready_pods(real_kube, "whoami"))
    said = json.loads((node.log_dir / f"{pod}.log").read_text().splitlines()[0])
    assert said == {
        "username": f"system:serviceaccount:{NAMESPACE}:who",
        "server": real_kube.url.rstrip("/"),
        "kubeconfig": None,
    }
    # Only in the pod's own mount namespace: the machine's mount point stays empty.
    assert not any(accountmounts.MOUNT.iterdir())
    real_kubectl("-n", NAMESPACE, "delete", "deployment/whoami", "--wait=false")
    wait_for(
        "the whoami pod gone",
        lambda: (
            not real_kube.list_objects("v1/pods", namespace=NAMESPACE, label_selector="app=whoami")
        ),
    )


def test_kubectl_logs_reads_a_pods_output_through_the_api_server(
    real_kube: RealControlPlane,
    real_kubectl: Kubectl,
    real_kubeconfig: Path,
    node: nodes.LocalNode,
) -> None:
    """``kubectl logs`` failed on the local stack (``dial tcp: lookup ehb-local-node ... no
    such host``): the node named no port for it, and the API server dialled its Hostname."""
    real_kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(deployment(1, name="talker", image=WHOAMI))
    )
    (pod,) = wait_for("the talker pod Ready", lambda: ready_pods(real_kube, "talker"))
    written = (node.log_dir / f"{pod}.log").read_text()
    assert written
    shown = real_kubectl("-n", NAMESPACE, "logs", "deploy/talker")
    assert shown.stdout == written
    tail = real_kubectl("-n", NAMESPACE, "logs", pod, "--tail=1")
    assert tail.stdout == written.splitlines(keepends=True)[-1]
    previous = real_kubectl("-n", NAMESPACE, "logs", pod, "--previous", check=False)
    assert previous.returncode != 0
    assert "leave out --previous" in previous.stderr
    # A kubelet's streams are refused in words, which the API server passes on (it passed on
    # an HTML error page for kubectl exec).
    shell = real_kubectl("-n", NAMESPACE, "exec", pod, "--", "true", check=False)
    assert shell.returncode != 0
    assert (
        f"the local node serves logs only, not kubectl exec: pod {NAMESPACE}/{pod} is a "
        "process of this machine: run the command here instead"
    ) in shell.stderr, shell.stderr
    assert "<html" not in shell.stderr.lower()
    forward = real_kubectl("-n", NAMESPACE, "port-forward", pod, "18080:8080", check=False)
    assert forward.returncode != 0
    assert (
        f"not kubectl port-forward: pod {NAMESPACE}/{pod} is a process of this machine, "
        f"listening on 127.0.0.1:{node.port(NAMESPACE, pod)}: connect there"
    ) in forward.stderr, forward.stderr
    # Followed, the log ends when the pod stops, as a kubelet ends it with the container.
    binary = kubectl_binary()
    assert binary is not None
    follow = subprocess.Popen(
        [binary, "--kubeconfig", str(real_kubeconfig), "-n", NAMESPACE, "logs", "-f", pod],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "HOME": str(real_kubeconfig.parent)},
    )
    try:
        time.sleep(1.0)  # the follow is open
        real_kubectl("-n", NAMESPACE, "delete", "deployment/talker", "--wait=false")
        out, err = follow.communicate(timeout=WAIT_S)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    assert out.decode().startswith(written)


def test_a_pod_waits_for_its_secret_and_starts_once_it_is_there(
    real_kube: RealControlPlane, real_kubectl: Kubectl, node: nodes.LocalNode
) -> None:
    """A pod whose Secret did not exist waited for ever in CreateContainerConfigError, and
    said the Secret had no such key; a kubelet says it is not found, and starts the pod once
    it is there (a GitOps tool or an external-secrets operator writes it later)."""
    real_kubectl("create", "namespace", NAMESPACE, check=False)  # made already, when not alone
    body = deployment(1, name="needs-secret")
    (container,) = body["spec"]["template"]["spec"]["containers"]
    container["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}
    ]
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump(body))

    def waiting() -> str:
        pods = real_kube.list_objects(
            "v1/pods", namespace=NAMESPACE, label_selector="app=needs-secret"
        )
        for p in pods:
            for c in (p.get("status") or {}).get("containerStatuses") or []:
                state = (c.get("state") or {}).get("waiting") or {}
                if state.get("reason") == "CreateContainerConfigError":
                    return str(state.get("message"))
        return ""

    assert wait_for("the pod waiting for its Secret", waiting) == 'secret "later" not found'
    real_kubectl("-n", NAMESPACE, "create", "secret", "generic", "later", "--from-literal=x=1")
    assert (
        wait_for("the pod waiting for its key", lambda: "key" in waiting() and waiting())
        == f"couldn't find key token in Secret {NAMESPACE}/later"
    )
    real_kubectl("-n", NAMESPACE, "delete", "secret", "later")
    real_kubectl("-n", NAMESPACE, "create", "secret", "generic", "later", "--from-literal=token=t")
    wait_for("the pod Ready", lambda: ready_pods(real_kube, "needs-secret"))
    real_kubectl("-n", NAMESPACE, "delete", "deployment/needs-secret", "--wait=false")


def test_a_pod_that_never_started_is_gone_as_soon_as_it_is_deleted(
    real_kube: RealControlPlane, real_kubectl: Kubectl, node: nodes.LocalNode
) -> None:
    """A rollout undone while its new pod waited in CreateContainerConfigError left that pod
    Terminating for good: the node confirmed no deletion of a pod it had refused. None of its
    containers runs, so a kubelet removes it at once, whatever its grace period."""
    real_kubectl("create", "namespace", NAMESPACE, check=False)  # made already, when not alone
    body = deployment(1, name="never-starts")
    spec = body["spec"]["template"]["spec"]
    spec["terminationGracePeriodSeconds"] = 3600
    spec["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}
    ]
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump(body))

    def waiting() -> list[str]:
        pods = real_kube.list_objects(
            "v1/pods", namespace=NAMESPACE, label_selector="app=never-starts"
        )
        return [
            p["metadata"]["name"]
            for p in pods
            for c in (p.get("status") or {}).get("containerStatuses") or []
            if ((c.get("state") or {}).get("waiting") or {}).get("reason")
            == "CreateContainerConfigError"
        ]

    wait_for("the pod waiting for its Secret", waiting)
    real_kubectl("-n", NAMESPACE, "delete", "deployment/never-starts", "--wait=false")
    wait_for(
        "the pod gone",
        lambda: (
            not real_kube.list_objects(
                "v1/pods", namespace=NAMESPACE, label_selector="app=never-starts"
            )
        ),
    )


def test_a_changed_secret_reaches_the_files_of_its_running_pod(
    real_kube: RealControlPlane, real_kubectl: Kubectl, node: nodes.LocalNode
) -> None:
    """A kubelet writes a Secret volume again once its Secret changed, and a consumer pod
    follows a rotated credential in its file. The node wrote the files once, at the pod's
    start: a rotation tried on the local stack never reached the pods."""
    real_kubectl("create", "namespace", NAMESPACE, check=False)  # made already, when not alone
    real_kubectl("-n", NAMESPACE, "create", "secret", "generic", "rotated", "--from-literal=k=1")
    body = deployment(1, name="rotating")
    spec = body["spec"]["template"]["spec"]
    spec["volumes"] = [
        {"name": "creds", "secret": {"secretName": "rotated", "items": [{"key": "k", "path": "f"}]}}
    ]
    spec["containers"][0]["volumeMounts"] = [{"name": "creds", "mountPath": "/var/run/creds"}]
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    (name,) = wait_for("the pod Ready", lambda: ready_pods(real_kube, "rotating"))
    file = node.log_dir.parent / NAMESPACE / name / "volumes" / "creds" / "f"
    assert file.read_text() == "1"
    new = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rotated"}}
    real_kubectl(
        "-n", NAMESPACE, "apply", "-f", "-", input=yaml.safe_dump({**new, "stringData": {"k": "2"}})
    )
    assert wait_for("the new value in the file", lambda: file.read_text() == "2")
    # A Secret gone leaves the last content, as a kubelet's volume does.
    real_kubectl("-n", NAMESPACE, "delete", "secret", "rotated")
    time.sleep(secretvolumes.SYNC_S * 2)
    assert file.read_text() == "2"
    real_kubectl("-n", NAMESPACE, "delete", "deployment/rotating", "--wait=false")


#: A watch timeout far longer than the bound below: a stop that waited for the server to end
#: the watch (as every teardown did, up to 5 s a watch) fails the test.
LONG_WATCH_S = 120
STOP_BOUND_S = 30.0


def test_stopping_ends_the_watches_in_flight_at_once(
    real_kube: RealControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(podwatches, "WATCH_SECONDS", LONG_WATCH_S)
    monkeypatch.setattr(writerecords, "WATCH_SECONDS", LONG_WATCH_S)
    changes: list[str] = []
    before = set(threading.enumerate())
    watches = [podwatches.PodWatch(real_kube.calls, lambda kind, pod: changes.append(kind))]
    record = writerecords.WatchWriteRecord(real_kube.calls)
    record.record("v1/configmaps")
    record.record("v1/secrets")
    for watch in watches:
        watch.start()
    time.sleep(1.0)  # each thread now waits in its watch's read
    started = time.monotonic()
    for watch in watches:
        watch.stop()
    record.stop()
    took = time.monotonic() - started
    assert took < STOP_BOUND_S, f"the watches ended at their timeout, {took:.1f} s after stop"
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not left, left
    # The connections of the ended reads were dropped, not pooled: the next call works.
    assert real_kube.calls.call("GET", "/api/v1/namespaces/default")["metadata"]["name"]
