"""An older EventHubConsumer of another tenant, edited to name a working consumer's location.

Age was the whole title to a checkpoint location across namespaces: the consumer created first
held it. A tenant rarely lacks a CR older than its victim's, so editing one of them to name the
victim's hub, consumer group and checkpoint container made it the holder at once: the victim,
working until then, was refused (`Conflict`, `LocationShared`) and wrote nothing more, and the
partitions of its next pod to die stayed unprocessed. A consumer that works at what it names
keeps it against any consumer that does not yet work there (`conflicts.Peer.standing`).

The real ``ehb operator`` on the local Kubernetes API, as `test_tenancy_attacks` runs it.
"""

from __future__ import annotations

import time

from eventhub_balancer.reconciling import conflicts
from eventhub_balancer_devstack import clusters
from tests.install.wire.test_tenancy_attacks import (  # the two tenants and their operator
    ACCOUNT,
    REFUSAL_WAIT_S,
    A,
    B,
    balanced_over,
    conflict,
    consumer,
    start,
    tenants,  # noqa: F401  # the fixture, by name
)
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for


def test_an_older_cr_edited_to_name_a_working_location_halts_nothing(tenants: Stack) -> None:  # noqa: F811
    stack = tenants
    # B's CR comes first, at a location of B's own; A's consumer comes later and works.
    consumer(stack, B, "mirror", app="nothing", account_url="https://tenantb.blob.core.windows.net")
    # creationTimestamp has whole seconds: A made in B's second would tie on age, ordered by
    # uid, by chance. A comes at least a second later here, the younger for certain.
    time.sleep(1.1)
    consumer(stack, A, "orders", app="orders")
    for pod in ("a-0", "a-1"):
        stack.pod(A, pod, app="orders")
    operator = start(stack)
    try:
        with ConsumerDouble(stack.kube, A):
            wait_for(lambda: balanced_over(stack, {"a-0", "a-1"}), what="A balanced")
            # B retargets its older CR at A's account: the newcomer to it, whatever its age.
            stack.kube.patch_object(
                clusters.CR,
                "mirror",
                {"spec": {"checkpointStore": {"accountUrl": f"https://{ACCOUNT}"}}},
                namespace=B,
            )
            wait_for(
                lambda: conflict(stack, B, "mirror").get("reason") == conflicts.REASON_SHARED,
                what="B refused",
                timeout=REFUSAL_WAIT_S,
            )
            assert (
                f"EventHubConsumer {A}/orders in another namespace"
                in (conflict(stack, B, "mirror")["message"])
            )
            # A's pod dies: its partitions move at once, as if B had never been edited.
            stack.delete_pod(A, "a-1")
            wait_for(lambda: balanced_over(stack, {"a-0"}), what="A failed over")
            assert conflict(stack, A, "orders").get("status") != "True"
    finally:
        operator.stop()
