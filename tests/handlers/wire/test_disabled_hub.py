"""A consumer whose Event Hub its owner disabled, with the operator on the local stack: Event
Hubs refuses every receiver on it (``com.microsoft:entity-disabled``, as the emulator's
`disable_hub` does), so its status says so, and all turns True once the hub is Active."""

from __future__ import annotations

from tests.support.fixtures.operator import Stack, wait_for


def test_a_disabled_hub_is_said_by_the_status_until_it_is_active(
    operator_stack: Stack, namespace: str
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    for name in ("c-0", "c-1"):
        stack.pod(ns, name)
    stack.emulator.disable_hub("orders")
    stack.start_operator(namespaces=(ns,))

    wait_for(
        lambda: stack.condition(ns, "EventHubReachable").get("status") == "False",
        what="EventHubReachable False",
    )
    reachable = stack.condition(ns, "EventHubReachable")
    assert reachable["reason"] == "EventHubNotFound"
    assert reachable["message"].startswith(
        "Event Hub 'orders' in shop.servicebus.windows.net is disabled (Event Hubs: "
    )
    assert "set its status to Active" in reachable["message"]

    stack.emulator.disable_hub("orders", False)
    wait_for(
        lambda: stack.condition(ns, "EventHubReachable").get("status") == "True",
        timeout=30,
        what="the hub Active again",
    )
