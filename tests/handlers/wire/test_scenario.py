"""The issue's walk-through on the local stack: 32 partitions, pods 4 -> 8 -> 3, a pod deleted,
a pod NotReady inside and beyond the grace, the partition count growing 32 -> 40."""

from __future__ import annotations

import time

import pytest

from eventhub_balancer.contracts import configmaps
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for

pytestmark = pytest.mark.slow


def shares(stack: Stack, ns: str) -> list[int]:
    return sorted(stack.counts(ns).values())


def test_scale_fail_and_grow(operator_stack: Stack, namespace: str) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(4):
        stack.pod(ns, f"c-{i}")
    stack.start_operator(namespaces=(ns,), refresh_seconds=1.0, annotate_pods=True)

    with ConsumerDouble(stack.kube, ns) as double:
        # 4 pods: 8 each, epoch 1 everywhere, annotations on the pods, status and events.
        wait_for(lambda: shares(stack, ns) == [8, 8, 8, 8] and stack.balanced(ns), what="4 x 8")
        assert set(stack.epochs(ns).values()) == {1}
        owned = ",".join(sorted(stack.assignment(ns)["c-0"], key=int))

        def annotated() -> str | None:
            pod = stack.kube.get_object("v1/pods", "c-0", namespace=ns) or {}
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            return annotations.get(configmaps.POD_ANNOTATION_PARTITIONS)

        # The pods' annotations go out with the cycle's second step of writes, after the
        # ConfigMaps that gain: balanced may come a moment before them.
        wait_for(lambda: annotated() == owned, what="c-0's partitions in its annotation")
        pod = stack.kube.get_object("v1/pods", "c-0", namespace=ns) or {}
        status = stack.status(ns)
        assert status["partitionCount"] == 32
        assert status["memberCount"] == 4
        assert status["movesTotal"] == 32
        assert len(status["epochs"]) == 32
        # The Events are posted beside the cycles, a moment after the writes they are about.
        wait_for(lambda: "PartitionAssigned" in stack.reasons(ns), what="the assign event")
        cm = stack.maps(ns)["c-0"]
        assert (
            cm["metadata"]["annotations"][configmaps.ANNOTATION_POD_UID] == pod["metadata"]["uid"]
        )
        assert cm["metadata"]["ownerReferences"][0]["name"] == "c-0"

        # 4 -> 8: ordered hand-offs, acknowledged by the double; moved partitions get epoch 2.
        for i in range(4, 8):
            stack.pod(ns, f"c-{i}")
        wait_for(lambda: shares(stack, ns) == [4] * 8 and stack.balanced(ns), what="8 x 4")
        epochs = stack.epochs(ns)
        assert sorted(epochs.values()).count(2) == 16
        assert sorted(epochs.values()).count(1) == 16
        assert {p for p, _, _ in double.acknowledged} == {"c-0", "c-1", "c-2", "c-3"}
        assert len(double.acknowledged) == 16
        wait_for(
            lambda: {"PartitionRevoked", "PartitionHandedOff"} <= stack.reasons(ns),
            what="the hand-off events",
        )
        assert stack.status(ns)["handoffs"] == []

        # 8 -> 3: five pods terminate (graceful), their partitions are drained by hand-off.
        for i in range(3, 8):
            stack.terminate(ns, f"c-{i}")
        wait_for(
            lambda: sorted(stack.counts(ns).get(f"c-{i}", 0) for i in range(3)) == [10, 11, 11],
            what="3 pods own all",
        )
        for i in range(3, 8):
            stack.delete_pod(ns, f"c-{i}")
        wait_for(
            lambda: set(stack.maps(ns)) == {"c-0", "c-1", "c-2"}, what="stale ConfigMaps deleted"
        )
        wait_for(lambda: stack.balanced(ns), what=f"balanced on 3 {stack.status(ns)}")
        before = stack.epochs(ns)

        # A pod deleted outright: its partitions are taken over, epoch + 1 (how fast is for
        # `ehb bench operator`, not for a test on shared cores).
        victim = set(stack.assignment(ns)["c-2"])
        stack.delete_pod(ns, "c-2")
        wait_for(
            lambda: set(stack.maps(ns)) == {"c-0", "c-1"} and sum(stack.counts(ns).values()) == 32,
            timeout=15,
            what="take-over",
        )
        after = stack.epochs(ns)
        assert all(after[p] == before[p] + 1 for p in victim)
        wait_for(lambda: "PartitionTakenOver" in stack.reasons(ns), what="take-over event")

        # NotReady within the grace (3 s): kept. Beyond: moved to the other pod.
        stack.pod(ns, "c-3")
        wait_for(lambda: shares(stack, ns) == [10, 11, 11] and stack.balanced(ns), what="3 again")
        kept = set(stack.assignment(ns)["c-1"])
        stack.set_ready(ns, "c-1", False)
        time.sleep(1.5)
        assert set(stack.assignment(ns)["c-1"]) == kept
        assert stack.condition(ns, "Ready")["status"] == "False"
        wait_for(lambda: not stack.assignment(ns).get("c-1"), timeout=8, what="grace expiry")
        assert sorted(stack.counts(ns).values()) == [0, 16, 16]
        stack.set_ready(ns, "c-1", True)
        wait_for(lambda: shares(stack, ns) == [10, 11, 11] and stack.balanced(ns), what="c-1 back")

        # 32 -> 40 partitions: the new ones are assigned at once (cache refresh 1 s here).
        stack.emulator.add_partitions("orders", 40)
        wait_for(lambda: sum(stack.counts(ns).values()) == 40 and stack.balanced(ns), what="40")
        assert shares(stack, ns) == [13, 13, 14]
        wait_for(lambda: stack.status(ns)["partitionCount"] == 40, what="status shows 40")
        assert all(stack.epochs(ns)[str(p)] == 1 for p in range(32, 40))
