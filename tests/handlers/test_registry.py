"""The kopf registry the operator runs (`kopfwiring.build_registry`)."""

from __future__ import annotations

import inspect

from eventhub_balancer.handlers import kopfwiring, registering
from tests.support import fakes


def test_the_watch_handlers_run_on_the_event_loop() -> None:
    # kopf runs a plain function in a thread of its executor: the rosters would change under
    # a cycle reading them, and a wake-up set off the loop's thread would not wake the loop.
    operator = registering.Operator(
        kube=fakes.FakeKube(), hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    )
    registry = kopfwiring.build_registry(operator)
    handlers = [
        *registry._indexing.get_all_handlers(),
        *registry._watching.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
    ]
    assert len(handlers) == 8  # four indexes, three watches, the daemon
    assert [h.id for h in handlers if not inspect.iscoroutinefunction(h.fn)] == []


async def test_the_indexes_file_bodies_without_managed_fields() -> None:
    operator = registering.Operator(
        kube=fakes.FakeKube(), hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    )
    registry = kopfwiring.build_registry(operator)
    [index_pod] = [h for h in registry._indexing.get_all_handlers() if "pods" in h.id]
    pod = {
        "metadata": {
            "name": "c-0",
            "namespace": "shop",
            "labels": {"app": "c"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "consumer"}]},
        "status": {"phase": "Running"},
    }
    filed = await index_pod.fn(body=pod, namespace="shop", labels=pod["metadata"]["labels"])
    assert filed
    for body in filed.values():
        assert "managedFields" not in body["metadata"]
        assert body["spec"] == {"nodeName": "node-1"}  # all the operator reads of a pod's spec
        assert body["status"] == {"phase": "Running"}
