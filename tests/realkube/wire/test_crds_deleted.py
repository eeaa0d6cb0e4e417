"""CRDs deleted while the operator runs, on the real control plane (a module of its own: it
deletes CRDs that the other tests' cluster keeps).

kopf's peering CRD: kopf's peering observer's watch answers 404 and kopf stops. It said so in
two error lines with their tracebacks, and the error escaped ``ehb`` as a third. It is now one
`errors.ResourceGone`, which ``ehb operator`` words with the CRD's name
(`cli.crddefinitions.gone`); restarted once the CRD is back, the replica serves.

The EventHubConsumer CRD (``kubectl delete -f crds/`` before the consumers): kopf stopped
serving the consumers as soon as the CRD was being deleted, so their finalizers stayed and the
CRD stayed Terminating for good, with the operator running (`handlers.kopfteardown`). It now
goes within seconds; applied again, the operator serves the consumers made then.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi
from eventhub_balancer.cli import crddefinitions, operator_cmd
from eventhub_balancer.contracts import specs
from tests.realkube.wire.test_peering import NAMESPACE, WAIT_S, peered_stack, shares
from tests.support import loading, operatorcommands
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for
from tests.support.fixtures.realkube import Kubectl

__all__ = ["peered_stack"]  # the fixture, used by name

CRDS = loading.MANIFESTS_DIR / "peering" / "kopf-peering-crds.yaml"


def test_a_replica_whose_peering_crd_is_deleted_stops_in_one_line_and_serves_once_it_is_back(
    peered_stack: Stack, real_kubectl: Kubectl, caplog: pytest.LogCaptureFixture
) -> None:
    """kopf's peering CRD deleted while a peered replica runs: kopf's peering observer's watch
    answers 404 and kopf stops. It said so in two error lines with their tracebacks, and the
    error escaped ``ehb`` as a third; it is now one `errors.ResourceGone`, which ``ehb
    operator`` words with the CRD's name. Restarted once the CRD is back, it serves."""
    stack, ns = peered_stack, NAMESPACE
    peering = stack.peering  # type: ignore[attr-defined]
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}")
    first = stack.start_operator(clusterwide=True, standalone=False, peering=peering)
    with ConsumerDouble(stack.kube, ns):  # type: ignore[arg-type]
        wait_for(
            lambda: shares(stack, ns) == [16, 16] and stack.balanced(ns),
            timeout=WAIT_S,
            what="2 pods",
        )
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        real_kubectl("delete", "crd", f"clusterkopfpeerings.{crddefinitions.PEERING_GROUP}")
        wait_for(lambda: first.error is not None, timeout=WAIT_S, what="the replica stopped")
        assert isinstance(first.error, errors.ResourceGone), repr(first.error)
        kopf_said = [r for r in caplog.records if r.name.startswith("kopf") and r.exc_info]
        assert kopf_said == []
        api = kubeapi.KubeAPI.from_environment(str(stack.kubeconfig))
        try:
            options = operator_cmd.serving_options(
                operatorcommands.parse(
                    "--metrics-insecure", "--metrics-host=127.0.0.1", "-A", "--peering", peering
                ),
                reviews=None,
            )
            said = asyncio.run(crddefinitions.gone(api, options, first.error))
        finally:
            api.close()
        assert str(said).startswith(
            f"--peering {peering}: kopf's peering CRD clusterkopfpeerings.kopf.dev was deleted "
            "while this replica ran, and kopf stopped on it: apply "
            "manifests/peering/kopf-peering-crds.yaml"
        )
        stack.stop_operator(first)
        real_kubectl("apply", "-f", str(CRDS))
        real_kubectl("wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev")
        stack.kube.create_object(
            "kopf.dev/v1/clusterkopfpeerings",
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "ClusterKopfPeering",
                "metadata": {"name": peering},
            },
        )
        stack.start_operator(clusterwide=True, standalone=False, peering=peering)  # the restart
        stack.pod(ns, "c-2")
        wait_for(
            lambda: shares(stack, ns) == [10, 11, 11] and stack.balanced(ns),
            timeout=WAIT_S,
            what="3 pods, served after the restart",
        )


def finalized(stack: Stack, namespace: str, name: str) -> bool:
    resource = f"{specs.GROUP}/{specs.VERSION}/{specs.PLURAL}"
    body = stack.kube.get_object(resource, name, namespace=namespace)
    return f"{specs.GROUP}/finalizer" in (body or {}).get("metadata", {}).get("finalizers", [])


def test_the_consumers_crd_deleted_while_the_operator_runs_goes(
    peered_stack: Stack, real_kubectl: Kubectl
) -> None:
    stack, ns = peered_stack, NAMESPACE
    stack.secret(ns, "refunds-eh")
    stack.consumer(ns, "refunds", app="refunds", secret="refunds-eh")
    stack.pod(ns, "r-0", app="refunds")
    operator = stack.start_operator(clusterwide=True, standalone=True)
    with ConsumerDouble(stack.kube, ns):  # type: ignore[arg-type]
        # Served: kopf's finalizer is on it (and on the peering test's consumer, if it ran;
        # this one then waits on it, as two consumers on one location do, and both must go).
        wait_for(lambda: finalized(stack, ns, "refunds"), timeout=WAIT_S, what="refunds served")
        crd = f"{specs.PLURAL}.{specs.GROUP}"
        real_kubectl("delete", "crd", crd, "--wait=false")

        def gone() -> bool:
            listed = real_kubectl("get", "crd", crd, "--ignore-not-found", "-o", "name")
            return listed.stdout.strip() == ""

        wait_for(gone, timeout=WAIT_S, what="the CRD gone")
    # kopf scans CRDs with -A: it stops watching the consumers and runs on, to serve them
    # again once the CRD is applied (with -n the watch's 404 stops it, as the peering's did).
    assert operator.error is None
    # A start now stops at once, naming the CRD, where kopf with -n served nothing for good.
    api = kubeapi.KubeAPI.from_environment(str(stack.kubeconfig))
    try:
        options = operator_cmd.serving_options(
            operatorcommands.parse("--metrics-insecure", "--metrics-host=127.0.0.1", "-n", ns),
            reviews=None,
        )
        with pytest.raises(errors.ConfigurationError, match=f"CRD {crd} is not installed"):
            asyncio.run(crddefinitions.check(api, options))
    finally:
        api.close()
    # The CRD applied again: the operator that ran on serves a consumer made then.
    real_kubectl("apply", "-f", str(loading.CRDS_DIR))
    real_kubectl("wait", "--for=condition=Established", f"crd/{crd}")
    stack.consumer(ns, "refunds", app="refunds", secret="refunds-eh")
    wait_for(
        lambda: finalized(stack, ns, "refunds"), timeout=WAIT_S, what="served once applied again"
    )
    assert operator.error is None
