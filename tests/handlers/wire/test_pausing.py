"""``spec.paused`` end to end on the local stack: the real operator, two ``ehb consume``
processes as pods (the harness of `tests.consumer.wire.test_scaling`). A pause releases every
partition by ordered hand-off (each pod acknowledges: no hand-off times out), the pods stay
up and Ready with nothing assigned, and a resume gives everything out again one epoch up."""

from __future__ import annotations

import pytest

from tests.consumer.wire.test_scaling import (  # the harness and its fixture
    NAMESPACE,
    Running,
    local_stack,  # noqa: F401  (a fixture)
    owned_counts,
)
from tests.support.fixtures.operator import CR, wait_for

pytestmark = pytest.mark.slow


def paused(running: Running, value: bool) -> None:
    stack = running[0]
    stack.kube.patch_object(CR, "orders", {"spec": {"paused": value}}, namespace=NAMESPACE)


def test_a_paused_consumer_releases_everything_and_its_pods_stay_ready(
    local_stack: Running,  # noqa: F811
) -> None:
    stack, consumers, _watch, _cs = local_stack
    for pod in ("c1", "c2"):
        consumers.start(pod)
    wait_for(lambda: owned_counts(stack) == [8, 8], timeout=60, what="2 pods with 8 partitions")
    before = stack.status(NAMESPACE)["epochs"]

    paused(local_stack, True)
    wait_for(
        lambda: stack.condition(NAMESPACE, "Paused").get("status") == "True",
        timeout=60,
        what="Paused True",
    )
    assert owned_counts(stack) == []
    assert set(stack.assignment(NAMESPACE)) == {"c1", "c2"}  # each pod keeps an empty ConfigMap
    assert stack.condition(NAMESPACE, "Ready")["reason"] == "Paused"
    # The Events are posted beside the cycles, a moment after the status they are about.
    wait_for(
        lambda: {"Pausing", "Paused", "PartitionReleased"} <= stack.reasons(NAMESPACE),
        what="the pause events",
    )
    reasons = stack.reasons(NAMESPACE)
    assert "HandoffTimedOut" not in reasons  # every pod acknowledged its releases
    assert stack.status(NAMESPACE)["epochs"] == before  # kept while nothing is assigned
    assert all(p.poll() is None for p in consumers.processes.values())
    assert consumers.ready == {"c1": True, "c2": True}

    paused(local_stack, False)
    wait_for(lambda: owned_counts(stack) == [8, 8], timeout=60, what="assigned again")
    assert stack.epochs(NAMESPACE) == {p: e + 1 for p, e in before.items()}
    wait_for(
        lambda: stack.condition(NAMESPACE, "Paused").get("reason") == "Resumed",
        what="Paused Resumed",
    )
