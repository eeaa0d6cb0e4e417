"""The examples fit together (consumer Deployment, its RBAC, the EventHubConsumer, Secrets, KEDA)
and every workload runs under the restricted Pod Security Standard."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer.contracts import labelselectors
from tests.support import loading

EXAMPLES = loading.file_documents(loading.MANIFESTS_DIR / "examples")

#: The azure-eventhub scaler's trigger metadata keys (KEDA 2.12+) and auth parameters.
KEDA_EVENTHUB_METADATA = frozenset(
    {
        "consumerGroup",
        "unprocessedEventThreshold",
        "activationUnprocessedEventThreshold",
        "blobContainer",
        "checkpointStrategy",
        "eventHubNamespace",
        "eventHubName",
        "storageAccountName",
        "connectionFromEnv",
        "storageConnectionFromEnv",
        "cloud",
        "endpointSuffix",
        "storageEndpointSuffix",
        "stalePartitionInfoThreshold",
    }
)
KEDA_EVENTHUB_AUTH_PARAMETERS = frozenset({"connection", "storageConnection"})


def find(kind: str, source: str = "") -> list[dict[str, Any]]:
    return [d.body for d in EXAMPLES if d.kind == kind and source in d.source]


def workloads() -> list[loading.Document]:
    docs = [*loading.file_documents(loading.MANIFESTS_DIR), *loading.rendered(None)]
    return [d for d in docs if d.kind == "Deployment"]


@pytest.mark.parametrize("doc", workloads(), ids=str)
def test_workloads_are_restricted(doc: loading.Document) -> None:
    pod = doc.body["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    tmp_volumes = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        assert "privileged" not in context
        assert container["resources"]["requests"]
        assert container["resources"]["limits"]["memory"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] in ("/healthz", "/readyz")
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/tmp"] in tmp_volumes


def test_consumer_deployment_has_what_the_runtime_reads() -> None:
    (deployment,) = find("Deployment", "examples/40-consumer-deployment")
    (consumer,) = find("EventHubConsumer", "examples/20-")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name, path in (
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),
    ):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == path
    assert env["EHB_CONSUMER"]["value"] == consumer["metadata"]["name"]
    assert container["args"][0] == "consume"
    assert any(a.startswith("--handler=") and ":" in a for a in container["args"])
    # The label an operator's --pod-selector is documented to select (docs/operator.md).
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    key, value = labelselectors.CONSUMER_POD_LABEL
    assert labels[key] == value
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Room for the final checkpoint on revocation and SIGTERM.
    assert pod["terminationGracePeriodSeconds"] >= 60
    # The EventHubConsumer selects these pods.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert consumer["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # Every Secret reference resolves to an example Secret and key.
    secrets = {s["metadata"]["name"]: s["stringData"] for s in find("Secret")}
    for entry in env.values():
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["key"] in secrets[ref["name"]]
    # The connection strings are files of Secret volumes, mounted whole (a subPath mount is
    # never updated, and a rotated key would not reach the running pod).
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for setting in ("EHB_EVENTHUB_CONNECTION_STRING", "EHB_BLOB_CONNECTION_STRING"):
        assert setting not in env
        path = env[f"{setting}_FILE"]["value"]
        (mount,) = [m for m in mounts.values() if path.startswith(m["mountPath"] + "/")]
        assert "subPath" not in mount
        secret = volumes[mount["name"]]["secret"]
        (item,) = [i for i in secret["items"] if path == f"{mount['mountPath']}/{i['path']}"]
        assert item["key"] in secrets[secret["secretName"]]
    for part in ("eventHub", "checkpointStore"):
        ref = consumer["spec"][part]["credentials"]["connectionStringSecretRef"]
        assert ref["key"] in secrets[ref["name"]]
    # It runs as the ServiceAccount the consumer Role is bound to.
    (binding,) = find("RoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    # Rollouts add a pod before removing one: ordered hand-offs, never a gap.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize("source", ["autoscaling/keda.yaml", "workload-identity/"])
def test_keda_scaledobject_reads_our_checkpoints(source: str) -> None:
    (scaled,) = find("ScaledObject", source)
    (auth,) = find("TriggerAuthentication", source)
    consumer = (find("EventHubConsumer", source) or find("EventHubConsumer", "examples/20-"))[0]
    (deployment,) = find("Deployment", "examples/40-consumer-deployment")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "azure-eventhub"
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    metadata = trigger["metadata"]
    assert set(metadata) <= KEDA_EVENTHUB_METADATA
    assert all(isinstance(v, str) for v in metadata.values()), "KEDA metadata values are strings"
    assert metadata["checkpointStrategy"] == "blobMetadata"
    assert metadata["blobContainer"] == consumer["spec"]["checkpointStore"]["containerName"]
    assert metadata["consumerGroup"] == consumer["spec"]["eventHub"]["consumerGroup"]
    assert int(metadata["unprocessedEventThreshold"]) > 0
    if "podIdentity" in auth["spec"]:
        assert auth["spec"]["podIdentity"]["provider"] == "azure-workload"
        fqdn = consumer["spec"]["eventHub"]["fullyQualifiedNamespace"]
        assert metadata["eventHubNamespace"] == fqdn.split(".")[0]
        assert metadata["eventHubName"] == consumer["spec"]["eventHub"]["name"]
        account_url = consumer["spec"]["checkpointStore"]["accountUrl"]
        assert account_url.startswith(f"https://{metadata['storageAccountName']}.blob.")
    else:
        secrets = {s["metadata"]["name"]: s["stringData"] for s in find("Secret")}
        refs = auth["spec"]["secretTargetRef"]
        assert {r["parameter"] for r in refs} == KEDA_EVENTHUB_AUTH_PARAMETERS
        for ref in refs:
            assert ref["key"] in secrets[ref["name"]]
        connection = secrets[next(r for r in refs if r["parameter"] == "connection")["name"]]
        # Without eventHubName KEDA needs the entity in the connection string.
        assert "EntityPath=" in connection["connectionString"] or "eventHubName" in metadata


def test_hpa_targets_the_consumer_and_scales_down_slowly() -> None:
    (hpa,) = find("HorizontalPodAutoscaler")
    (deployment,) = find("Deployment", "examples/40-consumer-deployment")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_workload_identity_serviceaccount_is_annotated() -> None:
    (account,) = find("ServiceAccount", "workload-identity/")
    assert "azure.workload.identity/client-id" in account["metadata"]["annotations"]
    (consumer,) = find("EventHubConsumer", "workload-identity/")
    assert "workloadIdentity" in consumer["spec"]["eventHub"]["credentials"]
    assert consumer["spec"]["checkpointStore"]["accountUrl"].startswith("https://")


def container_args() -> list[tuple[str, list[str]]]:
    docs = [*loading.file_documents(loading.MANIFESTS_DIR)]
    for values_file in [None, *loading.CI_VALUES]:
        docs.extend(loading.rendered(values_file))
    return [
        (str(d), c["args"])
        for d in docs
        if d.kind == "Deployment"
        for c in d.body["spec"]["template"]["spec"]["containers"]
    ]


@pytest.mark.parametrize(("where", "args"), container_args(), ids=[w for w, _ in container_args()])
def test_container_args_parse_with_the_ehb_cli(where: str, args: list[str]) -> None:
    from eventhub_balancer import cli

    parsed = cli.build_parser().parse_args(args)
    assert parsed.command in ("operator", "consume"), where


def test_the_consumer_pdb_selects_the_consumer_pods() -> None:
    (budget,) = find("PodDisruptionBudget")
    (deployment,) = find("Deployment", "examples/40-consumer-deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert budget["spec"]["maxUnavailable"] == 1


def test_the_examples_header_names_the_kind_of_handler_the_deployment_runs() -> None:
    """`00-namespace.yaml` opens the examples (``kubectl apply -f manifests/examples/``) and
    said the hub was "consumed by a PySpark pipeline", while the Deployment runs the
    plain-Python handler of examples/orders without --spark: a reader went looking for Java
    and a Spark session that the pods never start."""
    (deployment,) = find("Deployment", "examples/40-consumer-deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    spark = "--spark" in container["args"]
    header = (loading.MANIFESTS_DIR / "examples" / "00-namespace.yaml").read_text()
    first = header.splitlines()[0]
    assert ("PySpark" in first) == spark, first
    assert "orders.pipeline:process" in " ".join(container["args"])
    assert spark or "plain Python" in first, first
