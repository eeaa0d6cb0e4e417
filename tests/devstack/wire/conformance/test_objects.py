"""The local API against a real kube-apiserver: writes, reads and refusals.

Every request below is one that the operator (`adapters/kubeapi.py`, kopf), the consumer pods
(`adapters/podconfig.py`) or the CLI send, or one of the refusals they rely on. Each goes to
both servers; the test compares the status, the Status reason (and message, where a client
shows it) and the fields the callers read. Where the two servers keep differing on purpose,
``test_documented_differences`` holds the local API to what docs/local-stack.md says.
"""

from __future__ import annotations

import copy
import datetime
import re
import time
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from tests.devstack.wire.conformance import exchanges

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

EHC_API = "eventhub-balancer.dev/v1alpha1"

#: How long a real server may take to serve a new CRD; it takes well under a second.
ESTABLISHED_TIMEOUT_S = 15.0


def _core(namespace: str, plural: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


def _ehcs(namespace: str, name: str = "") -> str:
    base = f"/apis/{EHC_API}/namespaces/{namespace}/eventhubconsumers"
    return base + (f"/{name}" if name else "")


def _consumer(name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": EHC_API,
        "kind": "EventHubConsumer",
        "metadata": {"name": name, **metadata},
        "spec": copy.deepcopy(spec),
        "status": {"movesTotal": 3},
    }


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "consumer", "image": "busybox"}]},
    }


def _causes(answer: exchanges.Answer) -> set[tuple[str, str, str]]:
    details = answer.body.get("details") or {}
    return {(c["field"], c["reason"], c["message"]) for c in details.get("causes") or []}


# -- namespaces -----------------------------------------------------------------------------------


def test_a_namespace_carries_its_name_label_and_the_kubernetes_finalizer(
    servers: exchanges.Servers,
) -> None:
    pair = servers.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "shop"}})
    pair.agree(201)
    for key in ("labels", "name"):
        assert pair.local.metadata.get(key) == pair.real.metadata.get(key), pair.shown()
    assert pair.local.body["spec"] == pair.real.body["spec"] == {"finalizers": ["kubernetes"]}
    assert pair.local.body["status"] == pair.real.body["status"] == {"phase": "Active"}


# -- ConfigMaps, as the operator writes them ------------------------------------------------------


def _assignment(name: str, owner: exchanges.Answer) -> dict[str, Any]:
    """A ConfigMap as the operator creates it: its labels, an owner (the pod), the data."""
    meta = owner.metadata
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": configmaps.labels(consumer="orders", pod=meta["name"]),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "data": {configmaps.KEY_GENERATION: "1", "partitions": "0,1"},
    }


def test_configmaps_are_created_listed_and_read_as_the_operator_does(
    servers: exchanges.Servers, namespace: str
) -> None:
    pods = servers.request("POST", _core(namespace, "pods"), body=_pod("orders-a", app="orders"))
    pods.agree(201)
    created = servers.each(
        lambda w: w.request(
            "POST",
            _core(namespace, "configmaps"),
            body=_assignment("orders-a", pods.of(w)),
        )
    ).agree(201)
    for answer in created:
        meta = answer.metadata
        assert meta["uid"]
        assert meta["creationTimestamp"]
        assert answer.version > 0
        assert "generation" not in meta  # ConfigMaps have none
    assert created.local.body["data"] == created.real.body["data"]
    assert created.local.metadata["labels"] == created.real.metadata["labels"]

    again = servers.each(
        lambda w: w.request(
            "POST",
            _core(namespace, "configmaps"),
            body=_assignment("orders-a", pods.of(w)),
        )
    )
    again.agree(409, "AlreadyExists").same_message()

    selector = configmaps.consumer_selector("orders")
    listed = servers.request(
        "GET", _core(namespace, "configmaps"), query={"labelSelector": selector}
    )
    listed.agree(200)
    for answer, made in zip(listed, created, strict=True):
        assert [i["metadata"]["name"] for i in answer.body["items"]] == ["orders-a"]
        assert answer.version >= made.version  # the list is at least as new as what it holds
    read = servers.request("GET", _core(namespace, "configmaps", "orders-a")).agree(200)
    for answer, made in zip(read, created, strict=True):
        assert answer.metadata["resourceVersion"] == made.metadata["resourceVersion"]
        assert answer.metadata["ownerReferences"] == made.metadata["ownerReferences"]


def test_configmap_writes_hold_to_their_preconditions(
    servers: exchanges.Servers, namespace: str
) -> None:
    cm = {"metadata": {"name": "orders-b"}, "data": {configmaps.KEY_GENERATION: "1"}}
    created = servers.request("POST", _core(namespace, "configmaps"), body=cm).agree(201)
    path = _core(namespace, "configmaps", "orders-b")

    # patch_configmap: a merge patch whose resourceVersion is the precondition.
    def merge(version: int, data: dict[str, str]) -> Any:
        return {"metadata": {"resourceVersion": str(version)}, "data": data}

    stale = servers.each(
        lambda w: w.request(
            "PATCH", path, body=merge(created.of(w).version - 1, {"x": "1"}), content_type=MERGE
        )
    )
    stale.agree(409, "Conflict").same_message()
    patched = servers.each(
        lambda w: w.request(
            "PATCH", path, body=merge(created.of(w).version, {"x": "1"}), content_type=MERGE
        )
    ).agree(200)
    for after, before in zip(patched, created, strict=True):
        assert after.version > before.version
        assert after.body["data"] == {configmaps.KEY_GENERATION: "1", "x": "1"}

    # replace_configmap_data: a JSON patch whose test operations are the precondition.
    def replace(w: exchanges.Wire, generation: str) -> exchanges.Answer:
        operations = [
            {"op": "test", "path": "/metadata/uid", "value": created.of(w).metadata["uid"]},
            {"op": "test", "path": f"/data/{configmaps.KEY_GENERATION}", "value": generation},
            {"op": "add", "path": "/data", "value": {configmaps.KEY_GENERATION: "2"}},
        ]
        return w.request("PATCH", path, body=operations, content_type=JSON_PATCH)

    servers.each(lambda w: replace(w, "7")).agree(422, "Invalid").same_message()
    replaced = servers.each(lambda w: replace(w, "1")).agree(200)
    assert replaced.local.body["data"] == replaced.real.body["data"]
    missing = [{"op": "test", "path": "/data/absent", "value": "1"}]
    servers.request("PATCH", path, body=missing, content_type=JSON_PATCH).agree(422, "Invalid")

    # delete_configmap: guarded by the uid, so that a namesake created since survives.
    wrong = {"preconditions": {"uid": "6a4d0000-0000-4000-8000-000000000000"}}
    servers.request("DELETE", path, body=wrong).agree(409, "Conflict")
    wrong_version = servers.request(
        "DELETE", path, body={"preconditions": {"resourceVersion": "1"}}
    )
    wrong_version.agree(409, "Conflict")
    uid = {w.name: created.of(w).metadata["uid"] for w in servers}
    gone = servers.each(
        lambda w: w.request("DELETE", path, body={"preconditions": {"uid": uid[w.name]}})
    ).agree(200)
    for answer in gone:
        assert answer.body["kind"] == "Status"
        assert answer.body["status"] == "Success"
        assert answer.body["details"]["name"] == "orders-b"
        assert answer.body["details"]["kind"] == "configmaps"
    servers.request("DELETE", path, body={}).agree(404, "NotFound").same_message()
    servers.request("GET", path).agree(404, "NotFound").same_message()


def test_precondition_messages_name_the_kind_and_both_values(
    servers: exchanges.Servers, namespace: str
) -> None:
    cm = {"metadata": {"name": "guarded"}}
    created = servers.request("POST", _core(namespace, "configmaps"), body=cm).agree(201)
    path = _core(namespace, "configmaps", "guarded")
    # The messages carry the stored uid and version, which differ: send each its own.
    pair = servers.each(
        lambda w: w.request(
            "DELETE", path, body={"preconditions": {"uid": "x-" + created.of(w).metadata["uid"]}}
        )
    ).agree(409, "Conflict")
    for answer, made in zip(pair, created, strict=True):
        uid = made.metadata["uid"]
        assert answer.message == (
            f'Operation cannot be fulfilled on ConfigMap "guarded": the UID in the precondition '
            f"(x-{uid}) does not match the UID in record ({uid}). The object might have been "
            "deleted and then recreated"
        )
        assert answer.body["details"] == {"name": "guarded", "kind": "ConfigMap"}
    pair = servers.request("DELETE", path, body={"preconditions": {"resourceVersion": "1"}})
    for answer, made in zip(pair, created, strict=True):
        assert answer.message == (
            'Operation cannot be fulfilled on ConfigMap "guarded": the ResourceVersion in the '
            f"precondition (1) does not match the ResourceVersion in record ({made.version}). "
            "The object might have been modified"
        )


# -- pods, as the operator and the kubelet write them ---------------------------------------------


def test_pod_annotations_and_status_are_patched_apart(
    servers: exchanges.Servers, namespace: str
) -> None:
    created = servers.request("POST", _core(namespace, "pods"), body=_pod("p", app="orders"))
    created.agree(201)
    for answer in created:
        assert answer.metadata["generation"] == 1
        assert answer.body["status"]["phase"] == "Pending"
    path = _core(namespace, "pods", "p")
    # patch_pod_annotations: a merge patch of the annotations; None removes one.
    annotate = {"metadata": {"annotations": {"eventhub-balancer.dev/a": "1", "b": "2"}}}
    annotated = servers.request("PATCH", path, body=annotate, content_type=MERGE).agree(200)
    remove = {"metadata": {"annotations": {"b": None}}}
    removed = servers.request("PATCH", path, body=remove, content_type=MERGE).agree(200)
    for answer, before in zip(removed, annotated, strict=True):
        assert answer.metadata["annotations"] == {"eventhub-balancer.dev/a": "1"}
        assert answer.metadata["generation"] == 1  # metadata is not the spec
        assert answer.version > before.version
    ready = {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "podIP": "10.0.0.7",
        }
    }
    running = servers.request("PATCH", path + "/status", body=ready, content_type=MERGE)
    running.agree(200)
    for answer in running:
        status = answer.body["status"]
        assert status["phase"] == "Running"
        assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]
        assert answer.metadata["generation"] == 1
    # The main endpoint leaves the status alone.
    lost = {"status": {"phase": "Failed"}, "metadata": {"labels": {"app": "orders", "x": "y"}}}
    kept = servers.request("PATCH", path, body=lost, content_type=MERGE).agree(200)
    assert kept.local.body["status"]["phase"] == kept.real.body["status"]["phase"] == "Running"
    gone = servers.request(
        "PATCH", _core(namespace, "pods", "nobody"), body=annotate, content_type=MERGE
    )
    gone.agree(404, "NotFound").same_message()


# -- the EventHubConsumer, as the operator and kopf write it --------------------------------------


def test_consumer_status_patches_hold_to_the_resource_version(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    created = servers.request("POST", _ehcs(namespace), body=_consumer("o", ehc_spec)).agree(201)
    for answer in created:
        assert answer.metadata["generation"] == 1
        assert "status" not in answer.body  # the main endpoint never sets it
    assert created.local.body["spec"] == created.real.body["spec"]  # with the schema's defaults
    path = _ehcs(namespace, "o") + "/status"

    def status(version: int) -> dict[str, Any]:
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "AllPartitionsOwned",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": 1,
        }
        return {
            "metadata": {"resourceVersion": str(version)},
            "status": {"movesTotal": 1, "conditions": [condition], "unknownField": 1},
            "spec": {"paused": True},
        }

    stale = servers.each(
        lambda w: w.request(
            "PATCH", path, body=status(created.of(w).version - 1), content_type=MERGE
        )
    )
    stale.agree(409, "Conflict").same_message()
    patched = servers.each(
        lambda w: w.request("PATCH", path, body=status(created.of(w).version), content_type=MERGE)
    ).agree(200)
    assert patched.local.body["status"] == patched.real.body["status"]  # unknownField pruned
    for answer, before in zip(patched, created, strict=True):
        assert "unknownField" not in answer.body["status"]
        assert answer.body["spec"] == before.body["spec"]  # /status changes the status only
        assert answer.metadata["generation"] == 1
        assert answer.version > before.version
    # get_consumer, and list_consumers across namespaces (ehb status).
    read = servers.request("GET", _ehcs(namespace, "o")).agree(200)
    assert read.local.body["status"] == read.real.body["status"]
    everywhere = servers.request("GET", f"/apis/{EHC_API}/eventhubconsumers").agree(200)
    for answer in everywhere:
        assert answer.body["kind"] == "EventHubConsumerList"
        assert (namespace, "o") in {
            (i["metadata"]["namespace"], i["metadata"]["name"]) for i in answer.body["items"]
        }
    spec = {"spec": {"balancing": {"intervalSeconds": 7}}, "status": {"movesTotal": 9}}
    changed = servers.request("PATCH", _ehcs(namespace, "o"), body=spec, content_type=MERGE)
    changed.agree(200)
    for answer, before in zip(changed, patched, strict=True):
        assert answer.metadata["generation"] == 2
        assert answer.body["status"] == before.body["status"]  # the main endpoint keeps it


def test_kopf_json_patches_test_the_resource_version(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    created = servers.request("POST", _ehcs(namespace), body=_consumer("k", ehc_spec)).agree(201)
    path = _ehcs(namespace, "k")

    def finalize(version: int) -> list[dict[str, Any]]:
        return [
            {"op": "test", "path": "/metadata/resourceVersion", "value": str(version)},
            {
                "op": "add",
                "path": "/metadata/finalizers",
                "value": ["eventhub-balancer.dev/finalizer"],
            },
        ]

    stale = servers.each(
        lambda w: w.request(
            "PATCH", path, body=finalize(created.of(w).version + 1000), content_type=JSON_PATCH
        )
    )
    stale.agree(422, "Invalid").same_message()  # kopf retries on 422
    added = servers.each(
        lambda w: w.request(
            "PATCH", path, body=finalize(created.of(w).version), content_type=JSON_PATCH
        )
    ).agree(200)
    for answer in added:
        assert answer.metadata["finalizers"] == ["eventhub-balancer.dev/finalizer"]
        assert answer.metadata["generation"] == 1
    # kopf's status through /status, tested the same way.
    progress = servers.each(
        lambda w: w.request(
            "PATCH",
            path + "/status",
            body=[
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": added.of(w).metadata["resourceVersion"],
                },
                {"op": "add", "path": "/status", "value": {"movesTotal": 4}},
            ],
            content_type=JSON_PATCH,
        )
    ).agree(200)
    assert progress.local.body["status"] == progress.real.body["status"] == {"movesTotal": 4}
    # kopf's own annotations (progress, last-handled configuration) go as merge patches.
    note = {"metadata": {"annotations": {"eventhub-balancer.dev/last-handled-configuration": "{}"}}}
    servers.request("PATCH", path, body=note, content_type=MERGE).agree(200)


def test_deleting_an_object_that_has_finalizers(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    body = _consumer("d", ehc_spec, finalizers=["eventhub-balancer.dev/finalizer"])
    servers.request("POST", _ehcs(namespace), body=body).agree(201)
    path = _ehcs(namespace, "d")
    marked = servers.request("DELETE", path, body={}).agree(200)
    for answer in marked:
        assert answer.body["kind"] == "EventHubConsumer"  # the object, not a Status
        assert answer.metadata["deletionTimestamp"]
        assert answer.metadata["deletionGracePeriodSeconds"] == 0
        assert answer.metadata["generation"] == 2  # marking it for deletion is a change
    again = servers.request("DELETE", path, body={}).agree(200)
    for answer, before in zip(again, marked, strict=True):
        assert answer.version == before.version  # nothing more to do
    more = {"metadata": {"finalizers": ["eventhub-balancer.dev/finalizer", "other/x"]}}
    refused = servers.request("PATCH", path, body=more, content_type=MERGE)
    refused.agree(422, "Invalid").same_message()
    released = servers.each(
        lambda w: w.request(
            "PATCH",
            path,
            body=[
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": marked.of(w).metadata["resourceVersion"],
                },
                {"op": "remove", "path": "/metadata/finalizers"},
            ],
            content_type=JSON_PATCH,
        )
    ).agree(200)
    for answer in released:
        assert "finalizers" not in answer.metadata
    servers.request("GET", path).agree(404, "NotFound").same_message()


# -- patch types ----------------------------------------------------------------------------------


def test_strategic_merge_patches_are_for_built_in_kinds_only(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    servers.request("POST", _core(namespace, "configmaps"), body={"metadata": {"name": "s"}}).agree(
        201
    )
    patch = {"data": {"a": "1"}}
    path = _core(namespace, "configmaps", "s")
    patched = servers.request("PATCH", path, body=patch, content_type=STRATEGIC).agree(200)
    assert patched.local.body["data"] == patched.real.body["data"] == {"a": "1"}
    servers.request("POST", _ehcs(namespace), body=_consumer("s", ehc_spec)).agree(201)
    spec = {"spec": {"paused": True}}
    refused = servers.request("PATCH", _ehcs(namespace, "s"), body=spec, content_type=STRATEGIC)
    refused.agree(415, "UnsupportedMediaType")
    for answer in refused:
        assert answer.message.startswith(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json"
        ), refused.shown()
    malformed = servers.request("PATCH", path, body={"op": "add"}, content_type=JSON_PATCH)
    malformed.agree(400, "BadRequest").same_message()


# -- refusals of what a write contains ------------------------------------------------------------


def test_schema_violations_name_each_field(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    bad = copy.deepcopy(ehc_spec)
    bad["balancing"] = {"intervalSeconds": -7, "weighting": "nonsense"}
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("bad", bad))
    refused.agree(422, "Invalid")
    # A real server visits fields in no fixed order: the causes are compared as a set.
    assert _causes(refused.local) == _causes(refused.real), refused.shown()
    assert refused.local.body["details"]["kind"] == refused.real.body["details"]["kind"]

    # Schema errors that are not blocking leave the CEL rules to run (and to fail).
    both = copy.deepcopy(ehc_spec)
    both["eventHub"]["credentials"]["workloadIdentity"] = {}
    both["balancing"] = {"intervalSeconds": -7}
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("rules", both))
    refused.agree(422, "Invalid")
    assert _causes(refused.local) == _causes(refused.real), refused.shown()

    # Too many properties (a blocking error): no rule runs, and the answer says so.
    both_positions = copy.deepcopy(ehc_spec)
    both_positions["startPosition"] = {"sequenceNumber": 5, "enqueuedTime": "2026-01-01T00:00:00Z"}
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("two", both_positions))
    refused.agree(422, "Invalid").same_message()

    missing = copy.deepcopy(ehc_spec)
    del missing["eventHub"]
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("missing", missing))
    refused.agree(422, "Invalid").same_message()
    assert _causes(refused.local) == _causes(refused.real)

    unknown = copy.deepcopy(ehc_spec)
    unknown["balancing"] = {"intervalSecond": 5}
    strict = {"fieldValidation": "Strict"}
    refused = servers.request(
        "POST", _ehcs(namespace), body=_consumer("typo", unknown), query=strict
    )
    refused.agree(400, "BadRequest").same_message()
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo"}, "dta": {}}
    refused = servers.request("POST", _core(namespace, "configmaps"), body=cm, query=strict)
    refused.agree(400, "BadRequest").same_message()
    # Without Strict, an unknown field is dropped.
    pruned = servers.request("POST", _core(namespace, "configmaps"), body=cm).agree(201)
    assert "dta" not in pruned.local.body
    assert "dta" not in pruned.real.body


@pytest.mark.parametrize(
    "change",
    [
        {"balancing": {"intervalSeconds": "5"}},
        {"balancing": {"intervalSeconds": 5.5}},
        {"startPosition": {"sequenceNumber": 1.5}},
        {"paused": "yes"},
        {"selector": {"matchLabels": {"app": 5}}},
        {"selector": {"matchLabels": {"app": "a b"}}},
        {"startPosition": 5},
        {"startPosition": {"offset": 5}},
        {"startPosition": {}},
        {"startPosition": {"enqueuedTime": "yesterday"}},
    ],
)
def test_a_wrong_type_or_shape_is_refused_in_the_same_words(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any], change: dict[str, Any]
) -> None:
    """What kubectl prints for a value of the wrong type ("5" for 5, "yes" for true), a
    fraction where an integer belongs, or a start position of no known shape."""
    bad = copy.deepcopy(ehc_spec)
    bad.update(change)
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("wrong", bad))
    refused.agree(422, "Invalid").same_message()
    assert refused.local.body["details"]["causes"] == refused.real.body["details"]["causes"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param(("eventHub", "fullyQualifiedNamespace"), "shop.example:99999", id="hub-port"),
        pytest.param(
            ("eventHub", "fullyQualifiedNamespace"), "shop.example:123456", id="hub-port-digits"
        ),
        pytest.param(("eventHub", "fullyQualifiedNamespace"), "127.0.0.1:00000", id="hub-port-0"),
        pytest.param(
            ("eventHub", "fullyQualifiedNamespace"),
            "https://shop.servicebus.windows.net/",
            id="hub-url",
        ),
        pytest.param(("eventHub", "fullyQualifiedNamespace"), "shop servicebus", id="hub-space"),
        pytest.param(
            ("eventHub", "fullyQualifiedNamespace"), "shop..example:5671", id="hub-empty-label"
        ),
        # Go's "$" is the end of the text; Python's also matches before a final newline.
        pytest.param(("eventHub", "fullyQualifiedNamespace"), "127.0.0.1:5672\n", id="hub-newline"),
        pytest.param(("checkpointStore", "containerName"), "checkpoints\n", id="container-newline"),
        pytest.param(("checkpointStore", "containerName"), "Checkpoints", id="container-upper"),
        pytest.param(("checkpointStore", "accountUrl"), "https://a.example:65536/", id="blob-port"),
        pytest.param(("checkpointStore", "accountUrl"), "a.example", id="blob-no-scheme"),
        pytest.param(("checkpointStore", "accountUrl"), "https://a.example/c", id="blob-path"),
        pytest.param(
            ("eventHub", "credentials", "connectionStringSecretRef", "name"),
            "Bad_Name",
            id="secret-name",
        ),
        pytest.param(
            ("checkpointStore", "credentials", "connectionStringSecretRef", "key"),
            "a b",
            id="secret-key",
        ),
    ],
)
def test_unusable_values_are_refused_in_the_same_words(
    servers: exchanges.Servers,
    namespace: str,
    ehc_spec: dict[str, Any],
    path: tuple[str, ...],
    value: str,
) -> None:
    """A port outside 1-65535, a Secret name or key no Secret can have: the CRD's rules (and
    its patterns, where both fail) refuse them on both servers with the same causes."""
    bad = copy.deepcopy(ehc_spec)
    node = bad
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("unusable", bad))
    refused.agree(422, "Invalid")
    assert _causes(refused.local) == _causes(refused.real), refused.shown()
    assert any(".".join(path) in field for field, _, _ in _causes(refused.real))


def test_a_null_counts_as_absent(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    """A YAML key left empty (``balancing:`` with its lines commented out) is a null: a real
    server defaults it, or drops it when the field has no default, and does not refuse it."""
    empty = copy.deepcopy(ehc_spec)
    empty["balancing"] = None
    empty["serviceAccountName"] = None
    created = servers.request("POST", _ehcs(namespace), body=_consumer("nulls", empty))
    created.agree(201)
    assert created.local.body["spec"] == created.real.body["spec"], created.shown()
    assert created.real.body["spec"]["balancing"]["intervalSeconds"] == 5

    missing = copy.deepcopy(ehc_spec)
    missing["selector"] = None
    refused = servers.request("POST", _ehcs(namespace), body=_consumer("no-selector", missing))
    refused.agree(422, "Invalid").same_message()
    assert _causes(refused.local) == _causes(refused.real), refused.shown()


def test_a_patch_with_an_unknown_field_is_refused_as_invalid(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    """``kubectl apply`` over an existing object sends a patch with fieldValidation=Strict: a
    real server checks the patched object and answers 422 naming ``patch`` (kubectl prints
    "The request is invalid: patch: ..."), for a JSON patch too; not the 400 of a create."""
    strict = {"fieldValidation": "Strict"}
    servers.request("POST", _ehcs(namespace), body=_consumer("p", ehc_spec)).agree(201)
    servers.request("POST", _core(namespace, "configmaps"), body={"metadata": {"name": "p"}})
    for path, patch, content_type, unknown in (
        (_ehcs(namespace, "p"), {"spec": {"balancing": {"intervalSecond": 7}}}, MERGE,
         "spec.balancing.intervalSecond"),
        (_core(namespace, "configmaps", "p"), {"dta": {"x": "1"}}, MERGE, "dta"),
        (_core(namespace, "configmaps", "p"), [{"op": "add", "path": "/dta", "value": {}}],
         JSON_PATCH, "dta"),
    ):  # fmt: skip
        refused = servers.request(
            "PATCH", path, body=patch, content_type=content_type, query=strict
        )
        refused.agree(422, "Invalid")
        for answer in refused:
            # The value is the patched object, which differs (a real one has managedFields).
            assert answer.message.startswith(' "" is invalid: patch: Invalid value: "{')
            assert answer.message.endswith(f'": strict decoding error: unknown field "{unknown}"')
            (cause,) = answer.body["details"]["causes"]
            assert (cause["field"], cause["reason"]) == ("patch", "FieldValueInvalid")
            assert set(answer.body["details"]) == {"causes"}


def test_names_and_labels_are_refused_in_the_same_words(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        (_core(namespace, "configmaps"), {"metadata": {"name": "Bad_Name"}}),
        (_core(namespace, "configmaps"), {"metadata": {"generateName": "Bad-"}}),
        (_core(namespace, "configmaps"), {"metadata": {"name": "x", "labels": {"a": "b c"}}}),
        (_core(namespace, "configmaps"), {"metadata": {"name": "x", "labels": {"a b": "c"}}}),
        (_core(namespace, "configmaps"), {"metadata": {"name": "x", "labels": {"k": "v" * 64}}}),
        (_core(namespace, "configmaps"), {"metadata": {"name": "x", "annotations": {"/x": "1"}}}),
        (_core(namespace, "configmaps"), {"metadata": {}}),
        ("/api/v1/namespaces", {"metadata": {"name": "a.b"}}),
        ("/api/v1/namespaces", {"metadata": {"name": "-a"}}),
        (_ehcs(namespace), _consumer("Orders", ehc_spec)),
    ]
    for path, body in cases:
        refused = servers.request("POST", path, body=body)
        refused.agree(422, "Invalid")
        if "generateName" in body["metadata"]:
            # The names generated differ: compare what they were made from.
            for answer in refused:
                generated = answer.body["details"]["name"]
                assert re.fullmatch("Bad-[a-z0-9]{5}", generated), refused.shown()
            local = refused.local.message.replace(refused.local.body["details"]["name"], "N")
            real = refused.real.message.replace(refused.real.body["details"]["name"], "N")
            assert local == real, refused.shown()
            continue
        refused.same_message()
        assert refused.local.body["details"] == refused.real.body["details"], refused.shown()


def test_a_crd_may_give_metadata_no_schema_but_its_type(servers: exchanges.Servers) -> None:
    def crd(metadata_schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.conformance.dev"},
            "spec": {
                "group": "conformance.dev",
                "scope": "Namespaced",
                "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {"metadata": metadata_schema},
                            }
                        },
                    }
                ],
            },
        }

    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for refused_schema in (
        {"type": "object", "description": "the object's metadata"},
        {"type": "object", "properties": {"labels": {"type": "object"}}},
        {"type": "string"},
    ):
        refused = servers.request("POST", path, body=crd(refused_schema))
        refused.agree(422, "Invalid").same_message()
        assert _causes(refused.local) == _causes(refused.real)
    names = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}
    servers.request("POST", path, body=crd(names)).agree(201)
    servers.request("DELETE", path + "/things.conformance.dev", body={}).agree(200)


def test_an_update_of_a_custom_resource_names_its_version(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    created = servers.request("POST", _ehcs(namespace), body=_consumer("u", ehc_spec)).agree(201)
    path = _ehcs(namespace, "u")

    def put(w: exchanges.Wire, version: str | None) -> exchanges.Answer:
        body = copy.deepcopy(created.of(w).body)
        body["metadata"].pop("resourceVersion")
        if version is not None:
            body["metadata"]["resourceVersion"] = version
        return w.request("PUT", path, body=body)

    servers.each(lambda w: put(w, None)).agree(422, "Invalid").same_message()
    servers.each(lambda w: put(w, "1")).agree(409, "Conflict").same_message()
    servers.each(lambda w: put(w, created.of(w).metadata["resourceVersion"])).agree(200)
    # Built-in kinds take an update without a version (kubectl replace --force does not need it).
    servers.request("POST", _core(namespace, "configmaps"), body={"metadata": {"name": "u"}})
    unconditional = {"metadata": {"name": "u"}, "data": {"a": "b"}}
    servers.request("PUT", _core(namespace, "configmaps", "u"), body=unconditional).agree(200)


# -- what the operator posts and asks for ---------------------------------------------------------


def test_events_are_created_with_generated_names(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    from eventhub_balancer.reconciling import kubeevents

    created = servers.request("POST", _ehcs(namespace), body=_consumer("o", ehc_spec)).agree(201)
    moment = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    event = kubeevents.KubeEvent(reason="Rebalanced", message="moved 2 partitions")
    posted = servers.each(
        lambda w: w.request(
            "POST",
            _core(namespace, "events"),
            body=kubeevents.body(created.of(w).body, event, now=moment),
        )
    ).agree(201)
    fields = ("involvedObject", "reason", "message", "type", "source", "count", "firstTimestamp")
    for answer in posted:
        prefix = answer.metadata["generateName"]
        assert answer.metadata["name"].startswith(prefix)
        assert len(answer.metadata["name"]) == len(prefix) + 5
    for field in fields:
        local, real = posted.local.body.get(field), posted.real.body.get(field)
        if field == "involvedObject":
            local, real = dict(local, uid=None), dict(real, uid=None)
        assert local == real, posted.shown()


def test_token_requests(servers: exchanges.Servers, namespace: str) -> None:
    accounts = _core(namespace, "serviceaccounts")
    servers.request("POST", accounts, body={"metadata": {"name": "tenant"}}).agree(201)

    def ask(seconds: int) -> dict[str, Any]:
        spec = {"audiences": ["api://AzureADTokenExchange"], "expirationSeconds": seconds}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}

    granted = servers.request("POST", accounts + "/tenant/token", body=ask(3600)).agree(201)
    for answer in granted:
        assert answer.body["status"]["token"].count(".") == 2  # a JWT
        assert answer.body["status"]["expirationTimestamp"].endswith("Z")
        assert answer.body["spec"]["audiences"] == ["api://AzureADTokenExchange"]
        assert answer.body["spec"]["expirationSeconds"] == 3600
    servers.request("POST", accounts + "/tenant/token", body=ask(60)).agree(
        422, "Invalid"
    ).same_message()
    servers.request("POST", accounts + "/nobody/token", body=ask(3600)).agree(
        404, "NotFound"
    ).same_message()


def test_secrets_keep_string_data_as_base64_data(
    servers: exchanges.Servers, namespace: str
) -> None:
    body = {"metadata": {"name": "conn"}, "stringData": {"connectionString": "Endpoint=sb://x/"}}
    servers.request("POST", _core(namespace, "secrets"), body=body).agree(201)
    created = servers.request("GET", _core(namespace, "secrets", "conn")).agree(200)
    assert created.local.body["data"] == created.real.body["data"]
    assert created.local.body["type"] == created.real.body["type"] == "Opaque"
    assert "stringData" not in created.local.body
    assert "stringData" not in created.real.body


# -- lists and selectors ---------------------------------------------------------------------------


def test_lists_select_by_labels_and_by_the_fields_each_kind_has(
    servers: exchanges.Servers, namespace: str
) -> None:
    for name, labels in (("a", {"app": "orders", "tier": "web"}), ("b", {"app": "orders"})):
        body = {"metadata": {"name": name, "labels": labels}}
        servers.request("POST", _core(namespace, "configmaps"), body=body).agree(201)
        servers.request("POST", _core(namespace, "pods"), body=_pod(name, **labels)).agree(201)
    running = {"status": {"phase": "Running"}}
    path = _core(namespace, "pods", "b") + "/status"
    servers.request("PATCH", path, body=running, content_type=MERGE).agree(200)

    def names(plural: str, **query: str) -> list[str]:
        pair = servers.request("GET", _core(namespace, plural), query=query).agree(200)
        found = [[i["metadata"]["name"] for i in answer.body["items"]] for answer in pair]
        assert found[0] == found[1], pair.shown()
        assert pair.local.body["kind"] == pair.real.body["kind"]
        return found[0]

    assert names("configmaps", labelSelector="app=orders,tier!=web") == ["b"]
    assert names("configmaps", labelSelector="tier in (web, batch)") == ["a"]
    assert names("configmaps", labelSelector="app,!tier") == ["b"]
    assert names("configmaps", labelSelector="app notin (orders)") == []
    assert names("configmaps", fieldSelector="metadata.name=a") == ["a"]
    assert names("configmaps", fieldSelector=f"metadata.namespace={namespace}") == ["a", "b"]
    assert names("pods", fieldSelector="status.phase=Running") == ["b"]
    assert names("pods", fieldSelector="spec.nodeName=") == ["a", "b"]
    assert names("pods", labelSelector="app=orders", fieldSelector="metadata.name!=a") == ["b"]

    for plural, field in (
        ("configmaps", "data.x"),
        ("configmaps", "status.phase"),
        ("pods", "metadata.labels.app"),
        ("secrets", "status.phase"),
        ("events", "status.phase"),
        ("serviceaccounts", "type"),
    ):
        query = {"fieldSelector": f"{field}=1"}
        pair = servers.request("GET", _core(namespace, plural), query=query)
        pair.agree(400, "BadRequest").same_message()
    pair = servers.request("GET", _ehcs(namespace), query={"fieldSelector": "spec.paused=true"})
    pair.agree(400, "BadRequest").same_message()
    # A malformed label selector: both refuse it (each in its own words).
    pair = servers.request("GET", _core(namespace, "pods"), query={"labelSelector": "a b"})
    pair.agree(400, "BadRequest")


def test_paths_that_name_nothing(servers: exchanges.Servers, namespace: str) -> None:
    servers.request("GET", _core(namespace, "things")).agree(404, "NotFound").same_message()
    servers.request("POST", _core(namespace, "configmaps"), body={"metadata": {"name": "c"}})
    status = _core(namespace, "configmaps", "c") + "/status"
    servers.request("GET", status).agree(404, "NotFound").same_message()
    unknown = servers.request("GET", "/apis/nope.dev/v1/namespaces/x/things")
    unknown.agree(404)  # no Status at all: the server's mux answers in plain text
    assert unknown.local.raw == unknown.real.raw == b"404 page not found\n"
    assert unknown.local.content_type == unknown.real.content_type == "text/plain"


# -- what stays different -------------------------------------------------------------------------


def test_documented_differences(servers: exchanges.Servers, namespace: str) -> None:
    """What docs/local-stack.md says stays different ("Where the local API differs from a
    real one"): if one of these starts to agree, the page must say so."""
    body = {"metadata": {"name": "m"}, "data": {"k": "v"}}
    created = servers.request("POST", _core(namespace, "configmaps"), body=body)
    # No managedFields, no server-side apply.
    assert "managedFields" in created.real.metadata
    assert "managedFields" not in created.local.metadata
    applied = servers.request(
        "PATCH", _core(namespace, "configmaps", "m"), body={}, content_type=APPLY
    )
    assert applied.local.status == 415
    assert applied.real.status == 422  # it would apply, given a fieldManager
    # Built-in kinds are not defaulted.
    scheduled = _pod("p")
    scheduled["spec"]["nodeName"] = "somewhere"
    pods = servers.request("POST", _core(namespace, "pods"), body=scheduled).agree(201)
    assert pods.real.body["spec"]["restartPolicy"] == "Always"
    assert "restartPolicy" not in pods.local.body["spec"]
    # A pod bound to a node is deleted at once, not after its kubelet confirms.
    deleted = servers.request("DELETE", _core(namespace, "pods", "p"), body={}).agree(200)
    assert deleted.real.metadata["deletionGracePeriodSeconds"] == 30
    assert "deletionTimestamp" not in deleted.local.metadata
    after = servers.request("GET", _core(namespace, "pods", "p"))
    assert (after.local.status, after.real.status) == (404, 200)
    # A namespace is deleted at once, without a Terminating phase.
    gone = servers.request("DELETE", f"/api/v1/namespaces/{namespace}", body={}).agree(200)
    assert gone.real.body["status"]["phase"] == "Terminating"
    assert "deletionTimestamp" not in gone.local.metadata


def test_kopf_peerings_as_the_local_api_installs_them(
    servers: exchanges.Servers, namespace: str
) -> None:
    """kopf's peering CRDs, as the local API installs them, are taken by a real server too
    (which has them only when applied), and kopf's peering writes land the same."""
    from eventhub_balancer_devstack.kube import resources

    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in resources.KOPF_PEERING_CRDS:
        servers.real.request("POST", crds, body=crd)
        _wait_established(servers.real, f"{crds}/{crd['metadata']['name']}")
    path = f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings"
    body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "ehb"}}
    servers.request("POST", path, body=body).agree(201)
    peer = {
        "status": {"host-1": {"priority": 100, "lifetime": 60, "lastseen": "2026-01-01T00:00:00"}}
    }
    patched = servers.request("PATCH", f"{path}/ehb", body=peer, content_type=MERGE).agree(200)
    assert patched.local.body["status"] == patched.real.body["status"] == peer["status"]
    gone = {"status": {"host-1": None}}
    cleared = servers.request("PATCH", f"{path}/ehb", body=gone, content_type=MERGE).agree(200)
    assert cleared.local.body.get("status") == cleared.real.body.get("status")


def _wait_established(wire: exchanges.Wire, path: str) -> None:
    deadline = time.monotonic() + ESTABLISHED_TIMEOUT_S
    while True:
        conditions = (wire.request("GET", path).body.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        assert time.monotonic() < deadline, f"{path} not Established"
        time.sleep(0.05)
