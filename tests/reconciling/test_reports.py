"""`reports`: what the operator makes of the partitions its pods report in trouble.

A failing, parked or stuck partition stays where it is and is shown (status, condition,
Events, metric); a lost one is given out again at the next epoch, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest
import yaml

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, configmaps, failurepolicy, partitionreports
from eventhub_balancer.reconciling import (
    decisions,
    fleets,
    observations,
    readbacks,
    reports,
    troubleevents,
)
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod
from tests.support import paths

ERROR = "ValueError: cannot decode event 17\nTraceback (most recent call last): ..."


def started(*pods: dict[str, Any], ids: tuple[str, ...] = bodies.IDS) -> observations.Observation:
    """Two cycles in: every partition assigned, written and read back."""
    first, decision = bodies.decide_fully(bodies.observe(pods=pods, ids=ids), now=at(0))
    return bodies.applied(first, decision)


def report(
    partition: str,
    state: partitionreports.ReportState,
    epoch: int,
    attempts: int = 0,
    error: str = "",
) -> partitionreports.PartitionReport:
    return partitionreports.PartitionReport(
        partition=partition, epoch=epoch, state=state, attempts=attempts, error=error
    )


def reported(
    observation: observations.Observation,
    pod_name: str,
    reports_by_partition: Mapping[str, tuple[Any, ...]],
) -> observations.Observation:
    """``pod_name`` writes its partition reports: {partition: (state, epoch[, attempts,
    error])}, as the pod's runtime does (it replaces the annotation as a whole)."""
    value = partitionreports.build({p: report(p, *r) for p, r in reports_by_partition.items()})
    return bodies.with_reports(observation, pod_name, value)


def failing_of(observation: observations.Observation) -> Any:
    """``status.failing`` (not a key of the shared `statusbodies.StatusBody`)."""
    status: Mapping[str, Any] = observation.status
    return status.get("failing")


def next_cycle(
    observation: observations.Observation, *, now: float, checkpoints: Any = None
) -> tuple[observations.Observation, decisions.Decision]:
    """Decide as a cycle does, and the observation once the decision is written."""
    seen, decision = bodies.decide_fully(observation, now=at(now), checkpoints=checkpoints)
    return bodies.applied(seen, decision), decision


def test_a_parked_partition_stays_on_its_ready_pod_and_is_shown() -> None:
    observation = started(pod("a"), pod("b"))
    assert bodies.assignment(observation)["a"] == {"0": (1, "owned"), "1": (1, "owned")}
    observation = reported(observation, "a", {"1": ("parked", 1, 10, ERROR)})

    after, decision = next_cycle(observation, now=5)

    assert decision.moves == ()
    assert decision.epochs is None
    assert decision.writes.count == 0
    assert bodies.assignment(after) == bodies.assignment(observation)
    failing = bodies.condition(after, "PartitionsFailing")
    assert (failing["status"], failing["reason"]) == ("True", "PartitionsParked")
    assert (
        "1 on a parked after 10 attempts: ValueError: cannot decode event 17"
        in (failing["message"])
    )
    assert "Traceback" not in failing["message"]  # the first line only
    assert bodies.condition(after, "Ready")["status"] == "True"
    assert failing_of(after) == [
        {
            "partition": "1",
            "pod": "a",
            "epoch": 1,
            "state": "parked",
            "attempts": 10,
            "error": "ValueError: cannot decode event 17",
            "since": "2024-05-01T12:00:05Z",
        }
    ]
    assert [(e.reason, e.type) for e in decision.events] == [("PartitionParked", "Warning")]
    assert "a parked partition 1" in decision.events[0].message
    # The ways out, where the user meets the parking.
    assert "restart the pod to try again) or until onFailure is deadLetter" in (
        decision.events[0].message
    )
    assert decision.figures is not None
    assert decision.figures.troubled == {"failing": 0, "parked": 1, "stuck": 0, "lost": 0}

    # The same report on the next cycles: nothing to write, no Event again.
    again, quiet = next_cycle(after, now=10)
    assert (quiet.status, quiet.events, quiet.writes.count, quiet.moves) == ({}, (), 0, ())
    assert failing_of(again)[0]["since"] == "2024-05-01T12:00:05Z"


def test_a_pod_reporting_trouble_is_no_assignment_tampering() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "b", {"2": ("failing", 1, 3, ERROR)})
    spec = observation.spec
    assert spec is not None
    fleet = fleets.build(
        scope=None,
        pods=observation.pods,
        configmaps=observation.configmaps,
        selector=spec.selector,
        consumer=bodies.NAME,
    )
    maps, states = fleet.stored_maps(), fleet.states
    back = readbacks.read_back(
        maps=maps, pods=states, status=observation.status, stored_epochs={}, now=at(5)
    )
    assert (dict(back.problems), dict(back.tampered)) == ({}, {})
    assert list(back.troubles) == ["2"]
    decision = bodies.decide(observation, now=at(5))
    assert not [
        e for e in decision.events if e.reason in ("AssignmentTampered", "ConfigMapRepaired")
    ]
    assert [e.reason for e in decision.events] == ["PartitionFailing"]


def test_a_report_counts_only_for_the_pods_own_partitions_at_their_epochs() -> None:
    observation = started(pod("a"), pod("b"))
    # "a" owns 0 and 1 at epoch 1: it cannot report on "b"'s partition 2, nor at epoch 7,
    # and a partition reported lost at another epoch moves nothing.
    observation = reported(
        observation, "a", {"2": ("parked", 1), "0": ("stuck", 7), "1": ("lost", 2)}
    )
    after, decision = next_cycle(observation, now=5)
    assert (decision.moves, decision.epochs, decision.events) == ((), None, ())
    failing = bodies.condition(after, "PartitionsFailing")
    assert (failing["status"], failing["reason"]) == ("False", "AllPartitionsProcessing")
    assert failing_of(after) == []


def test_a_lost_partition_is_given_out_again_at_the_next_epoch_once() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "b", {"3": ("lost", 1, 0, "epoch 2 holds the blob")})

    after, decision = next_cycle(observation, now=35)

    assert decision.epochs is not None
    assert decision.epochs["3"] == 2
    assert [(m.partition, m.target, m.epoch) for m in decision.moves] == [("3", "b", 2)]
    assert bodies.assignment(after)["b"] == {"2": (1, "owned"), "3": (2, "owned")}
    assert bodies.assignment(after)["a"] == {"0": (1, "owned"), "1": (1, "owned")}
    lost = [e for e in decision.events if e.reason == "PartitionLost"]
    assert len(lost) == 1
    assert lost[0].type == "Warning"
    assert "given out again: 3 at epoch 2" in lost[0].message
    failing = bodies.condition(after, "PartitionsFailing")
    assert (failing["status"], failing["reason"]) == ("True", "PartitionsLost")

    # The pod has not rewritten its report yet: at epoch 1 it no longer counts.
    again, second = next_cycle(after, now=36)
    assert (second.epochs, second.moves) == (None, ())
    assert [(e.reason, e.type) for e in second.events] == [("PartitionRecovered", "Normal")]
    assert bodies.condition(again, "PartitionsFailing")["status"] == "False"
    assert failing_of(again) == []
    _, third = next_cycle(again, now=37)
    assert (third.epochs, third.moves, third.events, third.status) == (None, (), (), {})


def test_a_lost_partition_fences_above_the_epoch_that_took_it() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "a", {"0": ("lost", 1)})
    # Whoever took it wrote epoch 5 into the checkpoint blob.
    after, decision = next_cycle(observation, now=35, checkpoints={"0": (5, 100)})
    assert decision.epochs is not None
    assert decision.epochs["0"] == 6
    assert bodies.assignment(after)["a"]["0"] == (6, "owned")


def test_a_partition_lost_while_being_handed_off_is_given_out_at_once() -> None:
    observation = started(pod("a"), pod("b"))
    observation = bodies.with_pods(observation, pod("a"), pod("b"), pod("c"))
    observation, revoke = next_cycle(observation, now=1)
    revoking = [m for m in revoke.moves if m.kind == "revoke"]
    assert revoking
    partition, source = revoking[0].partition, revoking[0].source
    assert source is not None
    observation = reported(observation, source, {partition: ("lost", 1)})
    after, decision = next_cycle(observation, now=2)
    assert [
        (m.partition, m.target, m.epoch) for m in decision.moves if m.partition == partition
    ] == [(partition, "c", 2)]
    assert bodies.assignment(after)["c"][partition] == (2, "owned")


def test_a_parked_partition_moves_only_when_its_pod_is_gone_past_the_grace() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "a", {"0": ("parked", 1, 10, ERROR)})
    observation, _ = next_cycle(observation, now=5)
    # NotReady within the grace (20 s by default): it keeps everything.
    observation = bodies.with_pods(observation, pod("a", ready=False, since=10))
    observation, held = next_cycle(observation, now=20)
    assert held.moves == ()
    # Past the grace: all its partitions move, the parked one included, with new epochs.
    after, moved = next_cycle(observation, now=31)
    assert sorted((m.partition, m.target, m.epoch) for m in moved.moves) == [
        ("0", "b", 2),
        ("1", "b", 2),
    ]
    assert bodies.assignment(after)["b"] == {
        "0": (2, "owned"),
        "1": (2, "owned"),
        "2": (1, "owned"),
        "3": (1, "owned"),
    }
    # "a"'s report was for epoch 1 on a partition it no longer has: the trouble is over, and
    # the Event says where the partition went (it said "no longer in trouble" alone, as if it
    # had recovered on "a").
    assert bodies.condition(after, "PartitionsFailing")["status"] == "False"
    recovered = [e for e in moved.events if e.reason == "PartitionRecovered"]
    assert [(e.type, e.message) for e in recovered] == [
        ("Normal", "partition 0 on a no longer reported in trouble (was parked); b holds it now")
    ]


def test_a_change_of_state_is_news_and_an_end_of_trouble_is_reported() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "a", {"0": ("failing", 1, 3, ERROR)})
    observation, first = next_cycle(observation, now=5)
    assert [e.reason for e in first.events] == ["PartitionFailing"]
    assert bodies.condition(observation, "PartitionsFailing")["reason"] == "PartitionsFailing"

    observation = reported(observation, "a", {"0": ("parked", 1, 10, ERROR)})
    observation, second = next_cycle(observation, now=30)
    assert [e.reason for e in second.events] == ["PartitionParked"]
    assert failing_of(observation)[0]["since"] == "2024-05-01T12:00:30Z"

    observation = reported(observation, "a", {})
    observation, third = next_cycle(observation, now=40)
    assert [(e.reason, e.type) for e in third.events] == [("PartitionRecovered", "Normal")]
    assert "0 on a no longer reported in trouble (was parked)" in third.events[0].message
    failing = bodies.condition(observation, "PartitionsFailing")
    assert (failing["status"], failing["reason"]) == ("False", "AllPartitionsProcessing")
    assert third.figures is not None
    assert third.figures.troubled == {"failing": 0, "parked": 0, "stuck": 0, "lost": 0}


def test_partitions_joining_a_trouble_already_said_are_no_new_event() -> None:
    """A checkpoint container deleted under a pod failed its partitions as their batches came:
    three reports over two seconds, three Events of the same error. The first is said; the
    partitions that join it with that error are shown in the status and the condition only.
    Another error, or another state, is news."""
    ids = tuple(str(i) for i in range(8))
    observation = started(pod("a"), ids=ids)
    gone = "checkpoint container 'checkpoints' does not exist"
    troubles: dict[str, tuple[Any, ...]] = {"0": ("failing", 1, 1, gone)}
    observation, first = next_cycle(reported(observation, "a", troubles), now=5)
    assert [e.message for e in first.events] == [
        f"a keeps failing on partition 0, retrying with backoff: {gone} (after 1 attempt)"
    ]
    troubles.update({p: ("failing", 1, 1, gone) for p in ("1", "2", "3")})
    observation, second = next_cycle(reported(observation, "a", troubles), now=6)
    assert second.events == ()
    assert (
        "4 partitions in trouble" in bodies.condition(observation, "PartitionsFailing")["message"]
    )
    assert [e["partition"] for e in failing_of(observation)] == ["0", "1", "2", "3"]
    troubles["4"] = ("failing", 1, 1, "ValueError: bad event")
    troubles["5"] = ("parked", 1, 10, gone)
    observation, third = next_cycle(reported(observation, "a", troubles), now=7)
    assert [(e.reason, e.message.split(" at ")[0].split(",")[0]) for e in third.events] == [
        ("PartitionFailing", "a keeps failing on partition 4"),
        ("PartitionParked", "a parked partition 5"),
    ]


def test_what_the_status_shows_is_bounded() -> None:
    ids = tuple(str(i) for i in range(0, 80, 2))  # every other one: no run folds two
    observation = started(pod("a"), ids=ids)
    long_error = "RuntimeError: " + "x" * 500
    observation = reported(observation, "a", {p: ("stuck", 1, 0, long_error) for p in ids})
    after, decision = next_cycle(observation, now=5)
    failing = bodies.condition(after, "PartitionsFailing")
    assert failing["message"] == (
        "40 partitions in trouble (40 stuck): 0, 2, 4, 6, 8, 10, 12, 14 and 32 more on a stuck: "
        f"RuntimeError: {'x' * (partitionreports.MAX_ERROR_CHARS - 16)} …"
    )
    assert len(failing["message"]) <= reports.MAX_MESSAGE
    entries = failing_of(after)
    assert [e["partition"] for e in entries] == list(ids)
    assert all(len(e["error"]) == partitionreports.MAX_ERROR_CHARS for e in entries[:32])
    assert all(e["error"] == "" for e in entries[32:])
    (event,) = decision.events
    assert event.reason == "PartitionStuck"
    assert "and 24 more" in event.message
    assert len(event.message) < 2 * reports.MAX_MESSAGE


def test_an_event_says_an_error_once_for_the_partitions_it_stops() -> None:
    """A pod failing on six partitions with one error posted an Event that repeated the error
    six times (one part per partition, each cut at the report's bound)."""
    ids = tuple(str(i) for i in range(8))
    observation = started(pod("a"), ids=ids)
    missing = "EventHubNotFound: Event Hub 'nohub' does not exist: fix spec.eventHub.name"
    troubles = {p: ("failing", 1, 1, missing) for p in ids[:6]}
    troubles["7"] = ("failing", 1, 2, "ValueError: bad event")
    _, decision = next_cycle(reported(observation, "a", troubles), now=5)
    (event,) = decision.events
    assert event.message == (
        f"a keeps failing on partitions 0-5, 7, retrying with backoff: 0-5: {missing} (after 1 "
        "attempt); 7: ValueError: bad event (after 2 attempts)"
    )


def test_an_event_names_its_pod_and_partitions_once() -> None:
    """A failing Event of one error said its pod, its partitions and its state twice:
    ``a keeps failing on partitions 0-5, retrying with backoff: 0-5 on a failing after 1
    attempt: ...``. The first part says them; the rest is the error and its attempts."""
    ids = tuple(str(i) for i in range(6))
    observation = started(pod("a"), ids=ids)
    troubles = {p: ("failing", 1, 1 + int(p) % 2, "RuntimeError: boom") for p in ids}
    _, decision = next_cycle(reported(observation, "a", troubles), now=5)
    (event,) = decision.events
    assert event.message == (
        "a keeps failing on partitions 0-5, retrying with backoff: RuntimeError: boom "
        "(after up to 2 attempts)"
    )


def test_an_event_of_troubles_without_an_error_ends_with_what_happened() -> None:
    def stuck(partition: str, error: str) -> reports.Trouble:
        return reports.Trouble(
            partition=models.PartitionId(partition), pod="a", epoch=1, state="stuck", error=error
        )

    troubles = [stuck("1", ""), stuck("4", "")]
    assert reports.by_error(troubles) == ""
    troubles.append(stuck("3", "slow"))
    assert reports.by_error(troubles) == "1, 4: no error given; 3: slow"


def trouble(partition: str, pod_name: str, error: str, attempts: int = 3) -> reports.Trouble:
    return reports.Trouble(
        partition=models.PartitionId(partition),
        pod=pod_name,
        epoch=1,
        state="failing",
        attempts=attempts,
        error=error,
    )


def test_one_error_on_every_partition_is_said_once_naming_the_first_partitions() -> None:
    error = (
        "EventHubNotFound: consumer group 'analytics' of Event Hub 'orders' in "
        "shop.servicebus.windows.net does not exist: create it, or fix spec.eventHub.consumerGroup"
    )
    troubles = {
        models.PartitionId(str(i)): trouble(str(i), f"orders-{i % 4}", error, attempts=2 + i % 2)
        for i in range(32)
    }
    condition = reports.condition(troubles)
    assert (condition.status, condition.reason) == ("True", "PartitionsFailing")
    assert condition.message == (
        "32 partitions in trouble (32 failing): 0-31 on "
        "orders-0, orders-1, orders-2 and 1 more pod failing after up to 3 attempts: "
        f"{error}"
    )


def test_errors_that_name_their_own_partition_are_said_once_for_the_partitions() -> None:
    """An Event Hubs outage failed each partition of a pod with its own words (``partition
    7: receiving failed 6 times in a row, ...``): the condition named each partition with the
    same error, and the Event listed the error once per partition."""
    own = "partition {}: receiving failed 6 times in a row, last: AMQPConnectionError: refused"
    troubles = {
        models.PartitionId(str(i)): trouble(str(i), "a", own.format(i), attempts=6)
        for i in (1, 7, 16)
    }
    shared = "receiving failed 6 times in a row, last: AMQPConnectionError: refused"
    assert reports.condition(troubles).message == (
        "3 partitions in trouble (3 failing): 1, 7, 16 on a failing after 6 attempts: "
        f"each partition: {shared}"
    )
    assert reports.by_error(list(troubles.values())) == (
        f"each partition: {shared} (after 6 attempts)"
    )
    alone = {models.PartitionId("7"): troubles[models.PartitionId("7")]}
    assert reports.condition(alone).message.endswith(f"failing after 6 attempts: {own.format(7)}")
    # Partition 1's error names partition 16: not its own, so not alike.
    other = trouble("1", "a", "partition 16: its blob was deleted", attempts=6)
    assert other.shape == other.error


def test_partitions_that_meet_an_error_in_their_own_words_make_no_new_event() -> None:
    ids = tuple(str(i) for i in range(4))
    observation = started(pod("a"), ids=ids)
    own = "partition {}: Event Hubs refused the receive position: past the end"
    troubles: dict[str, tuple[Any, ...]] = {"0": ("failing", 1, 1, own.format(0))}
    observation, first = next_cycle(reported(observation, "a", troubles), now=5)
    assert [e.reason for e in first.events] == ["PartitionFailing"]
    troubles.update({p: ("failing", 1, 1, own.format(p)) for p in ("1", "2")})
    observation, second = next_cycle(reported(observation, "a", troubles), now=6)
    assert second.events == ()


def test_many_different_errors_fit_the_message_whole_words_and_the_rest_counted() -> None:
    words = " ".join(f"word{n}" for n in range(40))
    troubles = {
        models.PartitionId(str(i)): trouble(str(i), "a", f"Error{i}: {words}") for i in range(40)
    }
    text = reports.condition(troubles).message
    assert len(text) <= reports.MAX_MESSAGE
    assert text.startswith("40 partitions in trouble (40 failing): 0 on a failing after 3 ")
    assert text.endswith(" more partitions")
    listed = text.split("; ")[:-1]
    assert all(part.endswith("word39") for part in listed)  # each group whole
    left = int(text.rsplit("; and ", 1)[1].split()[0])
    assert left == 40 - len(listed)


def test_a_message_too_long_for_one_group_is_cut_between_words() -> None:
    error = "E: " + " ".join("abcdefghi" for _ in range(150))  # longer than a message
    assert len(error) > reports.MAX_MESSAGE
    text = reports.message({models.PartitionId("0"): trouble("0", "a", error)})
    assert len(text) <= reports.MAX_MESSAGE
    assert text.endswith(" abcdefghi" + conditions.CUT)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short enough", 20, "short enough"),
        ("one two three four", 12, "one two …"),
        ("one two three four", 9, "one two …"),
        ("one two; three", 11, "one two …"),
        ("unbreakable", 6, "unbr …"),
        # Back to a word's start only when that drops at most WORD_BACKOFF characters.
        ("see " + "a" * 20, 20, "see …"),
        ("see " + "a" * 50, 40, "see " + "a" * 34 + " …"),
    ],
)
def test_shorten_cuts_between_words(text: str, limit: int, expected: str) -> None:
    assert conditions.shorten(text, limit) == expected
    assert len(conditions.shorten(text, limit)) <= limit


def test_a_malformed_previous_status_entry_is_skipped() -> None:
    entries = reports.previous_entries(
        {"failing": [{"partition": "0", "pod": "a", "epoch": "x", "state": "parked"}, 7, None]}
    )
    assert entries == {}
    assert reports.previous_entries({"failing": "nonsense"}) == {}


def test_the_status_written_passes_the_crd_schema() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "a", {"0": ("parked", 1, 10, ERROR), "1": ("stuck", 1)})
    after, _ = next_cycle(observation, now=5)
    with (paths.CRDS / "eventhubconsumers.yaml").open() as f:
        crd = yaml.safe_load(f)
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    problems = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(after.status)]
    assert problems == []
    assert [e["state"] for e in failing_of(after)] == ["parked", "stuck"]


def test_a_pod_reporting_every_new_epoch_lost_raises_it_once_per_hold() -> None:
    observation = started(pod("a"), pod("b"))
    hold = reports.LOST_HOLD_SECONDS
    epochs = []
    now = 35.0
    for _ in range(12):  # a report at the current epoch, every 5 s
        current = bodies.assignment(observation)["b"].get("3")
        if current is not None:
            observation = reported(observation, "b", {"3": ("lost", current[0])})
        observation, decision = next_cycle(observation, now=now)
        if decision.epochs is not None:
            epochs.append((now, decision.epochs["3"]))
        else:
            # Held: the cycle comes back when the report is due, not before.
            assert decision.next_in is not None
            assert decision.next_in <= hold
        now += 5.0
    # Once at the first report, then once per hold: not once per cycle.
    assert [e for _t, e in epochs] == [2, 3]
    assert epochs[1][0] - epochs[0][0] >= hold


def test_a_held_lost_report_is_shown_and_a_quiet_decision_stands_only_until_it_is_due() -> None:
    observation = started(pod("a"), pod("b"))
    observation = reported(observation, "b", {"3": ("lost", 1)})
    # Given at 0, reported at once: held until 30.
    after, decision = next_cycle(observation, now=1)
    assert decision.epochs is None
    assert bodies.condition(after, "PartitionsFailing")["reason"] == "PartitionsLost"
    quiet = bodies.decide(after, now=at(2))
    assert quiet.epochs is None
    assert quiet.settled_until is not None
    assert quiet.settled_until <= bodies.at(reports.LOST_HOLD_SECONDS).timestamp()
    _, due = next_cycle(after, now=reports.LOST_HOLD_SECONDS)
    assert due.epochs is not None
    assert due.epochs["3"] == 2


def test_one_more_pod_and_one_more_partition_are_counted_in_the_singular() -> None:
    """The message read "on a, b, c and 1 more pods" and "; and 1 more partitions"."""
    same = {
        models.PartitionId(str(i)): trouble(str(i), name, "E: same")
        for i, name in enumerate("abcd")
    }
    assert reports.message(same) == (
        "4 partitions in trouble (4 failing): 0-3 on a, b, c and 1 more pod failing "
        "after 3 attempts: E: same"
    )
    words = " ".join("abcdefghi" for _ in range(150))
    two = {
        models.PartitionId("0"): trouble("0", "a", "E: " + words),
        models.PartitionId("1"): trouble("1", "b", "F: " + words),
    }
    text = reports.message(two)
    assert len(text) <= reports.MAX_MESSAGE
    assert text.endswith("; and 1 more partition")


def test_errors_that_differ_in_generated_ids_alone_are_one_group() -> None:
    """Live, a Spark sink that cannot write: every partition's error named its own staging
    directory and attempt, so PartitionsFailing listed "0 on a ...; 1 on a ...; 2 on a ...;
    and 29 more partitions", the cause said three times over and no partition range."""

    def failed(partition: str, staging: str, attempt: str) -> reports.Trouble:
        error = (
            "Py4JJavaError: calling parquet: java.io.IOException: Mkdirs failed to create "
            f"file:/proc/out/.spark-staging-{staging}/_temporary/0/_temporary/attempt_{attempt}"
        )
        return trouble(partition, "a", error, attempts=6)

    troubles = {
        models.PartitionId("0"): failed(
            "0", "b8e1a20a-83f6-4db4-94be-b9557e774b33", "202612062323513661683969675872895_0"
        ),
        models.PartitionId("1"): failed(
            "1", "44bd3b8d-ef4d-4489-ba05-4ec1a36b47d6", "202612062323413364508252931267347_0"
        ),
        models.PartitionId("2"): failed("2", "not-an-id", "12345_0"),  # a cause of its own
    }
    assert reports.message(troubles) == (
        "3 partitions in trouble (3 failing): 0-1 on a failing after 6 attempts: "
        "Py4JJavaError: calling parquet: java.io.IOException: Mkdirs failed to create "
        "file:/proc/out/.spark-staging-*/_temporary/0/_temporary/attempt_*_0; "
        "2 on a failing after 6 attempts: Py4JJavaError: calling parquet: java.io.IOException: "
        "Mkdirs failed to create file:/proc/out/.spark-staging-not-an-id/_temporary/0/_temporary/"
        "attempt_12345_0"
    )


def test_partitions_that_left_their_troubled_pod_are_said_where_they_are() -> None:
    """Two owners now, or none: said in the plural, and not at all for a partition that stays."""
    previous: dict[str, Any] = {
        "failing": [
            {"partition": p, "pod": "a", "epoch": 1, "state": "parked"} for p in ("0", "1", "2")
        ]
    }
    assignment = {
        models.PartitionId("0"): models.Ownership(owner=models.MemberName("b"), epoch=2),
        models.PartitionId("1"): models.Ownership(owner=models.MemberName("c"), epoch=2),
        models.PartitionId("2"): models.Ownership(owner=None, epoch=1),
    }
    (event,) = troubleevents.trouble_events({}, previous=previous, assignment=assignment)
    assert event.message == (
        "partitions 0-2 on a no longer reported in trouble (was parked); b, c hold them now"
    )
    assignment = {p: models.Ownership(owner=models.MemberName("a"), epoch=1) for p in assignment}
    (event,) = troubleevents.trouble_events({}, previous=previous, assignment=assignment)
    assert event.message == "partitions 0-2 on a no longer reported in trouble (was parked)"


def test_a_partition_under_dead_letters_is_not_said_to_have_just_recovered() -> None:
    """Under ``onFailure: deadLetter`` a failing report ends when the batch is set aside too:
    the Event said only "no longer reported in trouble", and nothing in the Events or the
    status told that a batch had gone to the dead letters."""
    previous: dict[str, Any] = {
        "failing": [
            {"partition": "0", "pod": "a", "epoch": 1, "state": "failing"},
            {"partition": "1", "pod": "b", "epoch": 1, "state": "parked"},
        ]
    }
    assignment = {
        models.PartitionId(p): models.Ownership(owner=models.MemberName(o), epoch=1)
        for p, o in (("0", "a"), ("1", "b"))
    }
    aside = failurepolicy.Processing(max_attempts=2, on_failure="deadLetter")
    failing, parked = troubleevents.trouble_events(
        {}, previous=previous, assignment=assignment, processing=aside
    )
    assert failing.message == (
        "partition 0 on a no longer reported in trouble (was failing): its batch went through "
        "on a retry, or went to the dead letters after spec.processing.maxAttempts (2) "
        "(ehb deadletters list)"
    )
    # A partition parks under park only: its pod sets the batch aside once the spec says
    # deadLetter. On the local stack that read "(was parked)" alone, with the batch in the
    # dead letters.
    assert parked.message == (
        "partition 1 on b no longer reported in trouble (was parked): its batch went to the "
        "dead letters as onFailure says (ehb deadletters list)"
    )
    # Taken from its pod, deleted to try again, it was not set aside there.
    elsewhere = {**assignment, models.PartitionId("1"): models.Ownership(owner="c", epoch=2)}
    _, moved = troubleevents.trouble_events(
        {}, previous=previous, assignment=elsewhere, processing=aside
    )
    assert moved.message == (
        "partition 1 on b no longer reported in trouble (was parked); c holds it now"
    )
    # Under park nothing is set aside.
    parked_only = {"failing": previous["failing"][1:]}
    for processing in (None, failurepolicy.Processing()):
        (said,) = troubleevents.trouble_events(
            {}, previous=parked_only, assignment=assignment, processing=processing
        )
        assert said.message == "partition 1 on b no longer reported in trouble (was parked)"
    for processing in (None, failurepolicy.Processing()):
        said = troubleevents.trouble_events(
            {}, previous=previous, assignment=assignment, processing=processing
        )
        assert said[0].message == "partition 0 on a no longer reported in trouble (was failing)"


def test_a_cycle_says_a_failing_batch_of_an_older_pod_may_be_in_the_dead_letters() -> None:
    """A pod from before the batches set aside were told (`test_setasides` for today's)."""
    spec = {**bodies.SPEC, "processing": {"maxAttempts": 2, "onFailure": "deadLetter"}}
    first, decision = bodies.decide_fully(
        bodies.observe(pods=(pod("a"), pod("b")), spec=spec), now=at(0)
    )
    failing = {p: ("failing", 1, 1, ERROR) for p in ("0", "1")}
    observation = reported(bodies.applied(first, decision), "a", failing)
    observation, _ = next_cycle(observation, now=5)
    older = reported(observation, "a", {})
    for cm in older.configmaps:
        cm["metadata"]["annotations"][configmaps.ANNOTATION_PARTITION_REPORTS] = "{}"
    observation, ended = next_cycle(older, now=10)
    (event,) = ended.events
    assert event.reason == "PartitionRecovered"
    assert event.message == (
        "partitions 0-1 on a no longer reported in trouble (was failing): their batches went "
        "through on a retry, or went to the dead letters after spec.processing.maxAttempts (2) "
        "(ehb deadletters list)"
    )
