"""The real kubectl against the local API: apply with validation, tables, wait, admission.

kubectl is the client a user runs first, and the strictest: it reads /openapi before it
applies, asks for Table responses, and watches for conditions. These tests drive it as a user
would, against the repository's own manifests.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI, identities

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "manifests" / "examples"
EHC = "eventhub-balancer.dev/v1alpha1/eventhubconsumers"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

BAD_CR = """
apiVersion: eventhub-balancer.dev/v1alpha1
kind: EventHubConsumer
metadata: {name: bad, namespace: shop}
spec:
  checkpointStore:
    containerName: checkpoints
    credentials: {connectionStringSecretRef: {name: orders-blob, key: connectionString}}
  selector: {matchLabels: {app: orders}}
  balancing: {intervalSeconds: -5, weighting: nonsense}
  startPosition: beginning
"""


def _condition(kind: str, status: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": "Test", "message": "set by the test",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip


def _apply_examples(kubectl: Kubectl) -> None:
    files = [
        EXAMPLES / f for f in ("00-namespace.yaml", "10-secrets.yaml", "20-eventhubconsumer.yaml")
    ]
    args = [a for f in files for a in ("-f", str(f))]
    result = kubectl("apply", *args)
    assert result.returncode == 0, result.stderr
    assert "eventhubconsumer.eventhub-balancer.dev/orders created" in result.stdout
    assert "openapi" not in result.stderr


def test_apply_the_examples_then_get_wide_and_wait(
    local_kube: LocalKubeAPI, kubectl: Kubectl
) -> None:
    _apply_examples(kubectl)
    again = kubectl("apply", "-f", str(EXAMPLES / "20-eventhubconsumer.yaml"))
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout

    header = kubectl("-n", "shop", "get", "ehc", "-o", "wide").stdout.splitlines()[0].split()
    assert header == ["NAME", "PARTITIONS", "PODS", "FAILING", "BALANCED", "READY", "REASON", "AGE"]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            kubectl, "-n", "shop", "wait", "--for=condition=Ready", "ehc/orders", "--timeout=30s"
        )
        conditions = [_condition("Ready", "True"), _condition("Balanced", "False")]
        status = {
            "partitionCount": 32,
            "memberCount": 4,
            "failingCount": 0,
            "conditions": conditions,
        }
        local_kube.patch_object(
            EHC, "orders", {"status": status}, namespace="shop", subresource="status"
        )
        waited = waiting.result(timeout=60)
    assert waited.returncode == 0, waited.stderr
    assert "eventhubconsumer.eventhub-balancer.dev/orders condition met" in waited.stdout

    row = kubectl("-n", "shop", "get", "ehc", "orders", "-o", "wide").stdout.splitlines()[1]
    assert row.split()[:6] == ["orders", "32", "4", "0", "False", "True"]


def test_a_bad_resource_is_refused_with_its_fields_named(
    local_kube: LocalKubeAPI, kubectl: Kubectl
) -> None:
    _apply_examples(kubectl)
    result = kubectl("apply", "-f", "-", input=BAD_CR)
    assert result.returncode != 0
    assert 'The EventHubConsumer "bad" is invalid' in result.stderr
    assert "* spec.eventHub: Required value" in result.stderr
    assert "* spec.balancing.intervalSeconds: Invalid value: -5" in result.stderr
    assert '* spec.balancing.weighting: Unsupported value: "nonsense"' in result.stderr
    # The start position names the words it takes, not "one and only one schema (oneOf)".
    assert (
        '* spec.startPosition: Invalid value: "beginning": spec.startPosition in body should '
        "match '^(earliest|latest)$'" in result.stderr
    )
    assert "oneOf" not in result.stderr
    assert local_kube.get_object(EHC, "bad", namespace="shop") is None


def test_default_tables_of_pods_and_configmaps(local_kube: LocalKubeAPI, kubectl: Kubectl) -> None:
    local_kube.create_object(
        "v1/pods",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
        namespace="default",
    )
    local_kube.create_object(
        "v1/configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}}, namespace="default"
    )
    pods = kubectl("get", "pods").stdout.splitlines()
    assert pods[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[:4] == ["p", "0/1", "Pending", "0"]
    configmaps = kubectl("get", "configmaps").stdout.splitlines()
    assert configmaps[0].split() == ["NAME", "DATA", "AGE"]
    assert configmaps[1].split()[:2] == ["c", "1"]


POLICY = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: pod-own-configmap}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], resources: [configmaps], operations: [UPDATE]}
  matchConditions:
    - name: pod-identity
      expression: "'authentication.kubernetes.io/pod-name' in request.userInfo.extra"
  validations:
    - expression: >-
        object.metadata.labels == oldObject.metadata.labels
        && object.metadata.labels['pod'] ==
        request.userInfo.extra['authentication.kubernetes.io/pod-name'][0]
      messageExpression: "'only the ConfigMap labelled pod=' +
        request.userInfo.extra['authentication.kubernetes.io/pod-name'][0] + ' may change'"
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: pod-own-configmap}
spec: {policyName: pod-own-configmap, validationActions: [Deny]}
"""


def test_admission_policies_judge_a_pod_identity(
    local_kube: LocalKubeAPI, kubectl: Kubectl, tmp_path: Path
) -> None:
    assert kubectl("apply", "-f", "-", input=POLICY).returncode == 0
    for pod in ("orders-a", "orders-b"):
        local_kube.create_object(
            "v1/configmaps", {"metadata": {"name": pod, "labels": {"pod": pod}}}, namespace="shop"
        )
    identity = identities.PodIdentity(
        namespace="shop", service_account="orders", pod_name="orders-a", pod_uid="u-1"
    )
    as_pod = str(local_kube.write_kubeconfig(tmp_path / "pod-kubeconfig", identity=identity))

    own = kubectl("--kubeconfig", as_pod, "-n", "shop", "annotate", "cm", "orders-a", "ack=1")
    assert own.returncode == 0, own.stderr
    other = kubectl("--kubeconfig", as_pod, "-n", "shop", "annotate", "cm", "orders-b", "ack=1")
    assert other.returncode != 0
    assert (
        "configmaps \"orders-b\" is forbidden: ValidatingAdmissionPolicy 'pod-own-configmap' "
        "with binding 'pod-own-configmap' denied request: only the ConfigMap labelled "
        "pod=orders-a may change"
    ) in other.stderr
    relabel = kubectl("--kubeconfig", as_pod, "-n", "shop", "label", "cm", "orders-a", "x=y")
    assert relabel.returncode != 0
    assert "forbidden" in relabel.stderr
    # The administrator (the default kubeconfig) is not a pod: the policy does not apply.
    assert kubectl("-n", "shop", "annotate", "cm", "orders-b", "ack=1").returncode == 0


@pytest.mark.parametrize("path", ["/openapi/v2", "/openapi/v3", "/openapi/v3/api/v1"])
def test_openapi_documents_are_served(kubectl: Kubectl, path: str) -> None:
    result = kubectl("get", "--raw", path)
    assert result.returncode == 0, result.stderr


def test_explain_reads_the_crd_schema(kubectl: Kubectl) -> None:
    result = kubectl("explain", "ehc.spec.balancing.weighting")
    assert result.returncode == 0, result.stderr
    assert "count spreads the number of partitions" in result.stdout


def test_a_misspelt_field_is_refused_unless_validation_is_off(
    local_kube: LocalKubeAPI, kubectl: Kubectl
) -> None:
    example = (EXAMPLES / "20-eventhubconsumer.yaml").read_text()
    typo = example.replace("intervalSeconds: 5", "intervalSecond: 5")
    assert typo != example
    refused = kubectl("apply", "-f", "-", input=typo)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.balancing.intervalSecond"' in (
        refused.stderr
    )
    accepted = kubectl("apply", "--validate=false", "-f", "-", input=typo)
    assert accepted.returncode == 0, accepted.stderr
    stored = local_kube.get_object(EHC, "orders", namespace="shop") or {}
    assert stored["spec"]["balancing"]["intervalSeconds"] == 5  # pruned, then defaulted
