"""Two operator replicas active at once against the local API: no epoch is handed out twice.

kopf's peering is no strict leader election: during a rollout, or with peering switched off,
two operators may both run cycles for one consumer. Each has its own watches, rosters and
timing. The preconditions on every write (the CR's resourceVersion on the status, the
ConfigMap's on its patch) make the one that read stale lose its write. The audit reads the
local API server's record of every committed write, never a watch.
"""

from __future__ import annotations

from eventhub_balancer_devstack import epochledgers
from tests.support.fixtures.operator import CR, ConsumerDouble, Stack, wait_for


def shares(stack: Stack, ns: str) -> list[int]:
    return sorted(stack.counts(ns).values())


def test_two_operators_at_once_never_hand_an_epoch_out_twice(
    operator_stack: Stack, namespace: str
) -> None:
    stack, ns = operator_stack, namespace
    stack.kube.record_writes("v1/configmaps", CR)
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(3):
        stack.pod(ns, f"c-{i}")
    one = stack.start_operator(namespaces=(ns,))
    two = stack.start_operator(namespaces=(ns,))
    ledger = epochledgers.EpochLedger()

    def audit() -> None:
        taken = stack.kube.take_writes()
        ledger.feed(epochledgers.Write(type=e.type, body=e.body) for e in taken.events)

    with ConsumerDouble(stack.kube, ns):
        wait_for(lambda: shares(stack, ns) == [10, 11, 11] and stack.balanced(ns), what="3 pods")
        for i in range(3, 6):  # joins, a deletion and a join, back to back
            stack.pod(ns, f"c-{i}")
        stack.delete_pod(ns, "c-0")
        stack.pod(ns, "c-6")
        wait_for(
            lambda: shares(stack, ns) == [5, 5, 5, 5, 6, 6] and stack.balanced(ns),
            what="6 pods",
        )
        stack.delete_pod(ns, "c-1")
        stack.delete_pod(ns, "c-2")
        wait_for(lambda: shares(stack, ns) == [8, 8, 8, 8] and stack.balanced(ns), what="4 pods")
    audit()
    # Which of the two completes cycles is a race: one may lose every write to the other's
    # preconditions, which is the point. Together they balanced the consumer.
    assert one.runtime.cycles_run + two.runtime.cycles_run > 0
    assert ledger.writes > 0
    assert (ledger.epoch_reuse, ledger.epochs_decreased) == (0, 0), ledger.examples
