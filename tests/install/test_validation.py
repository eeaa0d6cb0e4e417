"""Every YAML document of the install validates: built-in kinds against Kubernetes' OpenAPI
schemas (kubernetes-validate, strict: unknown fields fail), our and kopf's resources against
their CRDs' openAPIV3Schema. Third-party kinds without an offline schema (KEDA, the Prometheus
Operator) are checked for consistency in test_examples.py and test_chart.py."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.support import kubeschemas, loading

#: The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the newest schema here.
KUBERNETES_VERSIONS = ("1.27", kubernetes_validate.utils.latest_version())

#: Kinds whose CRDs are not ours to ship; they are checked field by field elsewhere.
THIRD_PARTY_GROUPS = frozenset({"keda.sh", "monitoring.coreos.com"})

DOCUMENTS = list(loading.all_documents())


def group_of(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


VALIDATED = [
    d for d in DOCUMENTS if group_of(d.body.get("apiVersion", "")) not in THIRD_PARTY_GROUPS
]


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, from every CRD in the install."""
    schemas = {}
    for doc in DOCUMENTS:
        if doc.kind != "CustomResourceDefinition":
            continue
        spec = doc.body["spec"]
        for version in spec["versions"]:
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


SCHEMAS = crd_schemas()


def test_the_install_has_documents_of_every_origin() -> None:
    sources = {d.source.split("/")[0] for d in DOCUMENTS}
    assert {"crds", "manifests"} <= sources
    assert {f"chart[{v.name}]" for v in loading.CI_VALUES} <= sources
    assert "chart[defaults]" in sources
    assert len(loading.CI_VALUES) >= 4


def test_only_the_expected_third_party_kinds_go_without_a_schema() -> None:
    unvalidated = {d.kind for d in DOCUMENTS if d not in VALIDATED}
    assert unvalidated == {"ScaledObject", "TriggerAuthentication", "ServiceMonitor"}


def test_our_crds_are_known() -> None:
    assert ("eventhub-balancer.dev/v1alpha1", "EventHubConsumer") in SCHEMAS
    assert ("kopf.dev/v1", "KopfPeering") in SCHEMAS
    assert ("kopf.dev/v1", "ClusterKopfPeering") in SCHEMAS


#: The consumers' admission policy needs Kubernetes 1.30+ (the chart and install say so).
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
POLICY_MINOR = 30


def _minor(version: str) -> int:
    return int(version.split(".")[1])


#: An HPA's ``behavior.scaleUp/scaleDown.tolerance`` is Kubernetes 1.33+: the HPA example sets
#: it and says to delete it before 1.33, so older versions validate it without.
TOLERANCE_MINOR = 33


def _as_for(body: dict[str, Any], version: str) -> dict[str, Any]:
    """``body`` as a user of Kubernetes ``version`` applies it, following its comments."""
    if body["kind"] != "HorizontalPodAutoscaler" or _minor(version) >= TOLERANCE_MINOR:
        return body
    behavior = body["spec"].get("behavior") or {}
    older = {
        k: {f: v for f, v in rules.items() if f != "tolerance"} for k, rules in behavior.items()
    }
    return {**body, "spec": {**body["spec"], "behavior": older}} if behavior else body


@pytest.mark.parametrize("doc", VALIDATED, ids=str)
def test_document_validates(doc: loading.Document) -> None:
    body = doc.body
    assert {"apiVersion", "kind", "metadata"} <= body.keys(), f"{doc}: not a Kubernetes object"
    assert doc.name, f"{doc}: no metadata.name"
    key = (body["apiVersion"], body["kind"])
    if key in SCHEMAS:
        validator = jsonschema.Draft7Validator(SCHEMAS[key])
        problems = [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(body)
        ]
        assert not problems, f"{doc}: {problems}"
        return
    for version in KUBERNETES_VERSIONS:
        if body["kind"] in POLICY_KINDS and _minor(version) < POLICY_MINOR:
            continue  # ValidatingAdmissionPolicy is GA (admissionregistration/v1) from 1.30
        try:
            kubeschemas.validate(_as_for(body, version), version)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(map(str, e.path))
            pytest.fail(f"{doc} against Kubernetes {version}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            pytest.fail(f"{doc}: {e.message}")


def test_the_hpa_examples_tolerance_is_refused_before_1_33_and_taken_after() -> None:
    """Validating the HPA example without its tolerance on 1.27 is what its header tells a
    user of that version to do, not a way around a field the version refuses."""
    (hpa,) = [
        d.body for d in DOCUMENTS if d.source.startswith("manifests/examples/autoscaling/hpa")
    ]
    assert hpa["spec"]["behavior"]["scaleUp"]["tolerance"] == "0"
    with pytest.raises(kubernetes_validate.ValidationError, match="tolerance"):
        kubeschemas.validate(hpa, KUBERNETES_VERSIONS[0])
    kubeschemas.validate(hpa, KUBERNETES_VERSIONS[-1])


def test_a_typo_in_a_built_in_kind_fails_validation() -> None:
    """The strict schemas reject unknown fields: the validation above can fail."""
    (deployment,) = [
        d.body for d in DOCUMENTS if d.source.startswith("manifests/install/30-deployment")
    ]
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubeschemas.validate(broken, KUBERNETES_VERSIONS[0])


def test_a_wrong_eventhubconsumer_fails_its_crd_schema() -> None:
    (consumer,) = [
        d.body for d in DOCUMENTS if d.source.startswith("manifests/examples/20-eventhubconsumer")
    ]
    broken = {**consumer, "spec": {**consumer["spec"], "startPosition": "yesterday"}}
    schema = SCHEMAS[("eventhub-balancer.dev/v1alpha1", "EventHubConsumer")]
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))
