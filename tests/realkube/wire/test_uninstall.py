"""docs/operations.md, "Uninstalling", on a real kube-apiserver and controller-manager.

Every EventHubConsumer the operator served carries kopf's finalizer (its daemon requires one:
`kopfwiring` names it ``eventhub-balancer.dev/finalizer``), and only a running operator takes
it off. One left behind when the operator is gone keeps ``kubectl delete -f crds/`` waiting
for ever, with the CRD Terminating; the page's command that takes the finalizer off ends it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi
from eventhub_balancer.contracts import specs
from tests.install.test_crd_rules import example
from tests.support import paths
from tests.support.fixtures.kube import kubectl_binary
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = "shop"
FINALIZER = f"{specs.GROUP}/finalizer"
CRD = f"{specs.PLURAL}.{specs.GROUP}"
#: How long the CRD's deletion is given to go through on its own, and then after the
#: finalizer went: the controller-manager deletes the custom resources, and then the CRD,
#: within a second or two when nothing holds them.
SETTLE_SECONDS = 5.0


def exists(kubectl: Kubectl, *args: str) -> bool:
    return kubectl("get", *args, "--ignore-not-found", "-o", "name").stdout.strip() != ""


def test_a_consumer_left_after_the_operator_holds_the_crd_until_its_finalizer_goes(
    real_kubectl: Kubectl,
) -> None:
    real_kubectl("create", "namespace", NAMESPACE)
    body = example()
    body["metadata"] = {"name": "orders", "namespace": NAMESPACE, "finalizers": [FINALIZER]}
    real_kubectl("apply", "-f", "-", input=json.dumps(body))

    # The operator is gone (helm uninstall); the page then deletes the CRD.
    real_kubectl("delete", "-f", str(paths.CRDS), "--wait=false")
    time.sleep(SETTLE_SECONDS)
    crd = json.loads(real_kubectl("get", "crd", CRD, "-o", "json").stdout)
    assert crd["metadata"].get("deletionTimestamp"), "the CRD is not being deleted"
    assert exists(real_kubectl, "ehc", "orders", "-n", NAMESPACE), "the consumer went anyway"

    # What the page says to run for a consumer left behind.
    real_kubectl(
        "patch", "ehc", "orders", "-n", NAMESPACE, "--type", "json",
        "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]',
    )  # fmt: skip
    deadline = time.monotonic() + SETTLE_SECONDS
    while exists(real_kubectl, "crd", CRD) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not exists(real_kubectl, "crd", CRD), "the CRD stayed after the finalizer went"


#: The namespace of the namespace-deletion test (the test above deletes the CRD).
LEFT_NAMESPACE = "shop-left"
#: An Event the operator would post about the consumer there.
EVENT = {
    "metadata": {"generateName": "orders-"},
    "involvedObject": {"kind": "EventHubConsumer", "name": "orders"},
    "reason": "PartitionAssigned",
    "message": "Assigned partitions 0-1 to c-0 (epoch 1)",
    "type": "Normal",
}


def namespace_command() -> str:
    """docs/operations.md's command that frees a namespace whose consumers outlived the
    operator: the sh line of "Uninstalling" that deletes no CRD and names ``xargs``."""
    text = (paths.REPOSITORY / "docs" / "operations.md").read_text()
    section = text.split("## Uninstalling", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    (line,) = [c for b in blocks for c in b.splitlines() if c.startswith("kubectl get ehc -n ")]
    return line


def test_a_namespace_left_with_a_consumer_after_the_operator_goes_once_the_page_says_how(
    real_kubectl: Kubectl, real_kubeconfig: Path
) -> None:
    """`kubectl delete namespace` after `helm uninstall`: the namespace stays Terminating for
    ever, held by the consumer's finalizer, until the page's command takes it off."""
    real_kubectl("apply", "-f", str(paths.CRDS))  # the test above deleted it
    real_kubectl("create", "namespace", LEFT_NAMESPACE)
    body = example()
    body["metadata"] = {"name": "orders", "namespace": LEFT_NAMESPACE, "finalizers": [FINALIZER]}
    deadline = time.monotonic() + SETTLE_SECONDS * 6
    while real_kubectl("apply", "-f", "-", input=json.dumps(body), check=False).returncode:
        assert time.monotonic() < deadline, "the CRD is not served"
        time.sleep(0.5)

    real_kubectl("delete", "namespace", LEFT_NAMESPACE, "--wait=false")
    time.sleep(SETTLE_SECONDS)
    assert exists(real_kubectl, "namespace", LEFT_NAMESPACE), "the namespace went anyway"
    # Meanwhile kube-apiserver refuses every create there (an Event of the operator's, say);
    # the operator takes that for the namespace going, not for a right its RBAC lacks.
    api = kubeapi.KubeAPI.from_environment(str(real_kubeconfig))
    try:
        with pytest.raises(errors.NamespaceTerminating, match="is being deleted") as refused:
            asyncio.run(api.create_event(namespace=LEFT_NAMESPACE, body=EVENT))
        assert "grant" not in str(refused.value)
    finally:
        api.close()

    binary = kubectl_binary()
    assert binary is not None
    kubectl = f"{shlex.quote(binary)} --kubeconfig {shlex.quote(str(real_kubeconfig))} "
    command = namespace_command().replace("shop", LEFT_NAMESPACE).replace("kubectl ", kubectl)
    subprocess.run(command, shell=True, check=True, timeout=60, capture_output=True)
    deadline = time.monotonic() + SETTLE_SECONDS * 2
    while exists(real_kubectl, "namespace", LEFT_NAMESPACE) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not exists(real_kubectl, "namespace", LEFT_NAMESPACE), "the namespace stayed"
