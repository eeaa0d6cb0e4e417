"""`adapters.kubeapi` against the local API server: patches, error mapping, write counting."""

from __future__ import annotations

import asyncio
import base64
import logging
import threading

import kmock
import pytest
import urllib3.exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI

NS = "adapters"


def configmap(name: str, data: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_merge_patch_sets_and_removes_keys_and_counts_writes(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    created = await operator_api.create_configmap(
        namespace=NS, body=configmap("m", {"a": "1", "b": "2"})
    )
    patched = await operator_api.patch_configmap(
        namespace=NS,
        name="m",
        patch={"data": {"a": None, "c": "3"}, "metadata": {"annotations": {"x": "y"}}},
        resource_version=created["metadata"]["resourceVersion"],
    )
    assert patched["data"] == {"b": "2", "c": "3"}
    stored = local_kube.get_object("v1/configmaps", "m", namespace=NS) or {}
    assert stored["data"] == {"b": "2", "c": "3"}
    assert stored["metadata"]["annotations"] == {"x": "y"}
    await operator_api.patch_pod_annotations(namespace=NS, name="absent", annotations={"k": "v"})
    await operator_api.delete_configmap(namespace=NS, name="m", uid=stored["metadata"]["uid"])
    await operator_api.delete_configmap(namespace=NS, name="m", uid=None)  # gone already: fine
    assert local_kube.get_object("v1/configmaps", "m", namespace=NS) is None
    # Every write is counted, also those that found nothing to change.
    assert operator_api.writes == {"configmap": 4, "pod": 1}


async def test_stale_resource_version_is_a_conflict(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    created = await operator_api.create_configmap(namespace=NS, body=configmap("m", {"a": "1"}))
    local_kube.patch_object("v1/configmaps", "m", {"data": {"a": "pod"}}, namespace=NS)
    with pytest.raises(errors.Conflict) as e:
        await operator_api.patch_configmap(
            namespace=NS,
            name="m",
            patch={"data": {"a": "operator"}},
            resource_version=created["metadata"]["resourceVersion"],
        )
    assert e.value.reason == "Conflict"
    assert isinstance(e.value, errors.TransientError)
    stored = local_kube.get_object("v1/configmaps", "m", namespace=NS) or {}
    assert stored["data"] == {"a": "pod"}  # the other writer's change survived
    # Without a precondition the same patch goes through.
    await operator_api.patch_configmap(
        namespace=NS, name="m", patch={"data": {"a": "operator"}}, resource_version=None
    )
    stored = local_kube.get_object("v1/configmaps", "m", namespace=NS) or {}
    assert stored["data"] == {"a": "operator"}


async def test_data_replaced_under_its_uid_and_generation_whatever_the_annotations_did(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    created = await operator_api.create_configmap(
        namespace=NS, body=configmap("m", {"generation": "3", "partitions": "old", "x": "1"})
    )
    uid = created["metadata"]["uid"]
    # A pod's acknowledgement moves the resourceVersion, not the data: no conflict.
    local_kube.patch_object(
        "v1/configmaps", "m", {"metadata": {"annotations": {"ack": "3"}}}, namespace=NS
    )
    replaced = await operator_api.replace_configmap_data(
        namespace=NS,
        name="m",
        uid=uid,
        generation="3",
        data={"generation": "4", "partitions": "new"},
    )
    assert replaced["data"] == {"generation": "4", "partitions": "new"}  # "x" is gone
    assert replaced["metadata"]["annotations"] == {"ack": "3"}
    # Another writer's data (a higher generation), or another object under the name: Conflict,
    # and nothing written.
    for generation, wanted_uid in (("3", uid), ("4", "another-uid")):
        with pytest.raises(errors.Conflict):
            await operator_api.replace_configmap_data(
                namespace=NS,
                name="m",
                uid=wanted_uid,
                generation=generation,
                data={"generation": "5", "partitions": "lost"},
            )
    stored = local_kube.get_object("v1/configmaps", "m", namespace=NS) or {}
    assert stored["data"] == {"generation": "4", "partitions": "new"}
    with pytest.raises(errors.NotFound):
        await operator_api.replace_configmap_data(
            namespace=NS, name="absent", uid=uid, generation="1", data={"generation": "2"}
        )


async def test_not_found_and_secrets(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    with pytest.raises(errors.NotFound) as missing:
        await operator_api.get_consumer(namespace=NS, name="nobody")
    assert missing.value.reason == "NotFound"
    with pytest.raises(errors.SecretNotFound) as no_secret:
        await operator_api.read_secret_key(namespace=NS, name="eh", key="cs")
    assert no_secret.value.reason == "SecretNotFound"
    assert "Secret adapters/eh not found" in str(no_secret.value)
    value = "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s3cr3t"
    local_kube.create_object(
        "v1/secrets",
        {"metadata": {"name": "eh"}, "data": {"cs": base64.b64encode(value.encode()).decode()}},
        namespace=NS,
    )
    assert await operator_api.read_secret_key(namespace=NS, name="eh", key="cs") == value
    with pytest.raises(errors.SecretNotFound) as no_key:
        await operator_api.read_secret_key(namespace=NS, name="eh", key="other")
    assert no_key.value.missing_key
    assert "s3cr3t" not in str(no_key.value)
    assert operator_api.writes == {}  # reads are not writes


async def test_forbidden_and_unavailable_are_mapped(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    local_kube.handler["list", kmock.resource("v1/pods")][:1] << 403
    with pytest.raises(errors.Forbidden) as forbidden:
        await operator_api.list_pods(namespace=NS, label_selector="app=x")
    assert forbidden.value.reason == "Forbidden"
    assert "ServiceAccount" in str(forbidden.value)
    assert await operator_api.list_pods(namespace=NS, label_selector="app=x") == []  # fault used up
    local_kube.handler["list", kmock.resource("v1/configmaps")][:1] << 503
    with pytest.raises(errors.ApiUnavailable) as unavailable:
        await operator_api.list_configmaps(namespace=NS, label_selector="app=x")
    assert unavailable.value.reason == "ApiUnavailable"


async def test_many_reads_at_once_reuse_the_pools_connections(
    operator_api: kubeapi.KubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    # Each body is read in the worker thread that made the call, and its connection given back
    # there: read later on the loop, the connections of the answers waiting to be read were
    # out of the pool meanwhile, the workers opened more, and the pool discarded them with a
    # warning each (hundreds in a benchmark at 300 consumers).
    with caplog.at_level(logging.WARNING, logger="urllib3"):
        listed = await asyncio.gather(
            *(operator_api.list_pods(namespace=NS, label_selector="app=x") for _ in range(200))
        )
    assert listed == [[]] * 200
    assert not [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()]


class BrokenBody:
    """An answer whose connection breaks while its body is read."""

    def __init__(self) -> None:
        self.thread = ""
        self.released = False

    @property
    def data(self) -> bytes:
        self.thread = threading.current_thread().name
        raise urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")

    def release_conn(self) -> None:
        self.released = True


async def test_a_body_that_breaks_off_is_an_unavailable_api(operator_api: kubeapi.KubeAPI) -> None:
    answer = BrokenBody()
    with pytest.raises(errors.ApiUnavailable) as e:
        await operator_api._call("pods in adapters", lambda **_: answer)
    assert "IncompleteRead" in str(e.value)
    assert answer.thread.startswith("kubeapi")  # read in the worker, not on the loop
    assert answer.released


async def test_the_managed_configmaps_of_a_namespace_are_listed_with_the_listings_version(
    operator_api: kubeapi.KubeAPI,
) -> None:
    """The relisting's LIST (`handlers.cache.relisting`): the operator's ConfigMaps of every
    consumer in the namespace, nothing else, and a version to resync the rosters against."""
    ns = "managed-listing"
    managed = {configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY}
    for name, labels in (("a", managed), ("b", managed), ("other", {"app": "x"})):
        body = configmap(name, {"k": "v"})
        body["metadata"] = {"name": name, "labels": labels}
        await operator_api.create_configmap(namespace=ns, body=body)
    listing = await operator_api.list_managed_configmaps(namespace=ns)
    assert sorted(item["metadata"]["name"] for item in listing.items) == ["a", "b"]
    versions = [int(item["metadata"]["resourceVersion"]) for item in listing.items]
    assert int(listing.metadata["resourceVersion"]) >= max(versions)
    assert (await operator_api.list_managed_configmaps(namespace="empty-namespace")).items == ()
