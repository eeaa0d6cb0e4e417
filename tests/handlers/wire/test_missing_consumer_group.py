"""A consumer whose consumer group does not exist, with the operator on the local stack: the
status says so in one condition and Ready is False (as ``kubectl get`` shows it), one Warning
is posted, and all turns True once the group is created."""

from __future__ import annotations

import os
import subprocess
import time

from eventhub_balancer.contracts import partitionreports, podassignments
from tests.support.fixtures import kube as kubefixtures
from tests.support.fixtures.operator import CR, Stack, wait_for


def kubectl_get(stack: Stack, ns: str) -> list[list[str]]:
    """``kubectl -n NS get ehc -o wide``, split into words per line."""
    binary = kubefixtures.kubectl_binary()
    assert binary is not None, "no kubectl"
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig), "HOME": str(stack.kubeconfig.parent)}
    shown = subprocess.run(
        [binary, "-n", ns, "get", "ehc", "-o", "wide"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    print(shown.stdout)  # the sample the docs and the issue quote
    return [line.split() for line in shown.stdout.splitlines()]


def test_a_missing_group_is_one_condition_one_warning_and_ready_false(
    operator_stack: Stack, namespace: str
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    stack.kube.patch_object(
        CR, "orders", {"spec": {"eventHub": {"consumerGroup": "analytics"}}}, namespace=ns
    )
    for name in ("c-0", "c-1"):
        stack.pod(ns, name)
    stack.start_operator(namespaces=(ns,))

    wait_for(
        lambda: stack.condition(ns, "EventHubReachable").get("reason") == "ConsumerGroupNotFound",
        what="EventHubReachable: ConsumerGroupNotFound",
    )
    reachable = stack.condition(ns, "EventHubReachable")
    assert reachable["status"] == "False"
    assert reachable["message"].startswith(
        "consumer group 'analytics' of Event Hub 'orders' in shop.servicebus.windows.net does "
        "not exist: create it, or fix spec.eventHub.consumerGroup"
    )
    wait_for(lambda: stack.condition(ns, "Ready").get("reason") == "EventHubUnusable")
    time.sleep(5)  # a few cycles and retries: nothing is said twice
    warnings = [e["reason"] for e in stack.events(ns) if e.get("type") == "Warning"]
    assert warnings.count("ConsumerGroupNotFound") == 1, warnings
    assert len(warnings) == len(set(warnings)), warnings  # each Warning posted once
    header, row = kubectl_get(stack, ns)
    assert header == ["NAME", "PARTITIONS", "PODS", "FAILING", "BALANCED", "READY", "REASON", "AGE"]
    assert row[:7] == ["orders", "32", "2", "0", "True", "False", "EventHubUnusable"]

    # The pods report what their receivers meet, as the consumer runtime does.
    error = reachable["message"].split(" (keeping")[0]
    for cm in stack.maps(ns).values():
        owned = podassignments.parse_data(cm["data"]).partitions
        reports: dict[str, partitionreports.PartitionReport] = {
            p: partitionreports.PartitionReport(
                partition=p, epoch=e.epoch, state="failing", attempts=3, error=error
            )
            for p, e in owned.items()
        }
        stack.kube.patch_object(
            "v1/configmaps",
            cm["metadata"]["name"],
            {
                "metadata": {
                    "annotations": {partitionreports.ANNOTATION: partitionreports.build(reports)}
                }
            },
            namespace=ns,
        )
    wait_for(lambda: stack.status(ns).get("failingCount") == 32, what="32 partitions failing")
    failing = stack.condition(ns, "PartitionsFailing")
    print(failing["message"])
    assert failing["message"].startswith(
        "32 partitions in trouble (32 failing): 0-31 on c-0, c-1 "
        "failing after 3 attempts: consumer group 'analytics'"
    )
    assert len(failing["message"]) <= 1000
    _, row = kubectl_get(stack, ns)
    assert row[:7] == ["orders", "32", "2", "32", "True", "False", "EventHubUnusable"]

    stack.emulator.create_consumer_group("orders", "analytics")
    wait_for(
        lambda: stack.condition(ns, "EventHubReachable").get("status") == "True",
        timeout=30,
        what="the group found",
    )
    wait_for(lambda: "EventHubReachable" in stack.reasons(ns), what="the Normal Event")


def test_a_hub_never_listed_says_its_cause_in_the_reason_column_and_no_partition_count(
    operator_stack: Stack, namespace: str
) -> None:
    """A new consumer naming a hub that does not exist printed ``0`` partitions and READY's
    reason ``PartitionsUnknown`` ("could not be read yet: see EventHubReachable"), where a hub
    deleted under a running consumer printed ``EventHubUnusable`` with what to change."""
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns, hub="nosuchhub")
    stack.pod(ns, "c-0")
    stack.start_operator(namespaces=(ns,))
    wait_for(lambda: stack.condition(ns, "Ready").get("reason") == "EventHubUnusable")
    assert stack.condition(ns, "Ready")["message"].startswith(
        "the pods cannot use Event Hubs (EventHubNotFound, see EventHubReachable): Event Hub "
        "'nosuchhub' in shop.servicebus.windows.net does not exist: fix spec.eventHub.name"
    )
    header, row = kubectl_get(stack, ns)
    assert header == ["NAME", "PARTITIONS", "PODS", "FAILING", "BALANCED", "READY", "REASON", "AGE"]
    # PARTITIONS is empty (kubectl prints nothing for a field that is not there): no 0.
    assert row[:6] == ["orders", "1", "0", "False", "False", "EventHubUnusable"]
