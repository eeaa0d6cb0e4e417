"""`kubectl apply` of an EventHubConsumer on a real kube-apiserver agrees with the operator.

A spec the API server admits but the operator refuses is the worst kind of mistake to make:
`kubectl apply` (or a GitOps sync) succeeds, and the consumer only turns Stalled
(`InvalidSpec`) later, in a status nobody was looking at. So the CRD (crds/: its OpenAPI
schema and CEL rules) must refuse at admission whatever `contracts.specs.parse_spec` refuses,
with a message that names the field. The reverse is allowed: the API server may be the
stricter one (a time with a space), as it is the first to see a spec.

Each case is applied with `kubectl apply --dry-run=server`: the server validates it in full
(schema, CEL, strict field decoding) and stores nothing.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from tests.support import loading
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = "shop"
#: A key of the longest prefix a label key may have: 253 characters, a DNS subdomain.
LONGEST_PREFIX = ".".join(["a" * 63] * 3 + ["a" * 61])


def example() -> dict[str, Any]:
    (consumer,) = [
        d.body
        for d in loading.file_documents(loading.MANIFESTS_DIR / "examples")
        if d.kind == "EventHubConsumer" and d.source.startswith("manifests/examples/20-")
    ]
    return copy.deepcopy(consumer)


def with_spec(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = example()
    node = body["spec"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return body


EH_SECRET = ("eventHub", "credentials", "connectionStringSecretRef")
BLOB_SECRET = ("checkpointStore", "credentials", "connectionStringSecretRef")

#: (what, spec path, value): a mistake the operator refuses, or a borderline value it takes.
CASES: list[tuple[str, tuple[str, ...], Any]] = [
    ("container-double-dash", ("checkpointStore", "containerName"), "order--checkpoints"),
    ("container-single-dashes", ("checkpointStore", "containerName"), "order-check-points"),
    ("selector-empty-labels", ("selector",), {"matchLabels": {}}),
    ("selector-empty-both", ("selector",), {"matchLabels": {}, "matchExpressions": []}),
    ("label-value-space", ("selector",), {"matchLabels": {"app": "orders consumer"}}),
    ("label-value-64", ("selector",), {"matchLabels": {"app": "a" * 64}}),
    ("label-value-empty", ("selector",), {"matchLabels": {"app": "orders", "tier": ""}}),
    ("label-key-space", ("selector",), {"matchLabels": {"my app": "orders"}}),
    ("label-key-name-64", ("selector",), {"matchLabels": {"a" * 64: "orders"}}),
    ("label-key-name-63", ("selector",), {"matchLabels": {"a" * 63: "orders"}}),
    ("label-key-upper-prefix", ("selector",), {"matchLabels": {"Example.com/app": "orders"}}),
    ("label-key-two-slashes", ("selector",), {"matchLabels": {"a/b/app": "orders"}}),
    ("label-key-prefix-254", ("selector",), {"matchLabels": {"a" * 254 + "/app": "orders"}}),
    ("label-key-prefix-253", ("selector",), {"matchLabels": {LONGEST_PREFIX + "/app": "o"}}),
    (
        "in-without-values",
        ("selector",),
        {"matchExpressions": [{"key": "app", "operator": "In"}]},
    ),
    (
        "notin-empty-values",
        ("selector",),
        {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": []}]},
    ),
    (
        "exists-with-values",
        ("selector",),
        {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["orders"]}]},
    ),
    (
        "expression-key-space",
        ("selector",),
        {"matchExpressions": [{"key": "my app", "operator": "Exists"}]},
    ),
    (
        "expression-value-space",
        ("selector",),
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a b"]}]},
    ),
    (
        "expressions-of-every-operator",
        ("selector",),
        {
            "matchExpressions": [
                {"key": "example.com/app", "operator": "In", "values": ["orders", ""]},
                {"key": "tier", "operator": "NotIn", "values": ["canary"]},
                {"key": "ready", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ]
        },
    ),
    ("enqueued-lower-case", ("startPosition",), {"enqueuedTime": "2026-01-01t00:00:00z"}),
    ("enqueued-no-zone", ("startPosition",), {"enqueuedTime": "2026-01-01T00:00:00"}),
    ("enqueued-nanoseconds", ("startPosition",), {"enqueuedTime": "2026-01-01T00:00:00.1234Z"}),
    ("sequence-beyond-int64", ("startPosition",), {"sequenceNumber": 2**63}),
    ("processing-typo", ("processing",), {"maxAttempt": 3}),
    ("identity-with-client-id", ("eventHub", "credentials"), {"workloadIdentity": {"id": "x"}}),
    ("paused-as-text", ("paused",), "true"),
    # A port beyond 65535 (the resolver wraps it round: 99999 dials 34463) or 0.
    ("namespace-port-99999", ("eventHub", "fullyQualifiedNamespace"), "shop.example:99999"),
    ("namespace-port-0", ("eventHub", "fullyQualifiedNamespace"), "127.0.0.1:0"),
    ("namespace-port-65535", ("eventHub", "fullyQualifiedNamespace"), "127.0.0.1:65535"),
    ("namespace-port-05672", ("eventHub", "fullyQualifiedNamespace"), "localhost:05672"),
    ("account-port-65536", ("checkpointStore", "accountUrl"), "https://a.example:65536/"),
    ("account-port-443", ("checkpointStore", "accountUrl"), "https://a.example:443/"),
    # A host with an empty label or a label that starts or ends with a dash.
    ("namespace-empty-label", ("eventHub", "fullyQualifiedNamespace"), "shop..example"),
    ("namespace-dash-label", ("eventHub", "fullyQualifiedNamespace"), "shop-.example:5671"),
    ("account-dash-label", ("checkpointStore", "accountUrl"), "https://-a.example/"),
    ("account-ip", ("checkpointStore", "accountUrl"), "https://127.0.0.1:10000"),
    # Where a host belongs, a URL or a connection string; a container's URL for the account's.
    ("namespace-url", ("eventHub", "fullyQualifiedNamespace"), "https://shop.example/"),
    ("namespace-endpoint", ("eventHub", "fullyQualifiedNamespace"), "Endpoint=sb://shop.example/"),
    ("account-no-scheme", ("checkpointStore", "accountUrl"), "shop.blob.example"),
    ("account-container", ("checkpointStore", "accountUrl"), "https://shop.blob.example/cp"),
    ("container-upper", ("checkpointStore", "containerName"), "Checkpoints"),
    # A Secret name or key that no Secret can have.
    ("secret-name-underscore", (*EH_SECRET, "name"), "Bad_Name"),
    ("secret-name-dot-end", (*BLOB_SECRET, "name"), "orders-blob."),
    ("secret-name-dots", (*BLOB_SECRET, "name"), "orders.blob-v2"),
    ("secret-key-space", (*EH_SECRET, "key"), "connection string"),
    ("secret-key-slash", (*BLOB_SECRET, "key"), "a/b"),
    ("secret-key-mixed", (*EH_SECRET, "key"), "Connection_String.v-1"),
    # An Event Hub or consumer group Azure cannot have, and names it can.
    ("hub-slash", ("eventHub", "name"), "orders/eu"),
    ("hub-dot-end", ("eventHub", "name"), "orders."),
    ("hub-mixed", ("eventHub", "name"), "Orders.v2_eu-1"),
    ("hub-longest", ("eventHub", "name"), "a" * 256),
    ("group-underscore-start", ("eventHub", "consumerGroup"), "_analytics"),
    ("group-dollar", ("eventHub", "consumerGroup"), "$analytics"),
    ("group-default-lower", ("eventHub", "consumerGroup"), "$default"),
    ("group-51", ("eventHub", "consumerGroup"), "a" * 51),
    ("group-50", ("eventHub", "consumerGroup"), "a" * 50),
    ("group-empty", ("eventHub", "consumerGroup"), ""),
]


def operator_verdict(body: dict[str, Any]) -> str | None:
    """None when the operator takes the spec, else the field its InvalidInput names."""
    try:
        specs.parse_spec(body["spec"])
    except errors.InvalidInput as e:
        return e.field
    return None


@pytest.fixture(scope="module")
def kubectl(real_kubectl: Kubectl) -> Kubectl:
    real_kubectl("create", "namespace", NAMESPACE)
    return real_kubectl


@pytest.mark.parametrize(("what", "path", "value"), CASES, ids=[c[0] for c in CASES])
def test_the_api_server_refuses_at_apply_what_the_operator_refuses(
    kubectl: Kubectl, what: str, path: tuple[str, ...], value: Any
) -> None:
    body = with_spec(path, value)
    refused_field = operator_verdict(body)
    done = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)
    if refused_field is None:
        assert done.returncode == 0, f"the operator takes it, the API server: {done.stderr}"
        return
    assert done.returncode != 0, f"admitted, but the operator refuses {refused_field}"
    # The message names the field to change (the CRD's own words, or its path), never only
    # "failed rule" or a bare type.
    shown = " ".join(done.stderr.split())
    last = path[-1]
    assert last in shown, shown
    assert "failed rule" not in shown, shown
