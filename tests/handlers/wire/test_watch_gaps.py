"""What a replica's watch missed while it was paused for a peer: kopf lists again when it
resumes, and keeps in its indexes what vanished meanwhile (no DELETED event ever comes)."""

from __future__ import annotations

from tests.support.fixtures.operator import CR, Stack, wait_for


def test_a_consumer_deleted_while_a_standby_paused_blocks_no_newcomer_once_it_resumes(
    operator_stack: Stack, namespace: str
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns, "orders")
    stack.kube.create_object("kopf.dev/v1/clusterkopfpeerings", {"metadata": {"name": "ehb"}})
    low = stack.start_operator(clusterwide=True, standalone=False, peering="ehb", priority=1)
    wait_for(lambda: low.runtime.cycles_run > 0, what="the first replica at work")
    high = stack.start_operator(clusterwide=True, standalone=False, peering="ehb", priority=100)
    wait_for(lambda: high.runtime.cycles_run > 0, what="the second replica at work")
    wait_for(lambda: not low.runtime.consumers, what="the first replica paused")
    stack.kube.delete_object(CR, "orders", namespace=ns)
    wait_for(lambda: not stack.kube.list_objects(CR, namespace=ns), what="orders gone")
    stack.stop_operator(high)  # the first replica resumes, and lists again
    stack.consumer(ns, "orders-new")  # the same hub, group and checkpoint location
    wait_for(
        lambda: stack.condition(ns, "Ready", "orders-new").get("status") is not None,
        timeout=60,
        what="orders-new decided by the replica resumed",
    )
    wait_for(
        lambda: stack.condition(ns, "Conflict", "orders-new").get("status") != "True",
        timeout=30,  # refused at first, by kopf's index; confirmed gone within 10 s
        what="orders-new not refused for the deleted orders",
    )
    # kopf spawns daemons on events, and the re-list sent none of the deleted consumer.
    assert (ns, "orders") not in low.runtime.consumers
