"""The official kubernetes client, unmodified, against the local API server."""

import threading
from pathlib import Path
from typing import Any

import pytest

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.ApiException


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_kubeconfig_is_read_from_the_environment(kubeconfig: Path) -> None:
    kubernetes.config.load_kube_config()  # no argument: $KUBECONFIG / the default location
    v1 = kubernetes.client.CoreV1Api()
    names = {ns.metadata.name for ns in v1.list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_create_read_and_selectors(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("shop", _pod("a", app="orders", tier="web"))
    v1.create_namespaced_pod("shop", _pod("b", app="orders", tier="batch"))
    v1.create_namespaced_pod("other", _pod("c", app="billing"))
    v1.patch_namespaced_pod_status("b", "shop", {"status": {"phase": "Running"}})

    def names(**kwargs: Any) -> list[str]:
        return [p.metadata.name for p in v1.list_pod_for_all_namespaces(**kwargs).items]

    assert names() == ["c", "a", "b"]  # sorted by namespace, then name
    assert names(label_selector="app=orders") == ["a", "b"]
    assert names(label_selector="app=orders,tier!=web") == ["b"]
    assert names(label_selector="tier in (web, batch)") == ["a", "b"]
    assert names(label_selector="app notin (orders)") == ["c"]
    assert names(label_selector="!tier") == ["c"]
    assert names(field_selector="status.phase=Running") == ["b"]
    assert names(field_selector="metadata.namespace=other") == ["c"]
    assert [
        p.metadata.name
        for p in v1.list_namespaced_pod("shop", field_selector="metadata.name=a").items
    ] == ["a"]
    assert "shop" in {ns.metadata.name for ns in v1.list_namespace().items}

    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod("shop", _pod("a"))
    assert e.value.status == 409
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("missing", "shop")
    assert e.value.status == 404
    assert '"reason": "NotFound"' in e.value.body


def test_generate_name(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    cm = v1.create_namespaced_config_map(
        "default", {"metadata": {"generateName": "assign-"}, "data": {"k": "v"}}
    )
    assert cm.metadata.name.startswith("assign-")
    assert len(cm.metadata.name) == len("assign-") + 5
    assert v1.read_namespaced_config_map(cm.metadata.name, "default").data == {"k": "v"}


def test_patch_kinds_and_put_conflicts(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    cm = v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    version = cm.metadata.resource_version

    merged = v1.patch_namespaced_config_map("c", "default", {"data": {"b": "2"}})  # strategic
    assert merged.data == {"a": "1", "b": "2"}
    assert int(merged.metadata.resource_version) > int(version)

    version = merged.metadata.resource_version
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "remove", "path": "/data/a"},
    ]
    patched = v1.patch_namespaced_config_map("c", "default", ops)  # a list: JSON patch
    assert patched.data == {"b": "2"}
    with pytest.raises(ApiException) as e:
        v1.patch_namespaced_config_map("c", "default", ops)  # the test op now fails
    assert e.value.status == 422

    patched.data = {"c": "3"}
    replaced = v1.replace_namespaced_config_map("c", "default", patched)
    assert replaced.data == {"c": "3"}
    patched.data = {"d": "4"}  # patched still carries the old resourceVersion
    with pytest.raises(ApiException) as e:
        v1.replace_namespaced_config_map("c", "default", patched)
    assert e.value.status == 409
    assert v1.read_namespaced_config_map("c", "default").data == {"c": "3"}


def test_delete_with_finalizers_and_garbage_collection(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    pod = v1.create_namespaced_pod(
        "default", {**_pod("p"), "metadata": {"name": "p", "finalizers": ["ehb/test"]}}
    )
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod.metadata.uid}
    v1.create_namespaced_config_map(
        "default", {"metadata": {"name": "owned", "ownerReferences": [owner]}}
    )

    v1.delete_namespaced_pod("p", "default")
    terminating = v1.read_namespaced_pod("p", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert v1.read_namespaced_config_map("owned", "default")  # the owner is not gone yet

    v1.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("p", "default")
    assert e.value.status == 404
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_config_map("owned", "default")
    assert e.value.status == 404

    v1.create_namespaced_config_map("default", {"metadata": {"name": "plain"}})
    status = v1.delete_namespaced_config_map("plain", "default")
    assert status["status"] == "Success"  # a Status for kinds that are gone at once


def test_status_subresource_of_a_custom_resource(
    kube_client: Any, ehc_spec: dict[str, Any]
) -> None:
    api = kubernetes.client.CustomObjectsApi(kube_client)
    args = ("eventhub-balancer.dev", "v1alpha1", "default", "eventhubconsumers")
    body = {"apiVersion": "eventhub-balancer.dev/v1alpha1", "kind": "EventHubConsumer",
            "metadata": {"name": "orders"}, "spec": ehc_spec,
            "status": {"partitionCount": 4}}  # fmt: skip
    created = api.create_namespaced_custom_object(*args, body)
    assert "status" not in created
    assert created["spec"]["balancing"]["intervalSeconds"] == 5  # defaulted by the CRD schema
    api.patch_namespaced_custom_object_status(*args, "orders", {"status": {"partitionCount": 4}})
    api.patch_namespaced_custom_object(*args, "orders", {"status": {"partitionCount": 99}})
    current = api.get_namespaced_custom_object(*args, "orders")
    assert current["status"]["partitionCount"] == 4
    assert current["metadata"]["generation"] == 1
    api.patch_namespaced_custom_object(*args, "orders", {"spec": {"startPosition": "latest"}})
    assert api.get_namespaced_custom_object(*args, "orders")["metadata"]["generation"] == 2


def test_watch_streams_changes_and_resumes(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    v1.create_namespaced_config_map(
        "default", {"metadata": {"name": "before", "labels": {"w": "1"}}}
    )
    start = v1.list_namespaced_config_map("default").metadata.resource_version

    def writer() -> None:
        v1.create_namespaced_config_map(
            "default", {"metadata": {"name": "x", "labels": {"w": "1"}}}
        )
        v1.create_namespaced_config_map("default", {"metadata": {"name": "unlabelled"}})
        v1.patch_namespaced_config_map("x", "default", {"data": {"k": "v"}})
        v1.patch_namespaced_config_map("x", "default", {"metadata": {"labels": {"w": None}}})
        v1.delete_namespaced_config_map("before", "default")

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[tuple[str, str]] = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(v1.list_namespaced_config_map, "default", label_selector="w=1",
                              resource_version=start, timeout_seconds=5):  # fmt: skip
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 4:
            watch.stop()
    thread.join(5)
    # Leaving the selection shows as DELETED, as on a real API server.
    assert seen == [("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x"), ("DELETED", "before")]

    # Without a resourceVersion the watch starts with the current objects.
    first = next(
        iter(
            kubernetes.watch.Watch().stream(
                v1.list_namespaced_config_map, "default", timeout_seconds=2
            )
        )
    )
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "unlabelled")


def test_watch_timeout_ends_the_stream(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    events = list(
        kubernetes.watch.Watch().stream(v1.list_namespaced_secret, "default", timeout_seconds=1)
    )
    assert events == []


def test_discovery(kube_client: Any) -> None:
    core = kubernetes.client.CoreV1Api(kube_client).get_api_resources()
    pods = next(r for r in core.resources if r.name == "pods")
    assert (pods.kind, pods.namespaced) == ("Pod", True)
    assert "pods/status" in {r.name for r in core.resources}
    groups = {g.name for g in kubernetes.client.ApisApi(kube_client).get_api_versions().groups}
    assert {"coordination.k8s.io", "kopf.dev", "eventhub-balancer.dev"} <= groups
    version = kubernetes.client.VersionApi(kube_client).get_code()
    assert version.major == "1"


def test_crd_created_at_run_time(kube_client: Any) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.test.dev"},
        "spec": {
            "group": "test.dev",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip
    kubernetes.client.ApiextensionsV1Api(kube_client).create_custom_resource_definition(crd)
    api = kubernetes.client.CustomObjectsApi(kube_client)
    body = {"apiVersion": "test.dev/v1", "kind": "Gadget", "metadata": {"name": "g"}, "x": 1}
    created = api.create_cluster_custom_object("test.dev", "v1", "gadgets", body)
    assert created["x"] == 1
    assert "namespace" not in created["metadata"]
    listed = api.list_cluster_custom_object("test.dev", "v1", "gadgets")
    assert [item["metadata"]["name"] for item in listed["items"]] == ["g"]

    kubernetes.client.ApiextensionsV1Api(kube_client).delete_custom_resource_definition(
        "gadgets.test.dev"
    )
    with pytest.raises(ApiException) as e:
        api.list_cluster_custom_object("test.dev", "v1", "gadgets")
    assert e.value.status == 404


def test_list_pages(kube_client: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(kube_client)
    for i in range(5):
        v1.create_namespaced_config_map("paged", {"metadata": {"name": f"c{i}"}})
    first = v1.list_namespaced_config_map("paged", limit=2)
    second = v1.list_namespaced_config_map("paged", limit=2, _continue=first.metadata._continue)
    third = v1.list_namespaced_config_map("paged", limit=2, _continue=second.metadata._continue)
    names = [c.metadata.name for page in (first, second, third) for c in page.items]
    assert names == ["c0", "c1", "c2", "c3", "c4"]
    assert not third.metadata._continue


def test_faults_can_be_injected_through_kmock(local_kube: Any, kube_client: Any) -> None:
    import kmock

    v1 = kubernetes.client.CoreV1Api(kube_client)
    local_kube.handler["get", kmock.resource("v1/pods"), kmock.name("flaky")][:1] << 503
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("flaky", "default")
    assert e.value.status == 503
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("flaky", "default")  # the injected fault is used up
    assert e.value.status == 404


def test_resource_requests_skip_the_reaction_scan_until_a_reaction_is_added(
    local_kube: Any, kube_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kmock

    scanned: list[str] = []
    scan = kmock.KubernetesScaffold._handle

    async def counted(self: Any, request: Any) -> Any:
        scanned.append(str(request.url.path))
        return await scan(self, request)

    monkeypatch.setattr(kmock.KubernetesScaffold, "_handle", counted)
    v1 = kubernetes.client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("shop", _pod("a", app="orders"))
    assert [p.metadata.name for p in v1.list_namespaced_pod("shop").items] == ["a"]
    assert scanned == []  # served directly, as the scan would have
    kubernetes.client.VersionApi(kube_client).get_code()
    assert scanned == ["/version/"]  # discovery goes through the scan
    local_kube.handler["get", kmock.resource("v1/pods"), kmock.name("flaky")][:1] << 503
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("flaky", "shop")
    assert e.value.status == 503  # with a reaction added, every request is scanned
    assert v1.read_namespaced_pod("a", "shop").metadata.name == "a"
    assert scanned[1:] == ["/api/v1/namespaces/shop/pods/flaky", "/api/v1/namespaces/shop/pods/a"]
