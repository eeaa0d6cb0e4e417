"""A namespaced install (the chart's ``watchNamespaces``) on the real control plane, under the
chart's ServiceAccount and its namespaced RBAC, which grants no cluster-wide read.

A control plane of its own (this module's): the cluster-wide scenarios bind the same
ServiceAccount to the chart's ClusterRoles, which would grant what this install lacks.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.realkube.wire.test_operator_scenario import WAIT_S, operator_identity, shares
from tests.support.fixtures.operator import HUB, ConsumerDouble, Stack, wait_for
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = "shop"


def test_a_namespaced_install_serves_its_namespace_without_listing_namespaces(
    real_kube: RealControlPlane,
    real_kubectl: Kubectl,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf lists and watches every namespace to match the ones it serves, unless told not
    to scan: the namespaced RBAC refuses that, and kopf's retries of the 403 held the first
    balance back about a minute at every start. Named namespaces are served at once."""
    caplog.set_level(logging.INFO)
    ns = NAMESPACE
    kubeconfig, _ = operator_identity(
        real_kube, real_kubectl, tmp_path, tenants=(ns,), values={"watchNamespaces": [ns]}
    )
    emulator = EventHubsEmulator(hubs={HUB: 16})
    emulator.start_in_thread()
    stack = Stack(real_kube, emulator, kubeconfig)  # type: ignore[arg-type]
    try:
        stack.secret(ns)
        stack.consumer(ns)
        for i in range(2):
            stack.pod(ns, f"c-{i}")
        # As the chart's Deployment runs it with watchNamespaces: --namespace=shop --standalone.
        stack.start_operator(namespaces=(ns,), refresh_seconds=1.0)
        with ConsumerDouble(stack.kube, ns):
            wait_for(
                lambda: shares(stack, ns) == [8, 8] and stack.balanced(ns),
                timeout=WAIT_S,
                what="2 x 8 in the served namespace",
            )
    finally:
        for operator in list(stack.operators):
            operator.stop()
        emulator.stop_in_thread()
    refused = [r.getMessage() for r in caplog.records if "namespaces" in r.getMessage().lower()]
    assert not [m for m in refused if "forbidden" in m.lower() or "permission" in m.lower()]
