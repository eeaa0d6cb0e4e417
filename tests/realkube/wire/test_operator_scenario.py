"""The operator on the real control plane, under its own ServiceAccount and the chart's RBAC.

The chart is rendered with its defaults (the consumer's namespace opted in, as its users
opt in theirs); its ServiceAccount, roles, bindings and admission
policies are applied with the real kubectl, and the operator runs with a token of that
ServiceAccount and no other right. Through join, scale-out, scale-in, a deletion and the
partition count's growth, every request it makes must be allowed by the real RBAC
authorizer, and every write must pass the real admission chain: a forbidden request or a
refused write would stall the scenario.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventhub_balancer.contracts import labelselectors
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.handlers.wire import test_dead_letter_events
from tests.support import charts, loading
from tests.support.fixtures.operator import HUB, ConsumerDouble, Stack, wait_for
from tests.support.fixtures.realkube import Kubectl

#: What of the chart is applied here: who the operator is, what it may do, and the policies
#: that keep tenants' pods to their own acknowledgements. Its Deployment is not: the operator
#: runs in this process, with the same identity.
APPLIED_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
#: The consumer's namespace, opted in for the operator's Secret reads.
NAMESPACE = "shop"
#: The waits here: a cycle is 2 s; the real server and the operator share 2 cores.
WAIT_S = 30.0
#: The namespace of the ``--pod-selector`` test, opted in as ``shop`` is.
SCOPED_NAMESPACE = "shop-scoped"
#: The namespace of the test of the batches set aside.
ASIDE_NAMESPACE = "shop-aside"
#: The label the consumer chart's pods carry, which ``--pod-selector`` is documented with.
PART_OF, OURS = labelselectors.CONSUMER_POD_LABEL


def operator_identity(
    kube: RealControlPlane,
    kubectl: Kubectl,
    folder: Path,
    *,
    tenants: tuple[str, ...],
    values: Mapping[str, Any] | None = None,
    kinds: tuple[str, ...] = APPLIED_KINDS,
) -> tuple[Path, list[dict[str, Any]]]:
    """Render the chart (its defaults, ``values`` over them, and ``tenants`` opted in, as
    its users opt in the namespaces whose Secrets the operator reads), apply its identity and
    policies, and return a kubeconfig that is its ServiceAccount, and what was applied."""
    rendered = charts.render(
        loading.CHART_DIR,
        {**(values or {}), "tenantNamespaces": list(tenants)},
        name=loading.RELEASE,
        namespace=loading.RELEASE_NAMESPACE,
    )
    documents = [d for d in charts.documents(rendered) if d["kind"] in kinds]
    (account,) = [d for d in documents if d["kind"] == "ServiceAccount"]
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in (loading.RELEASE_NAMESPACE, *tenants)
    ]
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(namespaces))
    for document in documents:
        # As helm install does: the release's namespace where a template names none.
        document.setdefault("metadata", {}).setdefault("namespace", loading.RELEASE_NAMESPACE)
    kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all([d for d in documents if d["kind"] != "Namespace"]),
    )
    kubeconfig = kube.service_account_kubeconfig(
        folder / "operator.kubeconfig",
        namespace=loading.RELEASE_NAMESPACE,
        name=account["metadata"]["name"],
    )
    return kubeconfig, documents


@pytest.fixture
def real_stack(
    real_kube: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path
) -> Iterator[Stack]:
    yield from stack_in(real_kube, real_kubectl, tmp_path, NAMESPACE)


@pytest.fixture
def scoped_stack(
    real_kube: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path
) -> Iterator[Stack]:
    """A stack of its own namespace: the control plane is the session's, and the scenario
    above leaves its objects in ``shop``."""
    yield from stack_in(real_kube, real_kubectl, tmp_path, SCOPED_NAMESPACE)


@pytest.fixture
def aside_stack(
    real_kube: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path
) -> Iterator[Stack]:
    """A stack of its own namespace, for the batches set aside."""
    yield from stack_in(real_kube, real_kubectl, tmp_path, ASIDE_NAMESPACE)


def stack_in(
    real_kube: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path, namespace: str
) -> Iterator[Stack]:
    kubeconfig, _ = operator_identity(real_kube, real_kubectl, tmp_path, tenants=(namespace,))
    emulator = EventHubsEmulator(hubs={HUB: 32})
    emulator.start_in_thread()
    stack = Stack(real_kube, emulator, kubeconfig)  # type: ignore[arg-type]
    try:
        yield stack
    finally:
        for operator in list(stack.operators):
            operator.stop()
        emulator.stop_in_thread()


def shares(stack: Stack, ns: str) -> list[int]:
    return sorted(stack.counts(ns).values())


def test_join_scale_out_scale_in_deletion_and_growth(
    real_stack: Stack, real_kubectl: Kubectl
) -> None:
    stack, ns = real_stack, NAMESPACE
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(4):
        stack.pod(ns, f"c-{i}")
    # As the chart's defaults run it: every namespace, no pod annotations (annotatePods).
    stack.start_operator(clusterwide=True, refresh_seconds=1.0)

    with ConsumerDouble(stack.kube, ns) as double:  # type: ignore[arg-type]
        wait_for(
            lambda: shares(stack, ns) == [8, 8, 8, 8] and stack.balanced(ns),
            timeout=WAIT_S,
            what="join: 4 x 8",
        )
        assert set(stack.epochs(ns).values()) == {1}

        for i in range(4, 8):
            stack.pod(ns, f"c-{i}")
        wait_for(
            lambda: shares(stack, ns) == [4] * 8 and stack.balanced(ns),
            timeout=WAIT_S,
            what="scale-out: 8 x 4",
        )
        assert sorted(stack.epochs(ns).values()).count(2) == 16
        assert len(double.acknowledged) == 16

        for i in range(3, 8):
            stack.terminate(ns, f"c-{i}")
        wait_for(
            lambda: sorted(stack.counts(ns).get(f"c-{i}", 0) for i in range(3)) == [10, 11, 11],
            timeout=WAIT_S,
            what="scale-in: 3 pods own all",
        )
        for i in range(3, 8):
            stack.delete_pod(ns, f"c-{i}")
        wait_for(
            lambda: set(stack.maps(ns)) == {"c-0", "c-1", "c-2"} and stack.balanced(ns),
            timeout=WAIT_S,
            what="the leavers' ConfigMaps gone",
        )

        before = stack.epochs(ns)
        victim = set(stack.assignment(ns)["c-2"])
        stack.delete_pod(ns, "c-2")
        wait_for(
            lambda: set(stack.maps(ns)) == {"c-0", "c-1"} and sum(stack.counts(ns).values()) == 32,
            timeout=WAIT_S,
            what="deletion: taken over",
        )
        after = stack.epochs(ns)
        assert all(after[p] == before[p] + 1 for p in victim)

        stack.emulator.add_partitions(HUB, 40)
        wait_for(
            lambda: sum(stack.counts(ns).values()) == 40 and stack.balanced(ns),
            timeout=WAIT_S,
            what="growth: 40 partitions",
        )
        assert shares(stack, ns) == [20, 20]
        assert all(stack.epochs(ns)[str(p)] == 1 for p in range(32, 40))
        wait_for(lambda: "PartitionTakenOver" in stack.reasons(ns), what="the take-over Event")


def test_the_operator_has_no_admin_rights(real_stack: Stack, real_kubectl: Kubectl) -> None:
    done = real_kubectl(
        "--kubeconfig",
        str(real_stack.kubeconfig),
        "auth",
        "can-i",
        "delete",
        "namespaces",
        check=False,
    )
    assert done.stdout.strip() == "no"


def test_a_pod_selector_on_the_real_server_keeps_the_other_pods_out(scoped_stack: Stack) -> None:
    """``--pod-selector`` on kube-apiserver: an unlabelled pod of the consumer is no member,
    and a pod that loses the label (the real watch sends it as deleted) leaves its consumer
    and is back once it carries the label again."""
    stack, ns = scoped_stack, SCOPED_NAMESPACE
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}", labels={PART_OF: OURS})
    stack.pod(ns, "c-unlabelled")
    scope = labelselectors.parse_query(labelselectors.CONSUMER_PODS, field="--pod-selector")
    stack.start_operator(clusterwide=True, refresh_seconds=1.0, pod_scope=scope)

    def owners() -> list[str]:
        return sorted(pod for pod, owned in stack.counts(ns).items() if owned)

    def label_c1(value: str | None) -> None:
        patch = {"metadata": {"labels": {PART_OF: value}}}
        stack.kube.patch_object("v1/pods", "c-1", patch, namespace=ns)

    with ConsumerDouble(stack.kube, ns):  # type: ignore[arg-type]
        wait_for(
            lambda: shares(stack, ns) == [16, 16] and owners() == ["c-0", "c-1"],
            timeout=WAIT_S,
            what="2 x 16 over the labelled pods",
        )
        label_c1(None)
        wait_for(lambda: owners() == ["c-0"] and stack.balanced(ns), timeout=WAIT_S, what="c-1 out")
        label_c1(OURS)
        wait_for(
            lambda: owners() == ["c-0", "c-1"] and stack.balanced(ns),
            timeout=WAIT_S,
            what="c-1 back",
        )


def test_a_batch_set_aside_is_told_under_the_real_schema_and_rbac(aside_stack: Stack) -> None:
    """``status.deadLettered`` passes the real API server's CRD schema, and the Warning is
    posted under the chart's RBAC (`tests/handlers/wire/test_dead_letter_events.py`)."""
    aside_stack.start_operator(clusterwide=True, refresh_seconds=1.0)
    test_dead_letter_events.tell_a_batch_set_aside(aside_stack, ASIDE_NAMESPACE)
