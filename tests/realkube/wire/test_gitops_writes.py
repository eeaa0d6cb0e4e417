"""docs/gitops.md, "What each tool's writes do", on a real kube-apiserver.

Argo CD and Flux write the EventHubConsumer in ways `kubectl apply` does not: server-side apply
under their own field manager, re-applied every few minutes to correct drift; Argo CD's
``Replace=true``, a PUT of the object from git that drops kopf's finalizer; and a restore (or
``kubectl apply --server-side --subresource=status``) that writes a ``status:`` block of
another time. The local API server refuses server-side apply, so the real one replays them,
with the operator running, and the test holds the operator to what it writes after each.
"""

from __future__ import annotations

import functools
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.realkube.wire.test_operator_scenario import stack_in
from tests.support.fixtures.operator import CR, HUB, ConsumerDouble, Stack, wait_for
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = "gitops"
FINALIZER = f"{specs.GROUP}/finalizer"
#: Argo CD's field manager for server-side apply.
MANAGER = "argocd-controller"
#: The waits: a cycle is 2 s, and the real server and the operator share 2 cores.
WAIT_S = 10.0
#: How long a write the operator should not make is given to show.
QUIET_S = 1.5


@pytest.fixture
def stack(real_kube: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path) -> Iterator[Stack]:
    yield from stack_in(real_kube, real_kubectl, tmp_path, NAMESPACE)


def manifest() -> dict[str, Any]:
    """The EventHubConsumer as git holds it: no status, no finalizer, no annotation."""
    return {
        "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
        "kind": specs.KIND,
        "metadata": {"name": "orders", "namespace": NAMESPACE},
        "spec": {
            "eventHub": {
                "fullyQualifiedNamespace": "shop.servicebus.windows.net",
                "name": HUB,
                "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
            },
            "checkpointStore": {
                "containerName": "checkpoints",
                "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
            },
            "selector": {"matchLabels": {"app": "consumer"}},
            "balancing": {"intervalSeconds": 2, "podGraceSeconds": 3, "handoffTimeoutSeconds": 10},
        },
    }


def consumer(stack: Stack) -> dict[str, Any]:
    body = stack.kube.get_object(CR, "orders", namespace=NAMESPACE)
    assert body is not None
    return dict(body)


def reasons(stack: Stack) -> Counter[str]:
    return Counter(e["reason"] for e in stack.events(NAMESPACE))


def written(stack: Stack) -> tuple[str, dict[str, str], Counter[str]]:
    """What the operator writes: the CR's resourceVersion, each ConfigMap's, the Events."""
    maps = {pod: cm["metadata"]["resourceVersion"] for pod, cm in stack.maps(NAMESPACE).items()}
    return consumer(stack)["metadata"]["resourceVersion"], maps, reasons(stack)


def moved(stack: Stack, seen: tuple[str, dict[str, str], Counter[str]]) -> bool:
    return written(stack) != seen


def settled(stack: Stack) -> tuple[str, dict[str, str], Counter[str]]:
    """What the operator wrote, once it has written nothing for `QUIET_S`."""
    deadline = time.monotonic() + WAIT_S
    last = written(stack)
    while time.monotonic() < deadline:
        try:
            wait_for(functools.partial(moved, stack, last), timeout=QUIET_S, what="a write")
        except AssertionError:
            return last
        last = written(stack)
    raise AssertionError(f"the operator kept writing for {WAIT_S} s")


def test_gitops_writes_cost_nothing_and_a_restored_status_is_put_back(
    stack: Stack, real_kubectl: Kubectl
) -> None:
    apply = ("apply", "--server-side", f"--field-manager={MANAGER}", "-f", "-")
    stack.secret(NAMESPACE)
    real_kubectl(*apply, input=json.dumps(manifest()))
    for i in range(2):
        stack.pod(NAMESPACE, f"c-{i}")
    stack.start_operator(namespaces=(NAMESPACE,), refresh_seconds=1.0)
    with ConsumerDouble(stack.kube, NAMESPACE):  # type: ignore[arg-type]
        wait_for(
            lambda: (
                sorted(stack.counts(NAMESPACE).values()) == [16, 16] and stack.balanced(NAMESPACE)
            ),
            timeout=WAIT_S,
            what="2 x 16",
        )
        two_pods = consumer(stack)["status"]
        stack.pod(NAMESPACE, "c-2")
        wait_for(
            lambda: (
                sorted(stack.counts(NAMESPACE).values()) == [10, 11, 11]
                and stack.balanced(NAMESPACE)
            ),
            timeout=WAIT_S,
            what="3 pods",
        )
        before = settled(stack)
        epochs, moves = stack.epochs(NAMESPACE), consumer(stack)["status"]["movesTotal"]

        # Drift correction: the same manifest applied again is no write at all.
        real_kubectl(*apply, input=json.dumps(manifest()))
        assert settled(stack) == before

        # Argo CD's Replace=true: the finalizer goes, the operator puts it back, and nothing
        # else: no ConfigMap written, no Event, no move.
        real_kubectl("replace", "-f", "-", input=json.dumps(manifest()))
        wait_for(
            lambda: consumer(stack)["metadata"].get("finalizers") == [FINALIZER],
            timeout=WAIT_S,
            what="the finalizer back",
        )
        _, maps, events = settled(stack)
        assert (maps, events) == before[1:]
        assert consumer(stack)["status"]["movesTotal"] == moves

        # A restore writes the status of two pods back: the operator writes its own record
        # back over it, and moves nothing.
        restore = {**manifest(), "status": two_pods}
        real_kubectl(*apply, "--subresource=status", "--force-conflicts", input=json.dumps(restore))
        wait_for(
            lambda: consumer(stack)["status"]["epochs"] == {p: epochs[p] for p in epochs},
            timeout=WAIT_S,
            what="status.epochs put back",
        )
        _, maps, _ = settled(stack)
        assert maps == before[1], "the ConfigMaps were rewritten after the restore"
        assert stack.epochs(NAMESPACE) == epochs
        assert consumer(stack)["status"]["movesTotal"] == moves
        assert reasons(stack) - before[2] == Counter({"StatusRolledBack": 1})
