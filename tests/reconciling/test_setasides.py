"""`setasides`: the batches pods set aside into the dead letters, as the operator tells them.

Under ``onFailure: deadLetter`` a failing partition's trouble ended the same way whether its
batch went through on a retry or went to the dead letters, and ``PartitionRecovered`` could
only say "went through on a retry, or went to the dead letters". The pods now tell what they
set aside; the operator keeps it in ``status.deadLettered``, posts ``BatchDeadLettered`` for
each new one, and says which way a trouble ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import yaml

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import partitionreports
from eventhub_balancer.reconciling import decisions, observations, setasides
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod
from tests.support import paths

SPEC = {**bodies.SPEC, "processing": {"maxAttempts": 2, "onFailure": "deadLetter"}}
ERROR = "NotAnOrder: partition 0 sequence number 110: not an order"


def reports(
    failing: Mapping[str, int] = {},
    aside: Mapping[str, tuple[int, str]] = {},
    restarting: frozenset[str] = frozenset(),
) -> str:
    """The annotation of a pod at epoch 1: ``failing`` {partition: attempts}, and ``aside``
    {partition: (batches, name)} set aside; the failing partitions ``restarting`` fail to start."""
    found: dict[str, partitionreports.PartitionReport] = {}
    for p in {*failing, *aside}:
        told = aside.get(p)
        found[p] = partitionreports.PartitionReport(
            partition=p,
            epoch=1,
            state="failing" if p in failing else None,
            attempts=failing.get(p, 0),
            error=ERROR if p in failing else "",
            restarting=p in restarting,
            set_aside=None
            if told is None
            else partitionreports.SetAside(epoch=1, batches=told[0], name=told[1], error=ERROR),
        )
    return partitionreports.build(found)


def cycle(
    observation: observations.Observation, now: float
) -> tuple[observations.Observation, decisions.Decision]:
    seen, decision = bodies.decide_fully(observation, now=at(now))
    return bodies.applied(seen, decision), decision


def started() -> observations.Observation:
    first, decision = bodies.decide_fully(
        bodies.observe(pods=(pod("a"), pod("b")), spec=SPEC), now=at(0)
    )
    return bodies.applied(first, decision)


def status_of(observation: observations.Observation) -> Any:
    status: Mapping[str, Any] = observation.status
    return status.get(setasides.STATUS_FIELD)


def test_a_batch_set_aside_is_a_warning_and_its_recovery_says_so() -> None:
    failing, _ = cycle(
        bodies.with_reports(started(), "a", reports(failing={"0": 2, "1": 2})), now=5
    )
    # Partition 0's batch goes to the dead letters, partition 1's through on a retry.
    ended, decision = cycle(
        bodies.with_reports(failing, "a", reports(aside={"0": (1, "0/110-114")})), 10
    )
    told, recovered = decision.events
    assert (told.reason, told.type) == ("BatchDeadLettered", "Warning")
    assert told.message == (
        "a set a batch of partition 0 aside into the dead letters after "
        "spec.processing.maxAttempts (2) and goes on after it (ehb deadletters show orders "
        f"0/110-114 -n {failing.namespace}): {ERROR} (1 at epoch 1)"
    )
    assert (recovered.reason, recovered.type) == ("PartitionRecovered", "Normal")
    assert recovered.message == (
        "partitions 0-1 on a no longer reported in trouble (was failing): the batch of 0 went "
        "to the dead letters (BatchDeadLettered), that of 1 went through on a retry"
    )
    assert status_of(ended) == [
        {
            "partition": "0",
            "pod": "a",
            "epoch": 1,
            "batches": 1,
            "told": 1,
            "toldAt": "2024-05-01T12:00:10Z",
            "name": "0/110-114",
            "error": ERROR,
        }
    ]
    # Told once: the same count is no news, in the Events or the status.
    steady, again = cycle(ended, now=15)
    assert again.events == ()
    assert setasides.STATUS_FIELD not in again.status
    # A second batch of the same partition, without a trouble seen between (maxAttempts 1,
    # or a cycle that came later), is a second Warning, once a minute has passed since the
    # first: a stream of poison batches made one a second.
    more, held = cycle(bodies.with_reports(steady, "a", reports(aside={"0": (2, "0/115")})), now=20)
    assert held.events == ()
    assert (status_of(more)[0]["batches"], status_of(more)[0]["told"]) == (2, 1)
    more, _ = cycle(bodies.with_reports(more, "a", reports(aside={"0": (3, "0/116")})), now=40)
    later, second = cycle(more, now=70)
    # (The fake pods write no acknowledgement: past 60 s that is an Event of its own.)
    (event,) = [e for e in second.events if e.reason == "BatchDeadLettered"]
    assert event.message == (
        "a set 2 batches of partition 0 aside into the dead letters after "
        "spec.processing.maxAttempts (2) and goes on after it (ehb deadletters show orders "
        f"0/116 -n {more.namespace}): {ERROR} (2 since the last Warning, 3 at epoch 1)"
    )
    assert (status_of(later)[0]["told"], status_of(later)[0]["toldAt"]) == (
        3,
        "2024-05-01T12:01:10Z",
    )


def test_a_partition_that_failed_to_start_and_recovers_had_no_batch_to_go_through() -> None:
    """Under deadLetter, a partition whose worker failed to start (Event Hubs refused it, its
    store could not be read) and started again was said to have had its batch go through on a
    retry, though no batch ever failed."""
    failing, _ = cycle(
        bodies.with_reports(
            started(), "a", reports(failing={"0": 3, "1": 2}, restarting=frozenset({"0"}))
        ),
        now=5,
    )
    assert [e.get("restarting") for e in failing.status["failing"]] == [True, None]
    # Kept by a real API server: every key written is in the CRD (it prunes the others).
    crd = yaml.safe_load((paths.REPOSITORY / "crds" / "eventhubconsumers.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    entry = status["properties"]["failing"]["items"]
    assert set(failing.status["failing"][0]) <= set(entry["properties"])
    jsonschema.validate(failing.status["failing"], status["properties"]["failing"])
    _, decision = cycle(bodies.with_reports(failing, "a", reports()), now=10)
    (event,) = decision.events
    assert event.message == (
        "partitions 0-1 on a no longer reported in trouble (was failing): the batch of 1 went "
        "through on a retry"
    )
    # Alone, and from a pod from before the set-asides were told: nothing about a batch.
    for told in (reports(), "{}"):
        restarting = reports(failing={"0": 3}, restarting=frozenset({"0"}))
        failing, _ = cycle(bodies.with_reports(started(), "a", restarting), now=5)
        _, decision = cycle(bodies.with_reports(failing, "a", told), now=10)
        (event,) = decision.events
        assert event.message == ("partition 0 on a no longer reported in trouble (was failing)"), (
            told
        )


def test_a_recovery_from_a_pod_that_tells_nothing_set_aside_went_through_on_a_retry() -> None:
    failing, _ = cycle(bodies.with_reports(started(), "a", reports(failing={"0": 2})), now=5)
    _, decision = cycle(bodies.with_reports(failing, "a", reports()), now=10)
    (event,) = decision.events
    assert event.message == (
        "partition 0 on a no longer reported in trouble (was failing): its batch went "
        "through on a retry"
    )
    # A pod from before the set-asides were told (no such key) cannot say which.
    failing, _ = cycle(bodies.with_reports(started(), "a", reports(failing={"0": 2})), now=5)
    _, decision = cycle(bodies.with_reports(failing, "a", "{}"), now=10)
    (event,) = decision.events
    assert event.message.endswith(
        "its batch went through on a retry, or went to the dead letters after "
        "spec.processing.maxAttempts (2) (ehb deadletters list)"
    )


def test_the_status_forgets_a_partition_that_left_its_pod_and_clears_when_none_is_left() -> None:
    aside, _ = cycle(bodies.with_reports(started(), "a", reports(aside={"0": (3, "0/1-2")})), now=5)
    assert [e["partition"] for e in status_of(aside)] == ["0"]
    # The pod restarted (its count begins again): the entry goes, and nothing is posted.
    cleared, decision = cycle(bodies.with_reports(aside, "a", reports()), now=10)
    assert status_of(cleared) == []
    assert decision.events == ()
    # Cleared, the status stays as it is: no write of an empty list every cycle.
    _, quiet = cycle(cleared, now=15)
    assert setasides.STATUS_FIELD not in quiet.status


def test_a_pod_tells_only_of_its_own_partitions_at_their_epochs() -> None:
    """Pod b claims partition 0, which a holds; and an epoch a was never given."""
    observation = started()
    owned = {e["partition"] for e in observation.status["assignment"] if e["pod"] == "a"}
    theirs = sorted(owned)[0]
    value = reports(aside={theirs: (1, f"{theirs}/1")})
    _, decision = cycle(bodies.with_reports(observation, "b", value), now=5)
    assert decision.events == ()
    stale = partitionreports.build(
        {
            theirs: partitionreports.PartitionReport(
                partition=theirs,
                epoch=1,
                state=None,
                set_aside=partitionreports.SetAside(epoch=9, batches=1, name="x"),
            )
        }
    )
    _, decision = cycle(bodies.with_reports(observation, "a", stale), now=5)
    assert decision.events == ()


def test_the_status_written_passes_the_crd_schema() -> None:
    aside, _ = cycle(
        bodies.with_reports(started(), "a", reports(aside={"0": (1, "0/110-114")})), now=5
    )
    crd = yaml.safe_load((paths.REPOSITORY / "crds" / "eventhubconsumers.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    field = schema["properties"]["status"]["properties"][setasides.STATUS_FIELD]
    jsonschema.validate(status_of(aside), field)
    assert status_of(aside)[0]["name"] == "0/110-114"


def test_batches_of_several_partitions_set_aside_at_once_are_one_warning_naming_each() -> None:
    aside = {"0": (1, "0/5-6"), "1": (4, "1/40")}
    _, decision = cycle(bodies.with_reports(started(), "a", reports(aside=aside)), now=5)
    (event,) = decision.events
    assert event.message == (
        "a set 5 batches of partitions 0-1 aside into the dead letters after "
        "spec.processing.maxAttempts (2) and goes on after it (ehb deadletters show orders "
        f"0/5-6 -n {bodies.NS}): 0: 0/5-6, {ERROR} (1 at epoch 1); 1: 1/40, {ERROR} (4 at "
        "epoch 1)"
    )


def test_a_stream_of_poison_batches_is_a_warning_a_minute_not_two_events_a_batch() -> None:
    """On the local stack, a poison event every 2 s on four partitions posted 63
    PartitionFailing and 64 PartitionRecovered Events in two minutes, one pair a batch."""
    observation, _ = cycle(bodies.with_reports(started(), "a", reports(failing={"0": 1})), now=5)
    observation, first = cycle(
        bodies.with_reports(observation, "a", reports(aside={"0": (1, "0/1")})), 6
    )
    assert [e.reason for e in first.events] == ["BatchDeadLettered", "PartitionRecovered"]
    said: list[str] = []
    for n, now in enumerate(range(10, 70, 4), start=2):
        failing = reports(failing={"0": 1}, aside={"0": (n - 1, f"0/{n - 1}")})
        observation, decision = cycle(bodies.with_reports(observation, "a", failing), now)
        said += reasons(decision)
        aside = reports(aside={"0": (n, f"0/{n}")})
        observation, decision = cycle(bodies.with_reports(observation, "a", aside), now + 2)
        said += reasons(decision)
    # The status and the condition show each failing all the same.
    assert said == ["BatchDeadLettered"]
    # Another cause is news: the dead letters cannot be written.
    broken = partitionreports.PartitionReport(
        partition="0",
        epoch=1,
        state="failing",
        attempts=2,
        error="dead-letter write failed: container not found",
        set_aside=partitionreports.SetAside(epoch=1, batches=16, name="0/16", error=ERROR),
    )
    value = partitionreports.build({"0": broken})
    _, decision = cycle(bodies.with_reports(observation, "a", value), now=80)
    assert reasons(decision) == ["PartitionFailing"]
    # Two minutes after the pod's last Warning the stream is over: a failing is news again
    # (and the batch set aside after that Warning is told now).
    _, decision = cycle(
        bodies.with_reports(observation, "a", reports(failing={"0": 1}, aside={"0": (16, "0/16")})),
        200,
    )
    assert reasons(decision) == ["BatchDeadLettered", "PartitionFailing"]


def reasons(decision: decisions.Decision) -> list[str]:
    """The Events' reasons, but the one of the fake pods' acknowledgements that never come
    (``AssignmentNotApplied``, past 60 s)."""
    return [e.reason for e in decision.events if e.reason != "AssignmentNotApplied"]


def test_past_the_first_32_entries_the_status_keeps_each_error_by_its_cause() -> None:
    """So that a stream on partition 40 is known as one, as on partition 0."""
    told = {
        models.PartitionId(str(p)): setasides.Told(
            partition=models.PartitionId(str(p)), pod="a", epoch=1, batches=1, error=ERROR
        )
        for p in range(40)
    }
    now = at(10)
    said = setasides.account(
        setasides.Reading(told=told, telling=frozenset({"a"})),
        previous={},
        now=now,
        consumer="orders",
        namespace="shop",
    )
    errors = [e["error"] for e in said.entries]
    assert errors[:32] == [ERROR] * 32
    assert errors[32:] == ["NotAnOrder"] * 8
    again = setasides.account(
        setasides.Reading(told=told, telling=frozenset({"a"})),
        previous={setasides.STATUS_FIELD: said.entries},
        now=at(20),
        consumer="orders",
        namespace="shop",
    )
    assert again.streaming[("39", "a", 1)] == "NotAnOrder"
    assert len(again.streaming) == 40
    assert again.events == []
