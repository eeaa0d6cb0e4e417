"""The status record at 1,024 partitions on a real kube-apiserver: what one write costs it.

Every status patch makes the API server decode, patch, validate and encode the whole object,
managedFields included. With the record's lists kept per entry, the field manager listed
every partition and every pod in managedFields, as large again as the status itself, and a
status patch at 1,024 partitions over 512 pods took 540 ms of the server's CPU instead of
220 ms (docs/scale.md). crds/ marks the fields the operator rewrites whole as atomic; here the
real server is held to tracking each of them as one field.
"""

from __future__ import annotations

import json
from typing import Any

from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.handlers import test_cycles

CONSUMERS = f"{specs.GROUP}/{specs.VERSION}/{specs.PLURAL}"
PARTITIONS = 1024
PODS = 512
#: What the status writer's managedFields entry may weigh: a few hundred bytes for the
#: status's dozen fields. Kept per entry, the status below made it 150 KB.
MANAGED_BYTES = 2048
WHOLE = ("epochs", "assignment", "consumers", "handoffs", "failing")


def full_status(epoch: int) -> dict[str, Any]:
    """A status as the operator writes it at 1,024 partitions over 512 pods."""
    since = "2026-01-01T00:00:00Z"
    return {
        "epochs": {str(p): epoch for p in range(PARTITIONS)},
        "assignment": [
            {
                "partition": str(p),
                "pod": f"orders-{p % PODS}",
                "podUid": f"00000000-0000-0000-0000-{p % PODS:012d}",
                "epoch": epoch,
                "state": "owned",
                "since": since,
            }
            for p in range(PARTITIONS)
        ],
        "consumers": [
            {
                "pod": f"orders-{i}",
                "ready": True,
                "state": "ready",
                "partitions": [str(i), str(i + PODS)],
                "revoking": [],
            }
            for i in range(PODS)
        ],
        "handoffs": [
            {"partition": "7", "from": "orders-7", "epoch": epoch, "since": since},
        ],
        "failing": [
            {"partition": "9", "pod": "orders-9", "epoch": epoch, "state": "parked"},
        ],
        "partitionCount": PARTITIONS,
        "memberCount": PODS,
    }


def test_the_fields_rewritten_whole_are_one_field_each_in_managed_fields(
    real_kube: RealControlPlane,
) -> None:
    real_kube.create_object(
        CONSUMERS,
        {
            "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
            "kind": specs.KIND,
            "metadata": {"name": "orders"},
            "spec": test_cycles.SPEC,
        },
        namespace="shop",
    )
    for epoch in (1, 2):
        body = real_kube.patch_object(
            CONSUMERS,
            "orders",
            {"status": full_status(epoch)},
            namespace="shop",
            subresource="status",
        )
    assert len(body["status"]["assignment"]) == PARTITIONS
    assert set(body["status"]["epochs"].values()) == {2}
    (entry,) = [m for m in body["metadata"]["managedFields"] if m.get("subresource") == "status"]
    fields = entry["fieldsV1"]["f:status"]
    assert {name: fields[f"f:{name}"] for name in WHOLE} == {name: {} for name in WHOLE}
    assert len(json.dumps(entry)) < MANAGED_BYTES
