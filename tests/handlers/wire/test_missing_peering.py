"""A replica whose peering object does not exist, on the local API server: kopf keeps it
paused, so it serves no consumer; it says so, with what to do, and acts once the object is
created (`handlers.kopfkeepalives`). It used to say nothing at the default level."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventhub_balancer.adapters import kubeapi
from eventhub_balancer.handlers import kopfkeepalives
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for

pytestmark = pytest.mark.slow


def test_a_replica_without_its_peering_object_says_so_and_acts_once_it_exists(
    operator_stack: Stack, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    stack, ns = operator_stack, namespace
    caplog.set_level(logging.INFO, logger=kopfkeepalives.__name__)
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}")
    operator = stack.start_operator(namespaces=(ns,), standalone=False, peering="ehb")
    with ConsumerDouble(stack.kube, ns):
        # A warning at the second renewal in a row that misses it, 5 to 10 s after the first.
        wait_for(
            lambda: any("does not exist" in m for m in caplog.messages),
            timeout=30,
            what="the warning",
        )
        assert (
            f"the peering object KopfPeering {ns}/ehb does not exist: this replica stays "
            "paused, and serves no consumer, until it does; create it "
            "(manifests/peering/peering.yaml, or the chart's peering.enabled) or run the "
            "operator with --standalone"
        ) in caplog.messages
        time.sleep(2.0)  # what the warning says: paused, nothing served
        assert operator.runtime.cycles_run == 0
        assert stack.counts(ns) == {}
        stack.kube.create_object(
            "kopf.dev/v1/kopfpeerings", {"metadata": {"name": "ehb"}}, namespace=ns
        )
        wait_for(
            lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns),
            what="balanced once the object exists",
        )
        wait_for(
            lambda: (
                f"the peering object KopfPeering {ns}/ehb exists: this replica takes part again"
                in caplog.messages
            ),
            what="the object said to be back",
        )
    warnings = [m for m in caplog.messages if "does not exist" in m]
    assert len(warnings) == 1, warnings  # one, not one per renewal


PEERING_CRD = "apiextensions.k8s.io/v1/customresourcedefinitions"


def test_an_operator_started_without_the_peering_crd_refuses_to_start(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """``ehb operator --peering`` as a process, before kopf's peering CRDs are applied: kopf
    would keep it paused, and with named namespaces it scans no CRD, so it would stay paused
    after they are applied, until a restart. It exits instead, saying what to apply."""
    stack, ns = operator_stack, namespace
    stack.kube.delete_object(PEERING_CRD, "kopfpeerings.kopf.dev")
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "operator",
            "-n",
            ns,
            "--peering",
            "ehb",
            "--kubeconfig",
            str(stack.kubeconfig),
            "--metrics-insecure",
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.stderr.splitlines() == [
        "ehb: error: --peering ehb: kopf's peering CRD kopfpeerings.kopf.dev is not installed, "
        "and without it this replica would stay paused, serving no consumer: apply "
        "manifests/peering/kopf-peering-crds.yaml once, or run the operator with --standalone"
    ]
    assert ran.returncode == 1


def test_discovery_says_which_custom_resources_are_served(operator_stack: Stack) -> None:
    """`KubeAPI.serves`, the operator's look at discovery, as a CRD comes and goes."""
    api = kubeapi.KubeAPI.from_environment(str(operator_stack.kubeconfig))

    def serves(group: str, plural: str) -> bool:
        return asyncio.run(api.serves(group, "v1", plural))

    try:
        assert serves("kopf.dev", "kopfpeerings")
        assert serves("kopf.dev", "clusterkopfpeerings")
        operator_stack.kube.delete_object(PEERING_CRD, "kopfpeerings.kopf.dev")
        assert not serves("kopf.dev", "kopfpeerings")
        assert serves("kopf.dev", "clusterkopfpeerings")
        assert not serves("nothing-here.example.com", "things")
    finally:
        api.close()
