"""`rosters`: the one rule (per name, the highest resourceVersion wins) and what follows.

Safety does not rest on it: the preconditions make a stale body cost a 409
(`test_caching.py`, `test_cache_model.py`). This rule keeps the roster from serving stale
bodies at all, so that a lagging watch does not turn into a stream of conflicts.
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, podstates
from eventhub_balancer.handlers.cache import rosters, shelves


def body(name: str, version: int, *, uid: str = "", app: str = "c") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(version),
            "labels": {"app": app},
        }
    }


def roster() -> rosters.Roster:
    return rosters.Roster(
        namespace="shop",
        name="orders",
        selects=lambda b: b["metadata"]["labels"].get("app") == "c",
        labelled=lambda b: True,
        scope="app=c",
    )


def test_an_older_body_never_replaces_a_newer_one() -> None:
    r = roster()
    assert r.wrote(shelves.PODS, body("a", 7), now=0)
    assert not r.offer(shelves.PODS, body("a", 5), echo=True)  # the lagging watch's older one
    assert not r.offer(shelves.PODS, body("a", 7), echo=True)  # the echo: nothing new
    assert r.items(shelves.PODS)[0]["metadata"]["resourceVersion"] == "7"
    assert r.offer(shelves.PODS, body("a", 9), echo=True)


def test_a_deleted_object_stays_deleted_until_something_newer_comes() -> None:
    r = roster()
    r.offer(shelves.PODS, body("a", 3))
    assert r.offer(shelves.PODS, body("a", 6), deleted=True)
    assert not r.offer(shelves.PODS, body("a", 5))  # a late event of the deleted one
    assert not r.holds(shelves.PODS, "a")
    assert r.offer(shelves.PODS, body("a", 8, uid="other"))  # recreated under its name
    assert r.items(shelves.PODS)[0]["metadata"]["uid"] == "other"


def test_a_pod_relabelled_away_leaves_and_an_older_match_does_not_bring_it_back() -> None:
    r = roster()
    r.offer(shelves.PODS, body("a", 3))
    assert r.offer(shelves.PODS, body("a", 4, app="moved"))
    assert not r.holds(shelves.PODS, "a")
    assert not r.offer(shelves.PODS, body("a", 3))
    assert r.offer(shelves.PODS, body("a", 5))  # relabelled back


def test_a_resync_removes_only_what_is_no_newer_than_the_listing() -> None:
    r = roster()
    for name, version in (("old", 3), ("kept", 4), ("born-after", 12)):
        r.offer(shelves.PODS, body(name, version))
    r.stale.add(shelves.PODS)
    assert r.resync(shelves.PODS, [body("kept", 4)], at=10)
    assert sorted(b["metadata"]["name"] for b in r.items(shelves.PODS)) == ["born-after", "kept"]
    assert shelves.PODS not in r.stale
    assert not r.offer(shelves.PODS, body("old", 9))  # older than its removal by the listing


def test_the_version_goes_up_only_when_what_is_served_changes() -> None:
    r = roster()
    before = r.version
    r.offer(shelves.PODS, body("a", 3))
    r.offer(shelves.PODS, body("a", 3))
    r.offer(shelves.PODS, body("a", 2))
    r.offer(shelves.PODS, body("z", 4, app="other"))  # never selected
    assert r.version == before + 1


def test_an_echo_that_does_not_come_in_time_makes_the_kind_stale_once_per_bound() -> None:
    r = roster()
    r.wrote(shelves.CONFIGMAPS, body("cm", 5), now=0)
    assert r.overdue(now=rosters.ECHO_SECONDS - 1) == set()
    assert r.overdue(now=rosters.ECHO_SECONDS + 1) == {shelves.CONFIGMAPS}
    assert r.overdue(now=rosters.ECHO_SECONDS + 2) == set()  # it waits anew
    r.offer(shelves.CONFIGMAPS, body("cm", 5), echo=True)
    assert r.overdue(now=100) == set()


def test_a_listing_settles_the_echoes_it_shows() -> None:
    r = roster()
    r.wrote(shelves.CONFIGMAPS, body("cm", 5), now=0)
    r.deleted(shelves.CONFIGMAPS, name="cm", uid="uid-cm", now=0)
    r.wrote(shelves.CONFIGMAPS, body("new", 7), now=0)
    r.resync(shelves.CONFIGMAPS, [body("new", 7)], at=8)  # shows the write, lacks the deleted
    assert r.overdue(now=100) == set()


def test_versions_that_are_not_numbers_count_as_newer() -> None:
    r = roster()
    r.offer(shelves.PODS, body("a", 3))
    odd = body("a", 0)
    odd["metadata"]["resourceVersion"] = "opaque"
    assert r.offer(shelves.PODS, odd)
    assert shelves.number("opaque") is None
    assert shelves.number("42") == 42


def test_a_configmap_seen_deleted_is_kept_with_its_version_until_the_pods_are_listed() -> None:
    r = roster()
    r.offer(shelves.CONFIGMAPS, body("cm-b", 3))
    assert r.offer(shelves.CONFIGMAPS, body("cm-b", 6), deleted=True)  # the garbage collector
    assert r.vanished() == {"cm-b": 6}
    r.resync(shelves.PODS, [body("b", 2)], at=5)  # listed before the deletion: b may be gone
    assert r.vanished() == {"cm-b": 6}
    r.resync(shelves.PODS, [body("b", 2)], at=7)  # listed since: b stands, or is gone now
    assert r.vanished() == {}


def test_a_configmap_the_operator_deleted_or_that_came_back_has_not_vanished() -> None:
    r = roster()
    r.offer(shelves.CONFIGMAPS, body("cm-a", 3))
    r.deleted(shelves.CONFIGMAPS, name="cm-a", uid="uid-cm-a", now=0)  # its own delete
    r.offer(shelves.CONFIGMAPS, body("cm-a", 5), deleted=True, echo=True)  # and its echo
    r.offer(shelves.CONFIGMAPS, body("cm-b", 3))
    r.offer(shelves.CONFIGMAPS, body("cm-b", 6), deleted=True)
    assert r.offer(shelves.CONFIGMAPS, body("cm-b", 8, uid="again"))  # written again
    assert r.vanished() == {}


def test_a_write_that_changed_nothing_awaits_no_echo() -> None:
    """The status a decision writes first, as its precondition, often changes nothing: the
    API server answers with the version the watch already delivered, and no event follows.
    Awaiting one took a healthy watch for a late one 5 s later, and read everything afresh."""
    r = roster()
    r.offer(shelves.CONSUMER, body("orders", 21), echo=True)  # the watch is at 21
    r.wrote(shelves.CONSUMER, body("orders", 21), now=0)  # a patch that changed nothing
    assert r.overdue(now=100) == set()


def test_a_write_whose_echo_came_before_its_answer_awaits_nothing_more() -> None:
    r = roster()
    r.offer(shelves.CONFIGMAPS, body("cm", 7), echo=True)  # the event, ahead of the answer
    r.wrote(shelves.CONFIGMAPS, body("cm", 7), now=0)
    assert r.overdue(now=100) == set()
    r.wrote(shelves.CONFIGMAPS, body("cm", 9), now=0)  # a change the watch has not shown
    assert r.overdue(now=100) == {shelves.CONFIGMAPS}


def test_the_cache_keeps_no_managed_fields() -> None:
    # A real API server lists one field tree per writer of an object; nothing reads them, and
    # parsed they are many small dicts per pod, ConfigMap and CR (the operator's memory at
    # 1,000 consumers was twice the local API's, which sends none).
    r = roster()
    managed = body("a", 7)
    managed["metadata"]["managedFields"] = [
        {"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}
    ]
    managed["status"] = {"phase": "Running"}
    assert r.offer(shelves.PODS, managed)
    [kept] = r.items(shelves.PODS)
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == {"app": "c"}
    assert kept["status"] == {"phase": "Running"}
    assert "managedFields" in managed["metadata"]  # what was offered is left as it was
    plain = body("b", 8)
    assert shelves.kept(plain) is plain  # a body without them is kept as it is


#: A pod as a real API server serves it (trimmed of its managed fields by the cache first).
REAL_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "orders-7d9f8c6b5-x2k4q",
        "namespace": "shop",
        "uid": "0b7c",
        "resourceVersion": "811",
        "creationTimestamp": "2026-11-29T10:00:00Z",
        "labels": {"app": "c", "pod-template-hash": "7d9f8c6b5"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "orders-7d9f8c6b5", "uid": "r1"}],
        "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
    },
    "spec": {
        "nodeName": "node-1",
        "serviceAccountName": "orders",
        "containers": [
            {
                "name": "consumer",
                "image": "consumer:1",
                "env": [{"name": "EHB_CONSUMER", "value": "orders"}],
                "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run"}],
            }
        ],
        "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": []}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}],
    },
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:05Z"},
        ],
        "containerStatuses": [{"name": "consumer", "ready": True, "restartCount": 0}],
    },
}


def test_a_pod_is_kept_with_all_the_operator_reads_of_it_and_no_more() -> None:
    kept = shelves.kept_pod(REAL_POD)
    assert kept["spec"] == {"nodeName": "node-1"}
    assert "managedFields" not in kept["metadata"]
    assert kept["status"] == REAL_POD["status"]
    assert podstates.state_inputs(kept) == podstates.state_inputs(REAL_POD)
    assert podstates.pod_state(kept) == podstates.pod_state(REAL_POD)
    unscheduled = {**REAL_POD, "spec": {}, "status": {"phase": "Pending"}}
    assert podstates.pod_state(shelves.kept_pod(unscheduled)) == podstates.pod_state(unscheduled)
    # The pods' shelf keeps them so; what was offered is left as it was.
    r = roster()
    assert r.offer(shelves.PODS, REAL_POD)
    assert r.items(shelves.PODS) == [kept]
    assert "containers" in REAL_POD["spec"]


def test_a_pod_is_kept_without_the_annotations_the_operator_never_reads() -> None:
    """A tenant's pods may carry 256 KB of annotations each: kept whole, 300 of them kept
    75 MiB in the operator (every pod of every namespace it serves: the chart's 256 MiB limit
    at about a thousand). Of a pod's annotations the operator reads only its own two
    (`configmaps.pod_annotations`), and those at most at the length it writes them."""
    ours = configmaps.pod_annotations(
        consumer="orders", partitions={models.PartitionId(str(p)): 1 for p in range(1024)}
    )
    notes = {"notes": "x" * 250_000, "eventhub-balancer.dev/other": "y" * 250_000}
    pod = {**REAL_POD, "metadata": {**REAL_POD["metadata"], "annotations": {**notes, **ours}}}
    kept = shelves.kept_pod(pod)
    assert kept["metadata"]["annotations"] == ours
    assert {k: v for k, v in kept["metadata"].items() if k != "annotations"} == {
        k: v for k, v in REAL_POD["metadata"].items() if k != "managedFields"
    }
    assert shelves.kept_pod(kept) == kept
    # One of the operator's own annotations grown by someone else is kept cut, so that it
    # still differs from what the operator writes there, which then writes it again.
    forged = {configmaps.POD_ANNOTATION_PARTITIONS: "0," * 125_000}
    pod = {**REAL_POD, "metadata": {**REAL_POD["metadata"], "annotations": forged}}
    value = shelves.kept_pod(pod)["metadata"]["annotations"][configmaps.POD_ANNOTATION_PARTITIONS]
    assert len(value) == shelves.MAX_POD_ANNOTATION + 1
    assert len(ours[configmaps.POD_ANNOTATION_PARTITIONS]) < shelves.MAX_POD_ANNOTATION
    assert value.startswith("0,0,")
    assert value != ours[configmaps.POD_ANNOTATION_PARTITIONS]


def test_a_pod_is_kept_so_under_a_new_selector_too() -> None:
    # A consumer's selector changed: its pods start afresh on a new shelf, kept the same way.
    kept = rosters.Rosters()
    r = roster()
    kept.add(r, lookup=None, label="orders")
    kept.rescope(r, scope="app=c,tier=1", lookup=None, selects=lambda b: True)
    assert kept.offer(r, shelves.PODS, REAL_POD)
    assert r.items(shelves.PODS) == [shelves.kept_pod(REAL_POD)]
