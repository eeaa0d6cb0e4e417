"""Schema validation and admission policies over the wire, through the kubernetes client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI, identities

kubernetes = pytest.importorskip("kubernetes")

ARGS = ("eventhub-balancer.dev", "v1alpha1", "default", "eventhubconsumers")


def _body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "eventhub-balancer.dev/v1alpha1",
        "kind": "EventHubConsumer",
        "metadata": {"name": name},
        "spec": spec,
    }


def _refusal(call: Any) -> dict[str, Any]:
    with pytest.raises(kubernetes.client.ApiException) as raised:
        call()
    status: dict[str, Any] = json.loads(raised.value.body)
    assert raised.value.status == status["code"]
    return status


def test_a_bad_custom_resource_gets_a_422_naming_its_fields(
    kube_client: Any, ehc_spec: dict[str, Any]
) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    spec = {**ehc_spec, "balancing": {"intervalSeconds": -5, "weighting": "nonsense"}}
    del spec["eventHub"]
    status = _refusal(lambda: api.create_namespaced_custom_object(*ARGS, _body("bad", spec)))
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["kind"] == "EventHubConsumer"
    assert status["details"]["group"] == "eventhub-balancer.dev"
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.eventHub",
        "spec.balancing.intervalSeconds",
        "spec.balancing.weighting",
        "<nil>",  # the CRD's CEL rules were not run, as a real server says
    ]
    assert status["message"].startswith('EventHubConsumer.eventhub-balancer.dev "bad" is invalid')


def test_patches_and_status_writes_are_validated(
    kube_client: Any, ehc_spec: dict[str, Any]
) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    api.create_namespaced_custom_object(*ARGS, _body("orders", ehc_spec))
    bad_patch = {"spec": {"balancing": {"lagTolerance": 11}}}
    status = _refusal(lambda: api.patch_namespaced_custom_object(*ARGS, "orders", bad_patch))
    assert status["details"]["causes"][0]["field"] == "spec.balancing.lagTolerance"

    condition = {"type": "Ready", "status": "True", "reason": "AllOwned", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    api.patch_namespaced_custom_object_status(
        *ARGS, "orders", {"status": {"conditions": [condition], "unknownField": 1}}
    )
    stored = api.get_namespaced_custom_object(*ARGS, "orders")["status"]
    assert stored == {"conditions": [condition]}  # the unknown field is pruned, as in a cluster
    maybe = {"status": {"conditions": [{**condition, "status": "Maybe"}]}}
    status = _refusal(lambda: api.patch_namespaced_custom_object_status(*ARGS, "orders", maybe))
    assert status["details"]["causes"][0]["field"] == "status.conditions[0].status"


POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "pods-read-only-spec"},
    "spec": {
        "matchConstraints": {"resourceRules": [{
            "apiGroups": ["eventhub-balancer.dev"], "apiVersions": ["*"],
            "resources": ["eventhubconsumers", "eventhubconsumers/status"],
            "operations": ["UPDATE"]}]},
        "matchConditions": [{"name": "pod", "expression":
            "request.userInfo.username.startsWith('system:serviceaccount:')"}],
        "validations": [{"expression": "request.subResource == 'status'",
                         "message": "pods may write status only"}],
    },
}  # fmt: skip

BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "pods-read-only-spec"},
    "spec": {"policyName": "pods-read-only-spec", "validationActions": ["Deny"]},
}


def test_a_pod_token_is_judged_by_admission_policies(
    local_kube: LocalKubeAPI, kube_client: Any, ehc_spec: dict[str, Any], tmp_path: Path
) -> None:
    admission = kubernetes.client.AdmissionregistrationV1Api(kube_client)
    admission.create_validating_admission_policy(POLICY)
    admission.create_validating_admission_policy_binding(BINDING)
    admin = kubernetes.client.CustomObjectsApi(kube_client)
    admin.create_namespaced_custom_object(*ARGS, _body("orders", ehc_spec))

    identity = identities.PodIdentity(
        namespace="default", service_account="sa", pod_name="p-1", pod_uid="uid-1"
    )
    path = local_kube.write_kubeconfig(tmp_path / "pod", identity=identity)
    pod_client = kubernetes.config.new_client_from_config(config_file=str(path))
    try:
        as_pod = kubernetes.client.CustomObjectsApi(pod_client)
        patch = {"spec": {"balancing": {"intervalSeconds": 7}}}
        status = _refusal(lambda: as_pod.patch_namespaced_custom_object(*ARGS, "orders", patch))
        assert (status["code"], status["reason"]) == (422, "Invalid")
        assert status["message"] == (
            'eventhubconsumers.eventhub-balancer.dev "orders" is forbidden: '
            "ValidatingAdmissionPolicy 'pods-read-only-spec' with binding "
            "'pods-read-only-spec' denied request: pods may write status only"
        )
        as_pod.patch_namespaced_custom_object_status(
            *ARGS, "orders", {"status": {"partitionCount": 4}}
        )
    finally:
        pod_client.close()
    admin.patch_namespaced_custom_object(*ARGS, "orders", patch)  # not a pod: not matched
