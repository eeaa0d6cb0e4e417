"""Restarts without reshuffle, epochs that never go back, faults that leave the assignment
alone, several consumers at once, peering, and ``ehb status`` on the local stack."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from eventhub_balancer.contracts import configmaps, podassignments
from tests.support.fixtures.operator import CR, ConsumerDouble, Stack, wait_for


def settle(stack: Stack, ns: str, pods: int) -> None:
    for i in range(pods):
        stack.pod(ns, f"c-{i}")


def test_restart_resumes_with_zero_writes_and_lost_configmaps_keep_epochs(
    operator_stack: Stack, namespace: str
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    settle(stack, ns, 3)
    first = stack.start_operator(namespaces=(ns,))
    wait_for(lambda: sorted(stack.counts(ns).values()) == [10, 11, 11] and stack.balanced(ns))
    time.sleep(1.0)
    steady = dict(first.runtime.kube.writes)
    time.sleep(2.5)  # more than one interval (2 s): a steady state writes nothing
    assert first.runtime.kube.writes == steady
    assignment, epochs = stack.assignment(ns), stack.epochs(ns)
    stack.stop_operator(first)

    second = stack.start_operator(namespaces=(ns,))
    wait_for(lambda: second.runtime.cycles_run >= 2, what="two cycles after restart")
    assert stack.assignment(ns) == assignment
    assert second.runtime.kube.writes == {}

    # Every ConfigMap deleted: rebuilt from the operator's record in the status, the same
    # owners at the same epochs (the pods never stopped owning them), and no epoch goes back.
    for cm in stack.kube.list_objects("v1/configmaps", namespace=ns):
        stack.kube.delete_object("v1/configmaps", cm["metadata"]["name"], namespace=ns)
    wait_for(lambda: len(stack.epochs(ns)) == 32, what="ConfigMaps rebuilt")
    assert stack.assignment(ns) == assignment
    assert stack.epochs(ns) == epochs
    assert all(stack.status(ns)["epochs"][p] >= epochs[p] for p in epochs)


def test_corrupt_configmap_is_repaired(operator_stack: Stack, namespace: str) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    settle(stack, ns, 2)
    stack.start_operator(namespaces=(ns,))
    # Balanced is in the status, which a decision writes before its ConfigMaps: wait for those.
    wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns))
    name = configmaps.configmap_name(consumer="orders", pod="c-0")
    stack.kube.patch_object(
        "v1/configmaps", name, {"data": {"partitions": "{not json", "extra": "x"}}, namespace=ns
    )
    # Only the operator writes a ConfigMap's data: anything else there is put back, as tampering.
    wait_for(lambda: "AssignmentTampered" in stack.reasons(ns), what="tamper event")
    wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns))
    data = stack.maps(ns)["c-0"]["data"]
    assert "extra" not in data
    assert not podassignments.parse_data(data).problems


def test_a_configmap_that_loses_the_operators_label_is_written_anew(
    operator_stack: Stack, namespace: str
) -> None:
    """The ConfigMap watch selects the operator's own by label on the API server: one that
    loses the label leaves it as a deletion, with the labels it had. The pod's ConfigMap is
    written anew: the relabelled one under its name is reported and deleted, not trusted."""
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    settle(stack, ns, 2)
    stack.start_operator(namespaces=(ns,))
    wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns))
    name = configmaps.configmap_name(consumer="orders", pod="c-0")
    before = stack.kube.get_object("v1/configmaps", name, namespace=ns)
    assert before is not None
    stack.kube.patch_object(
        "v1/configmaps",
        name,
        {"metadata": {"labels": {configmaps.LABEL_MANAGED_BY: "someone-else"}}},
        namespace=ns,
    )
    wait_for(lambda: "AssignmentTampered" in stack.reasons(ns), what="tamper event")

    def rewritten() -> bool:
        now = stack.kube.get_object("v1/configmaps", name, namespace=ns)
        return (
            now is not None
            and now["metadata"]["uid"] != before["metadata"]["uid"]
            and now["metadata"]["labels"].get(configmaps.LABEL_MANAGED_BY) == configmaps.MANAGED_BY
        )

    wait_for(rewritten, what="c-0's ConfigMap written anew")
    wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns))


def test_faults_set_conditions_and_keep_the_assignment(
    operator_stack: Stack, namespace: str
) -> None:
    stack, ns = operator_stack, namespace
    # A missing Secret and a selector that matches no pod (on a hub of its own: the same hub
    # and checkpoint location as "orders" below would make "orders" the later, refused one).
    stack.consumer(ns, name="nosecret", secret="missing", app="nobody", hub="nosecrethub")
    stack.start_operator(namespaces=(ns,))
    wait_for(
        lambda: (
            stack.condition(ns, "EventHubReachable", "nosecret").get("reason") == "SecretNotFound"
        )
    )
    assert "Secret" in stack.condition(ns, "EventHubReachable", "nosecret")["message"]
    assert stack.condition(ns, "Ready", "nosecret")["reason"] == "EventHubUnusable"
    wait_for(lambda: "SecretNotFound" in stack.reasons(ns))
    # A wrong hub name.
    stack.secret(ns)
    stack.consumer(ns, name="wronghub", hub="nosuchhub", app="nobody")
    wait_for(
        lambda: (
            stack.condition(ns, "EventHubReachable", "wronghub").get("reason") == "EventHubNotFound"
        ),
        what=f"EventHubNotFound {stack.condition(ns, 'EventHubReachable', 'wronghub')}",
    )
    # Event Hubs unreachable: the assignment stays, pods still fail over.
    stack.consumer(ns, name="orders")
    settle(stack, ns, 2)
    wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns))
    before = stack.assignment(ns)
    stack.emulator.stop_in_thread()
    stack.kube.patch_object(CR, "orders", {"spec": {"eventHub": {"name": "orders2"}}}, namespace=ns)
    # A read that reached the emulator before it stopped says EventHubNotFound, and the next
    # one comes after a doubling backoff (2, 4, 8, 16 s): a generous bound, not a timing one.
    wait_for(
        lambda: stack.condition(ns, "EventHubReachable").get("reason") == "EventHubUnreachable",
        timeout=60,
        what="EventHubReachable False with reason EventHubUnreachable",
    )
    # The owners stay; the new hub name reaches the pods with every epoch one higher.
    wait_for(
        lambda: (
            {
                pod: {p: (e.epoch, e.state) for p, e in parts.items()}
                for pod, parts in stack.assignment(ns).items()
            }
            == {
                pod: {p: (e.epoch + 1, e.state) for p, e in parts.items()}
                for pod, parts in before.items()
            }
        ),
        what="the new coordinates with higher epochs, same owners",
    )
    stack.delete_pod(ns, "c-1")
    wait_for(lambda: stack.counts(ns) == {"c-0": 32}, what="fail-over while unreachable")


def test_two_namespaces_cluster_wide_and_peering(operator_stack: Stack) -> None:
    stack = operator_stack
    for ns in ("alpha", "beta"):
        stack.secret(ns)
        stack.consumer(ns)
        settle(stack, ns, 2)
    stack.kube.create_object("kopf.dev/v1/clusterkopfpeerings", {"metadata": {"name": "ehb"}})
    low = stack.start_operator(clusterwide=True, standalone=False, peering="ehb", priority=1)
    high = stack.start_operator(clusterwide=True, standalone=False, peering="ehb", priority=100)
    with ConsumerDouble(stack.kube, "alpha"), ConsumerDouble(stack.kube, "beta"):
        for ns in ("alpha", "beta"):
            wait_for(
                lambda ns=ns: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns)
            )
    assert low.runtime.kube.writes.get("configmap", 0) == 0
    assert high.runtime.kube.writes.get("configmap", 0) == 4


def test_ehb_status_prints_the_table(operator_stack: Stack, namespace: str) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    settle(stack, ns, 2)
    stack.start_operator(namespaces=(ns,))
    wait_for(lambda: stack.balanced(ns))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "status",
            "-n",
            ns,
            "orders",
            "--kubeconfig",
            str(stack.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "c-0" in out
    assert "Balanced" in out
    # Each pod's partitions as runs, an epoch per run: c-0 holds 0 to 15 at epoch 1.
    assert any(
        line.split()[:5] == ["c-0", "yes", "ready", "0-15", "1"] for line in out.splitlines()
    )
    raw = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "status",
            "-n",
            ns,
            "--json",
            "--kubeconfig",
            str(stack.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert json.loads(raw)[0]["status"]["partitionCount"] == 32
    print(out)
