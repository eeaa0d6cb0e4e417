"""The install's admission policies, enforced by the local API server against pod tokens.

The policies of manifests/install/50-admission-policy.yaml are created in the local API
server, which evaluates ValidatingAdmissionPolicies for requests made with a pod's bound
service-account identity (devstack ``kube.identities``). The operator's writes are played by
the local administrator (not a service account, so not matched). Then a consumer pod tries
issue 25's attacks through the real kubernetes client: labelling an unmanaged ConfigMap for
another pod, creating one, writing assignment data, and acknowledging as a pod of the same
name in another namespace or with another uid. Each is refused; its own acknowledgement is
not.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI, identities
from tests.support import loading

kubernetes = pytest.importorskip("kubernetes")

NAMESPACE = "shop"
ATTACKER = identities.PodIdentity(
    namespace=NAMESPACE, service_account="orders-consumer", pod_name="orders-0", pod_uid="uid-0"
)
VICTIM = "orders-1"


def assignment(pod: str, uid: str) -> dict[str, Any]:
    """A ConfigMap as the operator writes it for ``pod``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmaps.configmap_name(consumer="orders", pod=pod),
            "labels": configmaps.labels(consumer="orders", pod=pod),
            "annotations": {configmaps.ANNOTATION_POD_UID: uid},
        },
        "data": {"consumer": "orders", "pod": pod, "generation": "1", "partitions": "{}"},
    }


@pytest.fixture
def installed(local_kube: LocalKubeAPI, kube_client: Any) -> LocalKubeAPI:
    """The install's policies and bindings, and the ConfigMaps the operator and a user wrote."""
    api = kubernetes.client.AdmissionregistrationV1Api(kube_client)
    documents = loading.file_documents(loading.MANIFESTS_DIR / "install")
    kinds = {
        "ValidatingAdmissionPolicy": api.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": api.create_validating_admission_policy_binding,
    }
    created = [kinds[d.body["kind"]](d.body) for d in documents if d.body.get("kind") in kinds]
    # The consumers' two policies and the operator's tokens' two, each with its binding.
    assert len(created) == 8
    for pod, uid in ((ATTACKER.pod_name, ATTACKER.pod_uid), (VICTIM, "uid-1")):
        local_kube.create_object("v1/configmaps", assignment(pod, uid), namespace=NAMESPACE)
    local_kube.create_object(
        "v1/configmaps",
        {"metadata": {"name": "innocent-config", "labels": {"app": "orders"}}, "data": {"a": "1"}},
        namespace=NAMESPACE,
    )
    return local_kube


@pytest.fixture
def as_pod(
    installed: LocalKubeAPI, tmp_path: Path
) -> Iterator[Callable[[identities.PodIdentity], Any]]:
    """``as_pod(identity)``: a CoreV1Api that presents that pod's bound token."""
    clients: list[Any] = []

    def make(identity: identities.PodIdentity) -> Any:
        path = installed.write_kubeconfig(
            tmp_path / f"{identity.namespace}-{identity.pod_name}-{identity.pod_uid}",
            identity=identity,
        )
        client = kubernetes.config.new_client_from_config(config_file=str(path))
        clients.append(client)
        return kubernetes.client.CoreV1Api(client)

    yield make
    for client in clients:
        client.close()


def refused(call: Callable[[], Any]) -> str:
    with pytest.raises(kubernetes.client.ApiException) as raised:
        call()
    assert raised.value.status in (403, 422), raised.value.body  # reason Forbidden: 403
    message: str = json.loads(raised.value.body)["message"]
    assert "denied request" in message
    return message


def victim_labels() -> dict[str, str]:
    wanted = configmaps.labels(consumer="orders", pod=VICTIM)
    return {k: wanted[k] for k in (configmaps.LABEL_CONSUMER, configmaps.LABEL_POD)}


def acknowledgement() -> dict[str, Any]:
    return {"metadata": {"annotations": {configmaps.ANNOTATION_RELEASED: '{"0":1}'}}}


def test_a_pod_cannot_label_an_unmanaged_configmap_for_another_pod(
    as_pod: Callable[[identities.PodIdentity], Any],
) -> None:
    core = as_pod(ATTACKER)
    message = refused(
        lambda: core.patch_namespaced_config_map(
            "innocent-config", NAMESPACE, {"metadata": {"labels": victim_labels()}}
        )
    )
    assert "only the eventhub-balancer operator sets the labels" in message
    forged = {
        "metadata": {"name": "forged", "labels": victim_labels()},
        "data": {"consumer": "orders", "pod": VICTIM, "partitions": '{"0":{"epoch":9}}'},
    }
    refused(lambda: core.create_namespaced_config_map(NAMESPACE, forged))
    managed = {configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY}
    refused(
        lambda: core.patch_namespaced_config_map(
            "innocent-config", NAMESPACE, {"metadata": {"labels": managed}}
        )
    )
    # Its own application's ConfigMaps stay its own.
    core.patch_namespaced_config_map("innocent-config", NAMESPACE, {"data": {"a": "2"}})


def test_a_pod_cannot_write_assignment_data_even_its_own(
    as_pod: Callable[[identities.PodIdentity], Any],
) -> None:
    core = as_pod(ATTACKER)
    steal = {"data": {"partitions": '{"0":{"epoch":9223372036854775807,"state":"owned"}}'}}
    for pod in (ATTACKER.pod_name, VICTIM):
        name = configmaps.configmap_name(consumer="orders", pod=pod)
        refused(lambda name=name: core.patch_namespaced_config_map(name, NAMESPACE, steal))


def test_a_pod_acknowledges_only_as_itself(
    as_pod: Callable[[identities.PodIdentity], Any],
) -> None:
    own = configmaps.configmap_name(consumer="orders", pod=ATTACKER.pod_name)
    as_pod(ATTACKER).patch_namespaced_config_map(own, NAMESPACE, acknowledgement())
    victims = configmaps.configmap_name(consumer="orders", pod=VICTIM)
    refused(
        lambda: as_pod(ATTACKER).patch_namespaced_config_map(victims, NAMESPACE, acknowledgement())
    )
    # The same pod name, but a pod of another namespace let in by a RoleBinding.
    elsewhere = identities.PodIdentity(
        namespace="evil", service_account="x", pod_name=ATTACKER.pod_name, pod_uid=ATTACKER.pod_uid
    )
    message = refused(
        lambda: as_pod(elsewhere).patch_namespaced_config_map(own, NAMESPACE, acknowledgement())
    )
    assert "its own namespace" in message
    # The same name in the same namespace, but another incarnation (another uid).
    successor = identities.PodIdentity(
        namespace=NAMESPACE,
        service_account=ATTACKER.service_account,
        pod_name=ATTACKER.pod_name,
        pod_uid="uid-successor",
    )
    message = refused(
        lambda: as_pod(successor).patch_namespaced_config_map(own, NAMESPACE, acknowledgement())
    )
    assert "its own pod uid" in message
