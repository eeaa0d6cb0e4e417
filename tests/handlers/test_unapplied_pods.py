"""A pod the selector matches that is not a consumer: through cycles over the in-memory API,
Ready turns False a minute after it was given partitions it never applied, with one Warning,
and the cycle comes back for that moment by itself."""

from __future__ import annotations

import contextlib
import logging

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import memories
from eventhub_balancer.reconciling import silentowners
from tests.handlers import test_cycles, test_unwritten_causes
from tests.handlers.test_cycles import NAME, NS
from tests.support import fakes


async def test_a_pod_that_never_applies_turns_ready_false_once_and_for_as_long_as_it_lasts() -> (
    None
):
    kube = test_cycles.make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await test_cycles.cycle(kube, hubs, memory, now=0)
    kube.apply_generation(NS, "a")  # a runs `ehb consume`; b is the producer's pod
    result = await test_cycles.cycle(kube, hubs, memory, now=5)
    assert result.writes == 0
    assert kube.condition(NS, NAME, "Ready")["reason"] == "AllPartitionsOwned"
    # Nothing else will wake it: the decision names the moment b's silence comes due.
    assert result.decision.next_in == silentowners.UNAPPLIED_SECONDS - 5

    await test_cycles.cycle(kube, hubs, memory, now=silentowners.UNAPPLIED_SECONDS)
    ready = kube.condition(NS, NAME, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AssignmentNotApplied")
    assert ready["message"].startswith("pod b holds 2 of 4 partitions")
    warnings = [(e["reason"], e["type"]) for e in kube.events if e["type"] == "Warning"]
    assert warnings == [("AssignmentNotApplied", "Warning")]

    # It stands: no write, no Event, however many cycles.
    calls = len(kube.calls)
    for now in (65, 70, 300, 600):
        assert (await test_cycles.cycle(kube, hubs, memory, now=now)).writes == 0
    assert len(kube.calls) == calls

    kube.apply_generation(NS, "b")  # the selector fixed, or the pod given its Role
    await test_cycles.cycle(kube, hubs, memory, now=601)
    assert kube.condition(NS, NAME, "Ready")["reason"] == "AllPartitionsOwned"


async def test_a_pod_whose_configmap_the_api_refuses_turns_ready_false_not_all_owned() -> None:
    """A pod joins, b releases a partition for it, and the API server refuses the new pod's
    ConfigMap (a ResourceQuota on configmaps, say) on every attempt: the record gives the
    partition to c, which is never told; nothing reads it."""
    refused = errors.Forbidden('configmaps "ehb-orders-c" is forbidden: exceeded quota: cms')
    kube, hubs, memory = await test_unwritten_causes.pod_c_joins(refused, times=1_000)
    for now in range(10, 200, 10):
        with contextlib.suppress(errors.Forbidden):
            await test_cycles.cycle(kube, hubs, memory, now=now)
        kube.acknowledge(NS, "b")
        kube.apply_generation(NS, "b")
    assert "c" not in kube.assignment(NS)
    assert {e["pod"] for e in kube.status(NS, NAME)["assignment"] if e["partition"] == "3"} == {"c"}
    ready = kube.condition(NS, NAME, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AssignmentNotWritten")
    assert ready["message"].startswith(
        "pod c holds 1 of 4 partitions, but the operator has not written its assignment "
        "ConfigMap within 60 s: nothing reads them."
    )
    assert kube.condition(NS, NAME, "Stalled")["status"] == "True"
    reasons = [e["reason"] for e in kube.events]
    assert reasons.count("AssignmentNotWritten") == 1


async def test_the_operators_log_says_it_once_when_it_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its Warning Event was all that told it: the operator's log said nothing of a pod that
    never applied its partitions, however long it lasted."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    kube = test_cycles.make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await test_cycles.cycle(kube, hubs, memory, now=0)
    kube.apply_generation(NS, "a")
    caplog.clear()
    for now in (5, silentowners.UNAPPLIED_SECONDS, 65, 300, 600):
        await test_cycles.cycle(kube, hubs, memory, now=now)
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage()[:53] for r in said] == [
        f"{NS}/{NAME}: AssignmentNotApplied: pod b holds 2 of 4"
    ]
