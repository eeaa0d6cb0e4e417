"""A replica whose peering object does not exist, on the local API server: kopf keeps it
paused, so it serves no consumer; it says so, with what to do, and acts once the object is
created (`handlers.kopfkeepalives`). It used to say nothing at the default level."""

from __future__ import annotations

import logging
import time

import pytest

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
        wait_for(lambda: any("does not exist" in m for m in caplog.messages), what="the warning")
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
