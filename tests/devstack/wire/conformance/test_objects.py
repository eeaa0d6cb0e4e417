"""The local API against a real kube-apiserver: writes, reads and refusals.

Every request below is one that the operator (`adapters/kubeapi.py`, kopf), the consumer pods
(`adapters/podconfig.py`) or the CLI send, or one of the refusals they rely on. Each goes to
both servers; the test compares the status, the Status reason (and message, where a client
shows it) and the fields the callers read. Where the two servers keep differing on purpose,
``test_documented_differences`` holds the local API to what docs/local-stack.md says.
"""

from __future__ import annotations

import copy
from typing import Any

from eventhub_balancer.contracts import configmaps
from tests.devstack.wire.conformance import exchanges

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

EHC_API = "eventhub-balancer.dev/v1alpha1"


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


# -- namespaces ---------------------------------------------------------------------------------


def test_a_namespace_carries_its_name_label_and_the_kubernetes_finalizer(
    servers: exchanges.Servers,
) -> None:
    pair = servers.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "shop"}})
    pair.agree(201)
    for key in ("labels", "name"):
        assert pair.local.metadata.get(key) == pair.real.metadata.get(key), pair.shown()
    assert pair.local.body["spec"] == pair.real.body["spec"] == {"finalizers": ["kubernetes"]}
    assert pair.local.body["status"] == pair.real.body["status"] == {"phase": "Active"}


# -- ConfigMaps, as the operator writes them -------------------------------------------------------


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
