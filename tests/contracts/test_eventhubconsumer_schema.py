"""The CRD's openAPIV3Schema accepts what docs/operator.md shows and rejects a user's mistakes."""

import copy
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import yaml

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from tests.support import paths

CRD_PATH = paths.CRDS / "eventhubconsumers.yaml"

VALID: dict[str, Any] = {
    "apiVersion": "eventhub-balancer.dev/v1alpha1",
    "kind": "EventHubConsumer",
    "metadata": {"name": "orders", "namespace": "shop"},
    "spec": {
        "eventHub": {
            "fullyQualifiedNamespace": "shop.servicebus.windows.net",
            "name": "orders",
            "consumerGroup": "$Default",
            "credentials": {"connectionStringSecretRef": {"name": "orders-eh", "key": "cs"}},
        },
        "checkpointStore": {
            "containerName": "checkpoints",
            "credentials": {"connectionStringSecretRef": {"name": "orders-blob", "key": "cs"}},
        },
        "selector": {"matchLabels": {"app": "orders-consumer"}},
        "startPosition": "earliest",
        "balancing": {
            "intervalSeconds": 5,
            "podGraceSeconds": 20,
            "handoffTimeoutSeconds": 30,
            "maxMovesPerCycle": 0,
            "weighting": "count",
        },
    },
}


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    with CRD_PATH.open() as f:
        loaded: dict[str, Any] = yaml.safe_load(f)
    return loaded


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    result: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return result


def errors_of(schema: dict[str, Any], body: dict[str, Any]) -> list[str]:
    """The schema's errors and the CRD's CEL rules' messages, as the API server reports both."""
    from tests.install import test_crd_rules

    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)
    ] + [f.removeprefix(".") for f in test_crd_rules.failures(body, schema)]


def with_(path: str, value: Any) -> dict[str, Any]:
    """A copy of VALID with one field set (value ...: deleted)."""
    body = copy.deepcopy(VALID)
    *parents, leaf = path.split(".")
    node = body
    for key in parents:
        node = node[key]
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return body


def test_names_and_shape(crd: dict[str, Any]) -> None:
    assert crd["metadata"]["name"] == "eventhubconsumers.eventhub-balancer.dev"
    assert crd["spec"]["group"] == "eventhub-balancer.dev"
    assert crd["spec"]["names"]["kind"] == "EventHubConsumer"
    assert crd["spec"]["names"]["shortNames"] == ["ehc"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Partitions", "Pods", "Failing", "Balanced", "Ready", "Reason", "Age"]


def _fields(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from _fields(child, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict):
        yield from _fields(items, f"{path}[]")


#: What a real kube-apiserver lets a CRD say of ``metadata``: its type and nothing else
#: ("must not specify anything other than name and generateName"), so no description.
SERVER_OWNED = {".metadata"}


def test_every_field_has_a_description(schema: dict[str, Any]) -> None:
    missing = [
        path
        for path, node in _fields(schema, "")
        if not node.get("description") and path not in SERVER_OWNED
    ]
    assert missing == []


def test_metadata_is_only_typed_as_a_real_api_server_demands(schema: dict[str, Any]) -> None:
    assert schema["properties"]["metadata"] == {"type": "object"}


def test_every_field_has_a_type_unless_it_preserves_unknown_fields(
    schema: dict[str, Any],
) -> None:
    untyped = [
        path
        for path, node in _fields(schema, "")
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert untyped == []


#: The status's one collection kept per entry: the conditions, a handful that other tools
#: (kstatus, Flux) read by type, as the Kubernetes API conventions have them.
PER_ENTRY_STATUS = {"conditions"}


def test_the_status_collections_the_operator_rewrites_whole_are_atomic(
    schema: dict[str, Any],
) -> None:
    # Kept per entry, they made managedFields as large as the status, and every status patch
    # on a real API server paid for it (tests/realkube/wire/test_status_record.py).
    status = schema["properties"]["status"]["properties"]
    collections = {n for n, node in status.items() if node["type"] in ("array", "object")}
    whole = collections - PER_ENTRY_STATUS
    assert whole == {"epochs", "assignment", "consumers", "handoffs", "failing", "deadLettered"}
    kinds = {
        name: status[name].get(
            "x-kubernetes-list-type" if status[name]["type"] == "array" else "x-kubernetes-map-type"
        )
        for name in whole
    }
    assert kinds == dict.fromkeys(whole, "atomic")
    assert status["conditions"]["x-kubernetes-list-type"] == "map"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.startPosition", "latest"),
        ("spec.startPosition", {"sequenceNumber": 42}),
        ("spec.startPosition", {"enqueuedTime": "2026-11-21T10:00:00Z"}),
        ("spec.startPosition", ...),
        ("spec.balancing", ...),
        ("spec.balancing", {"weighting": "lag"}),
        ("spec.eventHub.consumerGroup", ...),
        ("spec.eventHub.credentials", {"workloadIdentity": {}}),
        ("spec.eventHub.fullyQualifiedNamespace", "127.0.0.1:5672"),
        ("spec.selector", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
    ],
)
def test_valid_resources_pass(schema: dict[str, Any], path: str, value: Any) -> None:
    assert errors_of(schema, with_(path, value)) == []


def test_the_design_example_passes(schema: dict[str, Any]) -> None:
    assert errors_of(schema, VALID) == []


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("spec.eventHub.name", ..., "spec.eventHub"),
        ("spec.eventHub.name", "", "spec.eventHub.name"),
        ("spec.balancing.intervalSeconds", -5, "spec.balancing.intervalSeconds"),
        ("spec.balancing.intervalSeconds", 0, "spec.balancing.intervalSeconds"),
        ("spec.balancing.podGraceSeconds", -1, "spec.balancing.podGraceSeconds"),
        ("spec.balancing.handoffTimeoutSeconds", -1, "spec.balancing.handoffTimeoutSeconds"),
        ("spec.balancing.maxMovesPerCycle", -1, "spec.balancing.maxMovesPerCycle"),
        ("spec.balancing.weighting", "random", "spec.balancing.weighting"),
        ("spec.balancing.lagTolerance", -0.1, "spec.balancing.lagTolerance"),
        (
            "spec.eventHub.credentials",
            {
                "connectionStringSecretRef": {"name": "a", "key": "b"},
                "workloadIdentity": {},
            },
            "spec.eventHub.credentials",
        ),
        ("spec.eventHub.credentials", {}, "spec.eventHub.credentials"),
        (
            "spec.checkpointStore.credentials",
            {"connectionStringSecretRef": {"name": "a", "key": "b"}, "workloadIdentity": {}},
            "spec.checkpointStore.credentials",
        ),
        ("spec.checkpointStore.containerName", "Bad_Name", "spec.checkpointStore.containerName"),
        ("spec.selector", ..., "spec"),
        ("spec.selector", {}, "spec.selector"),
        ("spec.startPosition", "beginning", "spec.startPosition"),
        ("spec.startPosition", "", "spec.startPosition"),
        ("spec.startPosition", {}, "spec.startPosition"),
        ("spec.startPosition", {"sequenceNumber": -1}, "spec.startPosition.sequenceNumber"),
        (
            "spec.startPosition",
            {"sequenceNumber": 1, "enqueuedTime": "2026-11-21T10:00:00Z"},
            "spec.startPosition",
        ),
    ],
)
def test_invalid_resources_fail_naming_the_field(
    schema: dict[str, Any], path: str, value: Any, field: str
) -> None:
    found = errors_of(schema, with_(path, value))
    assert found, f"{path}={value!r} should be rejected"
    assert any(e.startswith(f"{field}:") for e in found), found


#: Values no client can ever use, which the API server used to admit and the operator to take:
#: a port beyond 65535 (the resolver wraps it round, so the pods dial another port) or 0, and
#: a Secret name or key that no Secret can have. Both the CRD and `specs.parse_spec` refuse
#: each, naming the same field.
UNUSABLE = [
    ("spec.eventHub.fullyQualifiedNamespace", "shop.servicebus.windows.net:99999"),
    ("spec.eventHub.fullyQualifiedNamespace", "127.0.0.1:65536"),
    ("spec.eventHub.fullyQualifiedNamespace", "127.0.0.1:0"),
    ("spec.eventHub.fullyQualifiedNamespace", "127.0.0.1:00000"),
    ("spec.checkpointStore.accountUrl", "https://shop.blob.core.windows.net:99999"),
    ("spec.checkpointStore.accountUrl", "https://127.0.0.1:0/"),
    # A host with an empty label, or a label that starts or ends with a dash: the endpoint
    # check refuses it before any client is built, saying its suffix is not allowed.
    ("spec.eventHub.fullyQualifiedNamespace", "shop..servicebus.windows.net"),
    ("spec.eventHub.fullyQualifiedNamespace", "shop-.servicebus.windows.net"),
    ("spec.eventHub.fullyQualifiedNamespace", "shop.-x.servicebus.windows.net:5671"),
    ("spec.checkpointStore.accountUrl", "https://shop..blob.core.windows.net"),
    ("spec.checkpointStore.accountUrl", "https://-shop.blob.core.windows.net/"),
    ("spec.checkpointStore.accountUrl", "https://shop.blob.core.windows.net.:443"),
    ("spec.eventHub.credentials.connectionStringSecretRef.name", "Bad_Name"),
    ("spec.eventHub.credentials.connectionStringSecretRef.name", "orders-eh."),
    ("spec.checkpointStore.credentials.connectionStringSecretRef.name", "orders blob"),
    ("spec.checkpointStore.credentials.connectionStringSecretRef.name", "a" * 254),
    ("spec.eventHub.credentials.connectionStringSecretRef.key", "connection string"),
    ("spec.checkpointStore.credentials.connectionStringSecretRef.key", "a/b"),
    # An Event Hub or consumer group Azure cannot have: the hub answered "not found" only once
    # the pods dialled it, and a '/' blurred the checkpoint blobs' prefix with another hub's.
    ("spec.eventHub.name", "orders/eu"),
    ("spec.eventHub.name", "-orders"),
    ("spec.eventHub.name", "orders."),
    ("spec.eventHub.name", "orders eu"),
    ("spec.eventHub.name", "a" * 257),
    ("spec.eventHub.consumerGroup", "analytics/"),
    ("spec.eventHub.consumerGroup", "_analytics"),
    ("spec.eventHub.consumerGroup", "$Default2"),
    ("spec.eventHub.consumerGroup", "$analytics"),
    ("spec.eventHub.consumerGroup", ""),
    ("spec.eventHub.consumerGroup", "a" * 51),
]

#: Their usable neighbours: both take each.
USABLE = [
    ("spec.eventHub.fullyQualifiedNamespace", "127.0.0.1:65535"),
    ("spec.eventHub.fullyQualifiedNamespace", "127.0.0.1:1"),
    ("spec.eventHub.fullyQualifiedNamespace", "localhost:05672"),
    ("spec.checkpointStore.accountUrl", "https://shop.blob.core.windows.net:443/"),
    ("spec.checkpointStore.accountUrl", "https://shop.blob.core.windows.net"),
    ("spec.checkpointStore.accountUrl", "https://127.0.0.1:10000"),
    ("spec.eventHub.fullyQualifiedNamespace", "Shop-1.ServiceBus.windows.net"),
    ("spec.eventHub.credentials.connectionStringSecretRef.name", "orders-eh.v2"),
    ("spec.checkpointStore.credentials.connectionStringSecretRef.name", "a" * 253),
    ("spec.eventHub.credentials.connectionStringSecretRef.key", "Connection_String.v-1"),
    ("spec.eventHub.name", "Orders.v2_eu-1"),
    ("spec.eventHub.name", "a" * 256),
    ("spec.eventHub.name", "7"),
    ("spec.eventHub.consumerGroup", "$default"),
    ("spec.eventHub.consumerGroup", "$DEFAULT"),
    ("spec.eventHub.consumerGroup", "Analytics.v2_eu-1"),
    ("spec.eventHub.consumerGroup", "a" * 50),
]


@pytest.mark.parametrize(("path", "value"), UNUSABLE, ids=repr)
def test_a_value_no_client_can_use_is_refused_by_the_crd_and_the_operator(
    schema: dict[str, Any], path: str, value: str
) -> None:
    body = with_(path, value)
    found = errors_of(schema, body)
    assert any(e.startswith(f"{path}:") for e in found), found
    with pytest.raises(errors.InvalidInput) as refused:
        specs.parse_spec(body["spec"])
    assert refused.value.field == path
    # The operator's message says what to use, as the CRD's does.
    assert "use" in str(refused.value), str(refused.value)


@pytest.mark.parametrize(("path", "value"), USABLE, ids=repr)
def test_a_usable_neighbour_is_taken_by_the_crd_and_the_operator(
    schema: dict[str, Any], path: str, value: str
) -> None:
    body = with_(path, value)
    assert errors_of(schema, body) == []
    specs.parse_spec(body["spec"])
