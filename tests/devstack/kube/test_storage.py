import datetime
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import failures, resources, selectors, storage

NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)

CRD: dict[str, Any] = {
    "metadata": {"name": "widgets.test.dev"},
    "spec": {
        "group": "test.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def store() -> storage.Store:
    return storage.Store(clock=lambda: NOW)


def _spec(store: storage.Store, group: str, version: str, plural: str) -> resources.ResourceSpec:
    return store.resolve(group=group, version=version, plural=plural)


@pytest.fixture
def pods(store: storage.Store) -> resources.ResourceSpec:
    return _spec(store, "", "v1", "pods")


@pytest.fixture
def configmaps(store: storage.Store) -> resources.ResourceSpec:
    return _spec(store, "", "v1", "configmaps")


@pytest.fixture
def widgets(store: storage.Store) -> resources.ResourceSpec:
    store.create(resources.CRDS, namespace=None, body=CRD)
    return _spec(store, "test.dev", "v1", "widgets")


def test_create_sets_server_metadata(store: storage.Store, pods: resources.ResourceSpec) -> None:
    before = int(store.resource_version)
    pod = store.create(
        pods,
        namespace="ns",
        body={"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Running"}},
    )
    meta = pod["metadata"]
    assert meta["namespace"] == "ns"
    assert int(meta["resourceVersion"]) > before
    assert meta["uid"]
    assert meta["creationTimestamp"] == "2030-01-02T03:04:05Z"
    assert meta["generation"] == 1
    assert pod["status"] == {"phase": "Pending"}  # status is the server's, not the creator's
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert store.get(resources.NAMESPACES, namespace=None, name="ns")["status"] == {
        "phase": "Active"
    }


def test_resource_versions_increase_globally(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    a = store.create(configmaps, namespace="ns", body={"metadata": {"name": "a"}})
    b = store.create(configmaps, namespace="ns", body={"metadata": {"name": "b"}})
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert "generation" not in a["metadata"]  # ConfigMaps have no generation


def test_generate_name_and_already_exists(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    made = store.create(configmaps, namespace="ns", body={"metadata": {"generateName": "cm-"}})
    assert made["metadata"]["name"].startswith("cm-")
    assert len(made["metadata"]["name"]) == len("cm-") + 5
    with pytest.raises(failures.APIFailure) as e:
        store.create(
            configmaps, namespace="ns", body={"metadata": {"name": made["metadata"]["name"]}}
        )
    assert (e.value.code, e.value.reason) == (409, "AlreadyExists")


def test_namespace_mismatch_and_invalid_names(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    with pytest.raises(failures.APIFailure) as e:
        store.create(configmaps, namespace="a", body={"metadata": {"name": "x", "namespace": "b"}})
    assert e.value.code == 400
    with pytest.raises(failures.APIFailure) as e:
        store.create(configmaps, namespace="a", body={"metadata": {"name": "Upper_Case"}})
    assert e.value.code == 422
    with pytest.raises(failures.APIFailure) as e:
        store.create(
            configmaps, namespace="a", body={"metadata": {"name": "x", "labels": {"k": "v" * 64}}}
        )
    assert e.value.code == 422


def test_stale_resource_version_conflicts(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    cm = store.create(
        configmaps, namespace="ns", body={"metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    cm["data"] = {"a": "2"}
    updated = store.replace(configmaps, namespace="ns", name="c", body=cm)
    assert updated["data"] == {"a": "2"}
    cm["data"] = {"a": "3"}  # still the old resourceVersion
    with pytest.raises(failures.APIFailure) as e:
        store.replace(configmaps, namespace="ns", name="c", body=cm)
    assert (e.value.code, e.value.reason) == (409, "Conflict")
    with pytest.raises(failures.APIFailure) as e:
        store.patch(
            configmaps,
            namespace="ns",
            name="c",
            patch_type="merge",
            patch={
                "metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]},
                "data": {"a": "4"},
            },
        )
    assert e.value.code == 409


def test_failed_json_patch_test_is_422(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    store.create(configmaps, namespace="ns", body={"metadata": {"name": "c"}})
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/data", "value": {}},
    ]
    with pytest.raises(failures.APIFailure) as e:
        store.patch(configmaps, namespace="ns", name="c", patch=ops, patch_type="json")
    assert e.value.code == 422


def test_noop_write_keeps_the_version(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    cm = store.create(
        configmaps, namespace="ns", body={"metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    again = store.patch(
        configmaps, namespace="ns", name="c", patch={"data": {"a": "1"}}, patch_type="merge"
    )
    assert again["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]


def test_status_subresource_and_generation(
    store: storage.Store, widgets: resources.ResourceSpec
) -> None:
    w = store.create(
        widgets,
        namespace="ns",
        body={"metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"x": 1}},
    )
    assert "status" not in w
    w = store.patch(
        widgets, namespace="ns", name="w", patch={"status": {"x": 2}}, patch_type="merge"
    )
    assert "status" not in w  # the main endpoint ignores status
    w = store.patch(
        widgets,
        namespace="ns",
        name="w",
        patch={"status": {"x": 3}, "spec": {"size": 9}},
        patch_type="merge",
        subresource="status",
    )
    assert w["status"] == {"x": 3}
    assert w["spec"] == {"size": 1}  # /status changes only status
    assert w["metadata"]["generation"] == 1
    w = store.patch(
        widgets,
        namespace="ns",
        name="w",
        patch={"metadata": {"labels": {"a": "b"}}},
        patch_type="merge",
    )
    assert w["metadata"]["generation"] == 1  # metadata is not spec
    w = store.patch(
        widgets, namespace="ns", name="w", patch={"spec": {"size": 2}}, patch_type="strategic"
    )
    assert w["metadata"]["generation"] == 2
    assert w["status"] == {"x": 3}


def test_finalizers_hold_deletion_until_removed(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    store.create(
        configmaps, namespace="ns", body={"metadata": {"name": "c", "finalizers": ["x/y"]}}
    )
    marked = store.delete(configmaps, namespace="ns", name="c")
    assert marked["metadata"]["deletionTimestamp"] == "2030-01-02T03:04:05Z"
    assert store.get(configmaps, namespace="ns", name="c")["metadata"]["finalizers"] == ["x/y"]
    store.patch(
        configmaps,
        namespace="ns",
        name="c",
        patch={"metadata": {"finalizers": None}},
        patch_type="merge",
    )
    with pytest.raises(failures.APIFailure) as e:
        store.get(configmaps, namespace="ns", name="c")
    assert e.value.code == 404
    last_two = [event.type for event in store.changes_since(configmaps, 0)][-3:]
    assert last_two == ["MODIFIED", "MODIFIED", "DELETED"]


def test_owned_objects_are_collected(
    store: storage.Store, pods: resources.ResourceSpec, configmaps: resources.ResourceSpec
) -> None:
    pod = store.create(pods, namespace="ns", body={"metadata": {"name": "p"}})
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod["metadata"]["uid"]}
    store.create(
        configmaps, namespace="ns", body={"metadata": {"name": "owned", "ownerReferences": [owner]}}
    )
    store.create(configmaps, namespace="ns", body={"metadata": {"name": "free"}})
    store.delete(pods, namespace="ns", name="p")
    names = [cm["metadata"]["name"] for cm in store.select(configmaps, namespace="ns")]
    assert names == ["free"]


def test_orphan_propagation_keeps_dependents(
    store: storage.Store, pods: resources.ResourceSpec, configmaps: resources.ResourceSpec
) -> None:
    pod = store.create(pods, namespace="ns", body={"metadata": {"name": "p"}})
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod["metadata"]["uid"]}
    store.create(
        configmaps, namespace="ns", body={"metadata": {"name": "owned", "ownerReferences": [owner]}}
    )
    store.delete(pods, namespace="ns", name="p", options={"propagationPolicy": "Orphan"})
    assert [cm["metadata"]["name"] for cm in store.select(configmaps, namespace="ns")] == ["owned"]


def test_list_selectors_and_namespaces(
    store: storage.Store, configmaps: resources.ResourceSpec
) -> None:
    store.create(
        configmaps, namespace="a", body={"metadata": {"name": "x", "labels": {"app": "one"}}}
    )
    store.create(
        configmaps, namespace="b", body={"metadata": {"name": "y", "labels": {"app": "two"}}}
    )
    everything = store.select(configmaps, namespace=None)
    assert [(c["metadata"]["namespace"], c["metadata"]["name"]) for c in everything] == [
        ("a", "x"),
        ("b", "y"),
    ]
    selected = store.select(
        configmaps, namespace=None, selector=selectors.parse(labels="app in (two)", fields=None)
    )
    assert [c["metadata"]["name"] for c in selected] == ["y"]
    assert (
        store.select(
            configmaps,
            namespace="a",
            selector=selectors.parse(labels=None, fields="metadata.name=y"),
        )
        == []
    )


def test_crds_created_and_deleted_at_run_time(
    store: storage.Store, widgets: resources.ResourceSpec
) -> None:
    store.create(widgets, namespace="ns", body={"metadata": {"name": "w"}})
    crd = store.get(resources.CRDS, namespace=None, name="widgets.test.dev")
    assert {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}
    store.delete(resources.CRDS, namespace=None, name="widgets.test.dev")
    with pytest.raises(failures.APIFailure) as e:
        store.resolve(group="test.dev", version="v1", plural="widgets")
    assert e.value.code == 404


def test_secrets_string_data_becomes_data(store: storage.Store) -> None:
    secrets = _spec(store, "", "v1", "secrets")
    secret = store.create(
        secrets, namespace="ns", body={"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert secret["data"] == {"k": "dg=="}
    assert "stringData" not in secret


def test_history_compaction_expires_old_versions(configmaps: resources.ResourceSpec) -> None:
    small = storage.Store(clock=lambda: NOW, history_size=20)
    spec = small.resolve(group="", version="v1", plural="configmaps")
    for i in range(30):
        small.create(spec, namespace="ns", body={"metadata": {"name": f"c{i}"}})
    with pytest.raises(failures.APIFailure) as e:
        small.changes_since(spec, 1)
    assert e.value.code == 410
    recent = small.changes_since(spec, int(small.resource_version) - 2)
    assert [event.body["metadata"]["name"] for event in recent] == ["c28", "c29"]


def test_a_flood_of_one_kind_leaves_another_kinds_place_in_the_history() -> None:
    # A real API server keeps a watch cache per resource: a watch on Secrets resumes from its
    # place however many ConfigMaps were written since, as long as no Secret change it missed
    # fell out of the history, and only ConfigMaps' place expires.
    small = storage.Store(clock=lambda: NOW, history_size=20)
    configmaps = small.resolve(group="", version="v1", plural="configmaps")
    secrets = small.resolve(group="", version="v1", plural="secrets")
    small.create(secrets, namespace="ns", body={"metadata": {"name": "s0"}})
    place = int(small.resource_version)
    for i in range(30):
        small.create(configmaps, namespace="ns", body={"metadata": {"name": f"c{i}"}})
    small.create(secrets, namespace="ns", body={"metadata": {"name": "s1"}})
    later = small.changes_since(secrets, place)
    assert [event.body["metadata"]["name"] for event in later] == ["s1"]
    with pytest.raises(failures.APIFailure) as e:
        small.changes_since(configmaps, place)
    assert e.value.code == 410
    # A Secret change the watch missed fell out: its place expires too, it must list again.
    missed = int(small.resource_version)
    small.create(secrets, namespace="ns", body={"metadata": {"name": "s2"}})
    for i in range(30, 60):
        small.create(configmaps, namespace="ns", body={"metadata": {"name": f"c{i}"}})
    with pytest.raises(failures.APIFailure) as e:
        small.changes_since(secrets, missed)
    assert e.value.code == 410
    assert small.changes_since(secrets, int(small.resource_version)) == []
