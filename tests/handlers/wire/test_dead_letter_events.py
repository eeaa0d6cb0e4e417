"""A batch set aside into the dead letters, as the operator tells it on the local stack.

A pod's ConfigMap carries its reports as the runtime writes them (`partitionreports.build`):
first a partition failing, then the trouble over with the batch set aside. The operator
posts ``PartitionFailing``, then ``BatchDeadLettered`` naming the dead letter and a
``PartitionRecovered`` that says the batch went to the dead letters, and keeps the count in
``status.deadLettered``, which the API server takes under the CRD's schema.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps, partitionreports, timestamps
from eventhub_balancer_devstack.clusters import CR
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for

pytestmark = pytest.mark.slow

ERROR = "NotAnOrder: partition {p} sequence number 110: not an order"


def write_reports(stack: Stack, ns: str, pod: str, value: str) -> None:
    """What the pod's runtime writes: its reports' annotation on its own ConfigMap."""
    cm = stack.maps(ns)[pod]
    stack.kube.patch_object(
        "v1/configmaps",
        cm["metadata"]["name"],
        {"metadata": {"annotations": {configmaps.ANNOTATION_PARTITION_REPORTS: value}}},
        namespace=ns,
    )


def messages(stack: Stack, ns: str, reason: str) -> list[str]:
    return [str(e.get("message")) for e in stack.events(ns) if e.get("reason") == reason]


def test_a_batch_set_aside_is_told_and_its_recovery_says_so(
    operator_stack: Stack, namespace: str
) -> None:
    operator_stack.start_operator(namespaces=(namespace,), refresh_seconds=1.0)
    tell_a_batch_set_aside(operator_stack, namespace)


def tell_a_batch_set_aside(stack: Stack, ns: str) -> None:
    """The scenario, with the operator started; on the real control plane too
    (`tests/realkube/wire/test_operator_scenario.py`)."""
    stack.secret(ns)
    stack.consumer(ns)
    stack.kube.patch_object(
        CR,
        "orders",
        {"spec": {"processing": {"maxAttempts": 2, "onFailure": "deadLetter"}}},
        namespace=ns,
    )
    for name in ("c-0", "c-1"):
        stack.pod(ns, name)
    with ConsumerDouble(stack.kube, ns):
        # The status goes first, the ConfigMaps after it.
        wait_for(lambda: stack.balanced(ns) and stack.assignment(ns).get("c-0"), what="c-0's")
        held = stack.assignment(ns)["c-0"]
        p = sorted(held, key=int)[0]
        epoch = held[p].epoch
        error = ERROR.format(p=p)
        failing = partitionreports.PartitionReport(
            partition=p, epoch=epoch, state="failing", attempts=2, error=error
        )
        write_reports(stack, ns, "c-0", partitionreports.build({p: failing}))
        wait_for(lambda: messages(stack, ns, "PartitionFailing"), what="PartitionFailing")

        name = f"{p}/110-114"
        aside = partitionreports.PartitionReport(
            partition=p,
            epoch=epoch,
            state=None,
            set_aside=partitionreports.SetAside(epoch=epoch, batches=1, name=name, error=error),
        )
        write_reports(stack, ns, "c-0", partitionreports.build({p: aside}))
        wait_for(lambda: messages(stack, ns, "BatchDeadLettered"), what="BatchDeadLettered")
        (told,) = messages(stack, ns, "BatchDeadLettered")
        assert told == (
            f"c-0 set a batch of partition {p} aside into the dead letters after "
            f"spec.processing.maxAttempts (2) and goes on after it (ehb deadletters show "
            f"orders {name} -n {ns}): {error} (1 at epoch {epoch})"
        )
        wait_for(lambda: messages(stack, ns, "PartitionRecovered"), what="PartitionRecovered")
        (recovered,) = messages(stack, ns, "PartitionRecovered")
        assert recovered == (
            f"partition {p} on c-0 no longer reported in trouble (was failing): its batch "
            "went to the dead letters after spec.processing.maxAttempts (2) (BatchDeadLettered)"
        )
        entries: list[dict[str, Any]] = stack.status(ns)["deadLettered"]
        told_at = entries[0].pop("toldAt")
        assert timestamps.parse_time(told_at) is not None
        assert entries == [
            {
                "partition": p,
                "pod": "c-0",
                "epoch": epoch,
                "batches": 1,
                "told": 1,
                "name": name,
                "error": error,
            }
        ]
        # Told once: the cycles that follow (one each 2 s, and a re-read each 1 s) post
        # nothing more, and keep the status as it is.
        time.sleep(5)
        assert len(messages(stack, ns, "BatchDeadLettered")) == 1
        assert stack.status(ns)["deadLettered"] == [{**entries[0], "toldAt": told_at}]
        # A second batch within the minute is counted, and told with the next Warning.
        more = dataclasses.replace(
            aside,
            set_aside=partitionreports.SetAside(
                epoch=epoch, batches=2, name=f"{p}/115", error=error
            ),
        )
        write_reports(stack, ns, "c-0", partitionreports.build({p: more}))
        wait_for(lambda: stack.status(ns)["deadLettered"][0]["batches"] == 2, what="2 batches")
        assert stack.status(ns)["deadLettered"][0]["told"] == 1
        assert len(messages(stack, ns, "BatchDeadLettered")) == 1
