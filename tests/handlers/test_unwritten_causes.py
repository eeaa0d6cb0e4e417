"""Ready's ``AssignmentNotWritten`` names the refusal the operator met, not a list of the
refusals it may meet: over the in-memory API, a new pod's ConfigMap create fails on every
attempt with one error, and the condition says that error and what to change for it."""

from __future__ import annotations

import contextlib

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import memories
from tests.handlers import test_cycles
from tests.handlers.test_cycles import NAME, NS
from tests.support import fakes

WHAT = f"create ConfigMap {NS}/ehb-orders-c"

#: The error of each refusal (as `adapters.kubeclients` words kube-apiserver's answer), what
#: the condition must say of it, and what it must not suggest.
CASES = {
    "rbac": (
        errors.Forbidden(
            f'{WHAT}: forbidden (configmaps is forbidden: User "system:serviceaccount:ehb:'
            'eventhub-balancer" cannot create resource "configmaps" in API group "" in the '
            f'namespace "{NS}"); grant the operator\'s ServiceAccount access'
        ),
        ("cannot create resource", "grant the operator's ServiceAccount"),
        ("ResourceQuota", "admission"),
    ),
    "quota": (
        errors.QuotaExceeded(
            f"{WHAT}: refused by a ResourceQuota (exceeded quota: configmaps, requested: "
            "configmaps=1, used: configmaps=2, limited: configmaps=2); raise its limit in the "
            "namespace, or free what it counts"
        ),
        ("exceeded quota", "raise its limit"),
        ("RBAC", "grant", "admission"),
    ),
    "conflict": (
        errors.Conflict(f'{WHAT}: conflict (configmaps "ehb-orders-c" already exists)'),
        ("already exists", "Another writer"),
        ("ResourceQuota", "RBAC", "admission"),
    ),
    "unreachable": (
        errors.ApiUnavailable(
            f"{WHAT}: API server answered 500 (Internal error occurred: failed calling "
            'webhook "cm.policy.example.com": context deadline exceeded)'
        ),
        ("failed calling webhook", "did not take the write", "retrying"),
        ("ResourceQuota", "RBAC"),
    ),
    "too large": (
        errors.ApiRejected(
            f'{WHAT}: rejected (422: ConfigMap "ehb-orders-c" is invalid: []: Too long: must '
            "have at most 1048576 bytes)"
        ),
        ("Too long", "too large", "fewer partitions"),
        ("ResourceQuota", "RBAC", "admission"),
    ),
    # Said at DEBUG and no failure (`writing.create_configmap`): nothing on record.
    "namespace terminating": (
        errors.NamespaceTerminating(f"{WHAT}: refused, the namespace is being deleted"),
        ("namespace is being deleted",),
        ("has not tried", "ResourceQuota", "RBAC"),
    ),
}


async def pod_c_joins(
    error: Exception, *, times: int
) -> tuple[fakes.FakeKube, fakes.FakeHubs, memories.Memory]:
    """A steady consumer of pods a and b, and pod c joining, whose ConfigMap's first ``times``
    creates fail with ``error``."""
    kube = test_cycles.make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await test_cycles.cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=test_cycles.at(6))
    kube.fail("create_configmap", error, times=times)
    return kube, hubs, memory


@pytest.mark.parametrize("case", list(CASES))
async def test_assignment_not_written_names_the_refusal_met(case: str) -> None:
    error, said, unsaid = CASES[case]
    kube, hubs, memory = await pod_c_joins(error, times=1_000)
    for now in range(10, 200, 10):
        with contextlib.suppress(errors.EventHubBalancerError):
            await test_cycles.cycle(kube, hubs, memory, now=now)
        kube.acknowledge(NS, "b")
        kube.apply_generation(NS, "b")
    ready = kube.condition(NS, NAME, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AssignmentNotWritten"), ready
    message = ready["message"]
    assert message.startswith("pod c holds 1 of 4 partitions, but the operator has not written")
    for words in said:
        assert words in message, message
    for words in unsaid:
        assert words not in message, message


async def test_a_write_that_succeeds_again_forgets_the_refusal() -> None:
    """Once the ConfigMap is written the refusal is history: a later pod that is refused for
    another reason is not told the old one."""
    kube, hubs, memory = await pod_c_joins(CASES["quota"][0], times=2)
    for now in range(10, 100, 10):
        with contextlib.suppress(errors.EventHubBalancerError):
            await test_cycles.cycle(kube, hubs, memory, now=now)
        for pod in kube.assignment(NS):
            kube.acknowledge(NS, pod)
            kube.apply_generation(NS, pod)
    assert "c" in kube.assignment(NS)
    assert memory.refused is None
