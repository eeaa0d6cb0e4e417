"""Two tenants and the real ``ehb operator`` on the local Kubernetes API: what one tenant's
EventHubConsumer can do to the other's.

The operator runs as ``ehb operator -A`` with the install's defaults (`operatorcommands`); its
own Azure identity is a fake managed-identity endpoint that refuses (fixture
``managed_identity``), so no checkpoint blob is ever read: the consumers balance from their
record, as they do while the store is away. Tenant A's consumer holds its location; tenant B
writes CRs that name it, spelt as the CRD and the allow-list accept.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from eventhub_balancer.adapters import tenantidentities
from eventhub_balancer.reconciling import conflicts
from eventhub_balancer_devstack import clusters
from tests.support import identityendpoints, operatorcommands
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for

A, B = "tenant-a", "tenant-b"
ACCOUNT = "tenanta.blob.core.windows.net"
NAMESPACE = "tenanta.servicebus.windows.net"
HUB = "small"  # the emulator's hub of 4 partitions, through each tenant's own Secret


def consumer(
    stack: Stack,
    namespace: str,
    name: str,
    *,
    account_url: str = f"https://{ACCOUNT}",
    fqns: str = NAMESPACE,
    app: str,
    **spec: Any,
) -> None:
    """An EventHubConsumer whose hub is the emulator's (its namespace's Secret ``eh``) and
    whose checkpoint location is ``account_url`` with workload identity."""
    stack.kube.create_object(
        clusters.CR,
        {
            "apiVersion": "eventhub-balancer.dev/v1alpha1",
            "kind": "EventHubConsumer",
            "metadata": {"name": name},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": fqns,
                    "name": HUB,
                    "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
                },
                "checkpointStore": {
                    "containerName": "checkpoints",
                    "accountUrl": account_url,
                    "credentials": {"workloadIdentity": {}},
                },
                "selector": {"matchLabels": {"app": app}},
                "balancing": {"intervalSeconds": 2, "podGraceSeconds": 2},
                **spec,
            },
        },
        namespace=namespace,
    )


@pytest.fixture
def tenants(operator_stack: Stack, managed_identity: identityendpoints.TokenEndpoint) -> Stack:
    """Both tenants' namespaces with their hub's Secret; the operator's own identity is the
    refusing managed-identity endpoint (lent to A by `start`, for its account URL)."""
    for namespace in (A, B):
        operator_stack.secret(namespace)
    return operator_stack


def start(stack: Stack, *flags: str) -> operatorcommands.StartedOperator:
    return operatorcommands.start(
        stack.kubeconfig,
        "-A",
        "--allow-development-endpoints",
        f"--identity-namespace={A}",
        *flags,
    )


def balanced_over(stack: Stack, pods: set[str]) -> bool:
    return stack.balanced(A) and set(stack.counts(A)) == pods


def conflict(stack: Stack, namespace: str, name: str) -> dict[str, Any]:
    return stack.condition(namespace, conflicts.CONFLICT, name)


#: The longest wait for a newcomer's refusal (its first cycle, behind a failing identity).
REFUSAL_WAIT_S = 60.0


def test_one_cr_of_another_tenant_halts_nothing(tenants: Stack) -> None:
    """Attack 3: B's one CR naming A's location used to stop A (and so its failover)."""
    stack = tenants
    consumer(stack, A, "orders", app="orders")
    for pod in ("a-0", "a-1"):
        stack.pod(A, pod, app="orders")
    operator = start(stack)
    try:
        with ConsumerDouble(stack.kube, A):
            wait_for(lambda: balanced_over(stack, {"a-0", "a-1"}), what="A balanced")
            # creationTimestamp has whole seconds: B made in A's second would tie on age and
            # be ordered by uid, by chance. A newcomer comes at least a second later here.
            created = stack.kube.get_object(clusters.CR, "orders", namespace=A) or {}
            made = datetime.datetime.fromisoformat(
                created["metadata"]["creationTimestamp"].replace("Z", "+00:00")
            )
            while datetime.datetime.now(datetime.UTC) < made + datetime.timedelta(seconds=1.1):
                time.sleep(0.1)
            consumer(stack, B, "mirror", app="nothing")
            # B's first cycle waits for its hub's identity, which fails here (no Entra ID):
            # on a loaded machine that alone has taken more than 15 s.
            wait_for(
                lambda: conflict(stack, B, "mirror").get("reason") == conflicts.REASON_SHARED,
                what="B refused",
                timeout=REFUSAL_WAIT_S,
            )
            message = conflict(stack, B, "mirror")["message"]
            assert f"EventHubConsumer {A}/orders in another namespace" in message
            assert "--bind-location NS=" in message
            # A's pod dies: its partitions move at once, as if B did not exist.
            stack.delete_pod(A, "a-1")
            wait_for(lambda: balanced_over(stack, {"a-0"}), what="A failed over")
            assert conflict(stack, A, "orders") == {}
            # Ready says only what the store's absence here says, never the refusal's reasons.
            refusals = (conflicts.REASON, conflicts.REASON_SHARED, conflicts.REASON_BOUND)
            assert stack.condition(A, "Ready", "orders").get("reason") not in refusals
    finally:
        operator.stop()


def test_a_host_spelt_another_way_is_bound_all_the_same(tenants: Stack) -> None:
    """Attack 4: a port and upper case passed the CRD, the spec parser and the allow-list, and
    dodged the binding (a trailing dot did too; the CRD now refuses it). B's CR is the older
    here: the binding decides."""
    stack = tenants
    consumer(
        stack,
        B,
        "mirror",
        app="nothing",
        account_url=f"https://{ACCOUNT.upper()}:443/",
        fqns=f"{NAMESPACE}:5671",
    )
    consumer(stack, A, "orders", app="orders")
    stack.pod(A, "a-0", app="orders")
    operator = start(stack, f"--bind-location={A}={ACCOUNT}")
    try:
        with ConsumerDouble(stack.kube, A):
            wait_for(
                lambda: conflict(stack, B, "mirror").get("reason") == conflicts.REASON_BOUND,
                what="B refused by the binding",
            )
            assert ACCOUNT in conflict(stack, B, "mirror")["message"]
            wait_for(lambda: balanced_over(stack, {"a-0"}), what="A balanced")
            assert conflict(stack, A, "orders") == {}
    finally:
        operator.stop()


def test_a_service_account_lends_its_identity_only_once_it_opted_in(
    tenants: Stack, entra_endpoint: identityendpoints.TokenEndpoint
) -> None:
    """Attack 6: a CR's author names a ServiceAccount of the namespace that never agreed."""
    stack = tenants
    stack.kube.create_object(
        "v1/serviceaccounts",
        {
            "metadata": {
                "name": "deployer",
                "annotations": {
                    tenantidentities.CLIENT_ID_ANNOTATION: "dddddddd-0000-0000-0000-000000000001",
                    tenantidentities.TENANT_ID_ANNOTATION: "11111111-2222-3333-4444-555555555555",
                },
            }
        },
        namespace=B,
    )
    consumer(
        stack,
        B,
        "reader",
        app="nothing",
        account_url="https://tenantb.blob.core.windows.net",
        serviceAccountName="deployer",
    )
    operator = start(stack)
    try:
        store = "CheckpointStoreReachable"
        wait_for(
            lambda: stack.condition(B, store, "reader").get("reason") == "ServiceAccountNotOptedIn",
            what="the ServiceAccount refused",
        )
        message = stack.condition(B, store, "reader")["message"]
        assert "eventhub-balancer.dev/token-requests=allowed" in message
        assert entra_endpoint.asked == []
        # Whoever may change the ServiceAccount opts it in: the operator uses it from then on
        # (the exchange then fails at the fake endpoint: another reason, not the opt-in's).
        stack.kube.patch_object(
            "v1/serviceaccounts",
            "deployer",
            {"metadata": {"labels": {tenantidentities.OPT_IN_LABEL: "allowed"}}},
            namespace=B,
        )
        wait_for(
            lambda: (
                stack.condition(B, store, "reader").get("reason")
                not in (None, "ServiceAccountNotOptedIn")
            ),
            what="the ServiceAccount used",
            timeout=30,
        )
    finally:
        operator.stop()
