"""A consumer pod's real API calls on the local stack against the example consumer Role.

An ``ehb consume`` process (as in a pod: Downward API env, its own kubeconfig) talks to the
local API server through the recording proxy, receives from the Event Hubs emulator and
checkpoints into Azurite. The test plays the operator: it writes the pod's assignment
ConfigMap (two partitions), then revokes one; the consumer applies the first, releases the
second after its final checkpoint, acknowledges both, and on SIGTERM releases the rest. Every
recorded request must be allowed by the Role the example Deployment's ServiceAccount is bound
to in manifests/examples/, every granted verb must have been used, and every write must pass
the consumers' ValidatingAdmissionPolicy (evaluated by cel-python) as the pod's bound token.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI, kubeconfigs
from tests.install.wire.test_recorded_operator import ProxyThread
from tests.support import consumerprocesses, loading
from tests.support.consumerfakes import configmap
from tests.support.fixtures.operator import wait_for
from tests.support.rbac import admission
from tests.support.rbac.authorizing import Authorizer, Subject
from tests.support.rbac.recording import RecordingProxy

EXAMPLES = loading.MANIFESTS_DIR / "examples"
#: Every wait for the consumer is bounded by this (seconds).
WAIT_S = 30.0
#: The consumer pod's uid (its Downward API env and the ConfigMap's annotation).
POD_UID = "uid-orders-consumer-0"


def consumer_subject() -> tuple[Subject, str]:
    """The ServiceAccount the example consumer Deployment runs as, and its namespace."""
    for document in loading.file_documents(EXAMPLES):
        body = document.body
        if body.get("kind") == "Deployment" and body["metadata"]["name"] == "orders-consumer":
            namespace = body["metadata"]["namespace"]
            account = body["spec"]["template"]["spec"]["serviceAccountName"]
            return Subject.service_account(namespace, account), namespace
    raise AssertionError("manifests/examples/ has no orders-consumer Deployment")


@pytest.fixture
def recorded_api(tmp_path: Path) -> Iterator[tuple[LocalKubeAPI, RecordingProxy, Path]]:
    kube = LocalKubeAPI().start()
    try:
        with ProxyThread(kube.url) as proxy:
            yield kube, proxy, kubeconfigs.write(tmp_path / "proxied", server=proxy.url)
    finally:
        kube.stop()


def annotations(kube: LocalKubeAPI, namespace: str, name: str) -> dict[str, str]:
    body = kube.get_object("v1/configmaps", name, namespace=namespace) or {}
    return dict(body.get("metadata", {}).get("annotations") or {})


def test_consumer_calls_are_allowed_by_the_example_role(
    recorded_api: tuple[LocalKubeAPI, RecordingProxy, Path],
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    tmp_path: Path,
) -> None:
    kube, proxy, kubeconfig = recorded_api
    subject, namespace = consumer_subject()
    pod = "orders-consumer-0"
    name = configmaps.configmap_name(consumer="orders", pod=pod)
    metadata = {
        "name": name,
        "labels": configmaps.labels(consumer="orders", pod=pod),
        # As the operator writes it: the pod applies only a ConfigMap that carries its uid.
        "annotations": {configmaps.ANNOTATION_POD_UID: POD_UID},
    }
    container = blob_container.container_name
    body = configmap(1, {"0": (1, "owned"), "1": (1, "owned")}, checkpointContainer=container)
    # As the operator writes it: data names the consumer and the pod (the policy checks it).
    body["data"].update({configmaps.KEY_CONSUMER: "orders", configmaps.KEY_POD: pod})
    kube.create_object("v1/configmaps", {**body, "metadata": metadata}, namespace=namespace)
    records = tmp_path / "records"
    records.mkdir()
    env = {
        **os.environ,
        "POD_NAME": pod,
        "POD_NAMESPACE": namespace,
        "POD_UID": POD_UID,
        # The local stack's emulators listen on loopback: allowed only when said so.
        "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
        "EHB_CONSUMER": "orders",
        "KUBECONFIG": str(kubeconfig),
        "EHB_EVENTHUB_CONNECTION_STRING": consumer_emulator.connection_string(),
        "EHB_BLOB_CONNECTION_STRING": azurite.connection_string,
        "EHB_TEST_RECORD_DIR": str(records),
    }
    command = consumerprocesses.consume_command("recording:process")
    log = tmp_path / "consumer.stderr"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        wait_for(
            lambda: configmaps.parse_applied_generation(annotations(kube, namespace, name)) == 1,
            timeout=WAIT_S,
            what="generation 1 applied",
        )
        kube.patch_object(
            "v1/configmaps",
            name,
            {
                "data": configmap(
                    2,
                    {"0": (1, "owned"), "1": (1, "revoking")},
                    pod=pod,
                    checkpointContainer=container,
                )["data"]
            },
            namespace=namespace,
        )
        wait_for(
            lambda: configmaps.parse_released(annotations(kube, namespace, name)) == {"1": 1},
            timeout=WAIT_S,
            what="partition 1 released",
        )
        assert configmaps.parse_applied_generation(annotations(kube, namespace, name)) == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
        # The shutdown released the rest with a last acknowledgement.
        assert configmaps.parse_released(annotations(kube, namespace, name)) == {"0": 1, "1": 1}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        print(log.read_text(errors="replace")[-3000:])

    recorded = proxy.recorded
    assert recorded, "the consumer made no request through the proxy"
    failed = [(r.method, r.path_qs, r.status) for r in recorded if r.status >= 400]
    assert failed == []
    requests = proxy.requests
    print("recorded:", sorted({(r.verb, r.resource, r.namespace) for r in requests}))
    assert {(r.verb, r.resource) for r in requests} >= {
        ("list", "configmaps"),
        ("watch", "configmaps"),
        ("patch", "configmaps"),
    }
    role = Authorizer(d.body for d in loading.file_documents(EXAMPLES))
    assert role.grants(subject), f"no binding in manifests/examples/ for {subject}"
    assert [r.describe() for r in role.denied(subject, requests)] == []
    unused = {(a.verb, a.resource) for a in role.unexercised(subject, requests)}
    assert unused == set(), f"granted but never used: {sorted(unused)}"
    # Every write the runtime made passes the admission policy, as the pod's bound token.
    writes = [r for r in recorded if r.method in ("PATCH", "PUT")]
    assert writes
    user = f"system:serviceaccount:{namespace}:{subject.name}"
    for policy in admission_policies():
        for r in writes:
            request = admission.Request(
                operation="UPDATE",
                username=user,
                extra={
                    "authentication.kubernetes.io/pod-name": [pod],
                    "authentication.kubernetes.io/pod-uid": [POD_UID],
                },
                object=r.after,
                old_object=r.before,
                namespace=namespace,
            )
            assert policy.denials(request) == [], r.path_qs


def admission_policies() -> list[admission.Policy]:
    install = loading.file_documents(loading.MANIFESTS_DIR / "install")
    bodies = [d.body for d in [*install, *loading.rendered(None)]]
    return [admission.Policy(b) for b in bodies if b.get("kind") == "ValidatingAdmissionPolicy"]
