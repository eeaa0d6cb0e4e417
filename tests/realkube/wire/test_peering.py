"""Two operator replicas on the real control plane, as the chart runs them with peering.

kopf's peering CRDs (manifests/peering/) and the chart's peering object and RBAC (its
ci/peering-values.yaml) are applied with the real kubectl; two operators with the chart's
identity run at once, one with a higher priority. Through joins and deletions back to back,
only the leader writes ConfigMaps, and the write record of the real server (a watch of every
committed ConfigMap and CR change) shows no epoch handed out twice and none going back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer.adapters import kubeapi
from eventhub_balancer.handlers import kopfkeepalives
from eventhub_balancer_devstack import epochledgers
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.realkube.wire.test_operator_scenario import APPLIED_KINDS, operator_identity
from tests.support import loading
from tests.support.fixtures.operator import CR, HUB, ConsumerDouble, Stack, wait_for
from tests.support.fixtures.realkube import Kubectl

PEERING_VALUES = loading.CHART_DIR / "ci" / "peering-values.yaml"
WAIT_S = 30.0
#: The consumer's namespace, opted in for the operator's Secret reads.
NAMESPACE = "peered"


@pytest.fixture
def peered_stack(
    real_kube: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path
) -> Iterator[Stack]:
    real_kubectl("apply", "-f", str(loading.MANIFESTS_DIR / "peering" / "kopf-peering-crds.yaml"))
    kubeconfig, documents = operator_identity(
        real_kube,
        real_kubectl,
        tmp_path,
        tenants=(NAMESPACE,),
        values=loading.load_values(PEERING_VALUES),
        kinds=(*APPLIED_KINDS, "ClusterKopfPeering"),
    )
    (peering,) = [d for d in documents if d["kind"] == "ClusterKopfPeering"]
    emulator = EventHubsEmulator(hubs={HUB: 32})
    emulator.start_in_thread()
    stack = Stack(real_kube, emulator, kubeconfig)  # type: ignore[arg-type]
    stack.peering = peering["metadata"]["name"]  # type: ignore[attr-defined]
    try:
        yield stack
    finally:
        for operator in list(stack.operators):
            operator.stop()
        emulator.stop_in_thread()


def shares(stack: Stack, ns: str) -> list[int]:
    return sorted(stack.counts(ns).values())


def test_two_peered_replicas_hand_no_epoch_out_twice(peered_stack: Stack) -> None:
    stack, ns = peered_stack, NAMESPACE
    peering = stack.peering  # type: ignore[attr-defined]
    stack.kube.record_writes("v1/configmaps", CR)
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(3):
        stack.pod(ns, f"c-{i}")
    low = stack.start_operator(clusterwide=True, standalone=False, peering=peering, priority=1)
    high = stack.start_operator(clusterwide=True, standalone=False, peering=peering, priority=100)
    ledger = epochledgers.EpochLedger()

    def audit() -> None:
        taken = stack.kube.take_writes()
        ledger.feed(epochledgers.Write(type=e.type, body=e.body) for e in taken.events)

    with ConsumerDouble(stack.kube, ns):  # type: ignore[arg-type]
        wait_for(
            lambda: shares(stack, ns) == [10, 11, 11] and stack.balanced(ns),
            timeout=WAIT_S,
            what="3 pods",
        )
        for i in range(3, 6):
            stack.pod(ns, f"c-{i}")
        stack.delete_pod(ns, "c-0")
        stack.pod(ns, "c-6")
        wait_for(
            lambda: shares(stack, ns) == [5, 5, 5, 5, 6, 6] and stack.balanced(ns),
            timeout=WAIT_S,
            what="6 pods",
        )
        audit()
        stack.delete_pod(ns, "c-1")
        stack.delete_pod(ns, "c-2")
        wait_for(
            lambda: shares(stack, ns) == [8, 8, 8, 8] and stack.balanced(ns),
            timeout=WAIT_S,
            what="4 pods",
        )
    audit()
    assert ledger.writes > 0
    assert (ledger.epoch_reuse, ledger.epochs_decreased) == (0, 0), ledger.examples
    # The leader writes; the other stands by (kopf pauses it on the peering object).
    assert low.runtime.kube.writes.get("configmap", 0) == 0
    assert high.runtime.kube.writes.get("configmap", 0) > 0


def test_a_replica_naming_a_peering_object_that_is_missing_says_so(
    peered_stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """The chart's identity, with a peering name that is not the chart's: the real server
    answers its renewals 404, kopf keeps it paused, and it says so until the object exists."""
    stack = peered_stack
    caplog.set_level(logging.INFO, logger=kopfkeepalives.__name__)
    misspelt = f"{stack.peering}-typo"  # type: ignore[attr-defined]
    replica = stack.start_operator(clusterwide=True, standalone=False, peering=misspelt)
    wait_for(
        lambda: (
            (
                f"the peering object ClusterKopfPeering {misspelt} does not exist: this replica "
                "stays paused, and serves no consumer, until it does; create it "
                "(manifests/peering/peering.yaml, or the chart's peering.enabled) or run the "
                "operator with --standalone"
            )
            in caplog.messages
        ),
        timeout=WAIT_S,
        what="the warning",
    )
    assert replica.runtime.cycles_run == 0
    stack.kube.create_object(
        "kopf.dev/v1/clusterkopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": misspelt}},
    )
    wait_for(
        lambda: (
            (
                f"the peering object ClusterKopfPeering {misspelt} exists: this replica takes "
                "part again"
            )
            in caplog.messages
        ),
        timeout=WAIT_S,
        what="the object said to be back",
    )
    stack.kube.delete_object("kopf.dev/v1/clusterkopfpeerings", misspelt)


def test_discovery_says_which_custom_resources_are_served(peered_stack: Stack) -> None:
    """`KubeAPI.serves`, which ``ehb operator --peering`` asks before kopf starts, as the
    real server answers it with the chart's identity: a group it does not serve is a 404."""
    api = kubeapi.KubeAPI.from_environment(str(peered_stack.kubeconfig))

    def serves(group: str, plural: str) -> bool:
        return asyncio.run(api.serves(group, "v1", plural))

    try:
        assert serves("kopf.dev", "clusterkopfpeerings")
        assert serves("kopf.dev", "kopfpeerings")
        assert not serves("kopf.dev", "kopfpeeringz")
        assert not serves("nothing-here.example.com", "things")
    finally:
        api.close()
