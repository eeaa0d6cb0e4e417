"""A ConfigMap created under a pod's fixed name before the operator created it is a squat:
reported (``AssignmentTampered``), deleted by its uid and never trusted; the cycle after
creates the pod's own. Another replica's create of the same ConfigMap is no squat."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, podassignments
from eventhub_balancer.handlers import cycles, memories
from tests.handlers import test_cycles
from tests.support import fakes

T0, NS, NAME = test_cycles.T0, test_cycles.NS, test_cycles.NAME
SPEC = test_cycles.SPEC


def make_kube() -> fakes.FakeKube:
    kube = fakes.FakeKube()
    kube.add_consumer(NS, NAME, SPEC)
    kube.add_secret(
        NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(NS, "blob", {"cs": "UseDevelopmentStorage=true"})
    kube.add_pod(NS, "a", labels={"app": "c"}, since=T0)
    return kube


async def cycle(kube: fakes.FakeKube, memory: memories.Memory, *, now: float) -> cycles.Result:
    return await cycles.run_cycle(
        kube=kube,
        hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
        namespace=NS,
        name=NAME,
        memory=memory,
        now=T0 + datetime.timedelta(seconds=now),
    )


def squat(kube: fakes.FakeKube, body: dict[str, Any]) -> str:
    """Someone creates ``body`` under pod a's fixed name; its uid."""
    name = configmaps.configmap_name(consumer=NAME, pod="a")
    body = copy.deepcopy(body)
    body.setdefault("metadata", {})["name"] = name
    stored = kube._store("configmap", NS, body)
    return str(stored["metadata"]["uid"])


async def test_a_configmap_squatting_the_pods_name_is_reported_deleted_and_replaced() -> None:
    kube = make_kube()
    pod_uid = kube.objects["pod", NS, "a"]["metadata"]["uid"]
    # Unlabelled (the operator's watch never sees it), with forged data and the pod's uid.
    squatter = squat(
        kube,
        {
            "metadata": {"annotations": {configmaps.ANNOTATION_POD_UID: pod_uid}},
            "data": {"pod": "a", "consumer": NAME, "partitions": '{"0":{"epoch":99}}'},
        },
    )
    memory = memories.Memory()
    with pytest.raises(errors.Conflict):
        await cycle(kube, memory, now=0)
    tampered = [e for e in kube.events if e["reason"] == "AssignmentTampered"]
    assert len(tampered) == 1
    assert tampered[0]["type"] == "Warning"
    assert "created by someone else before the operator" in tampered[0]["message"]
    assert "it lacks the operator's labels" in tampered[0]["message"]
    assert ("delete", "configmap", configmaps.configmap_name(consumer=NAME, pod="a")) in kube.calls
    # The next attempt creates the pod's own; nothing of the squatter's is kept.
    await cycle(kube, memory, now=1)
    cm = kube.configmap_of(NS, "a")
    assert cm["metadata"]["uid"] != squatter
    assert cm["metadata"]["labels"][configmaps.LABEL_MANAGED_BY] == configmaps.MANAGED_BY
    assert all(e.epoch == 1 for e in podassignments.parse_data(cm["data"]).partitions.values())


async def test_the_operators_own_configmap_under_the_name_is_no_squat() -> None:
    """Another replica created the very same ConfigMap between this one's read and its
    create: the cycle only fails to read afresh, nothing is reported or deleted."""
    kube = make_kube()
    create = kube.create_configmap

    async def raced(*, namespace: str, body: Any) -> dict[str, Any]:
        await create(namespace=namespace, body=body)  # the other replica's, first
        return await create(namespace=namespace, body=body)

    kube.create_configmap = raced  # type: ignore[method-assign]
    with pytest.raises(errors.Conflict):
        await cycle(kube, memories.Memory(), now=0)
    assert [e for e in kube.events if e["reason"] == "AssignmentTampered"] == []
    assert not [c for c in kube.calls if c[:2] == ("delete", "configmap")]


async def test_the_squat_event_is_handed_over_with_the_cycles_other_events() -> None:
    kube = make_kube()
    squat(kube, {"data": {"pod": "a", "consumer": NAME}})
    handed: list[Any] = []
    with pytest.raises(errors.Conflict):
        await cycles.run_cycle(
            kube=kube,
            hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
            namespace=NS,
            name=NAME,
            memory=memories.Memory(),
            now=T0,
            events=handed.append,
        )
    assert [e["reason"] for e in handed].count("AssignmentTampered") == 1
    assert kube.events == []  # posted by the poster, never by the cycle itself
