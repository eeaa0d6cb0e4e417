"""The operator/pod contract: spec parsing, ConfigMap names and data, conditions, pod states."""

from __future__ import annotations

import datetime
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventhub_balancer import errors
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    conditions,
    configmaps,
    failurepolicy,
    podassignments,
    podstates,
    specs,
    startpositions,
    timestamps,
)

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
SPEC = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "b", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "c"}},
}


def test_spec_defaults() -> None:
    spec = specs.parse_spec(SPEC)
    assert spec.consumer_group == "$Default"
    assert spec.start_position == startpositions.EARLIEST
    assert spec.balancing == specs.Balancing()
    assert spec.processing == failurepolicy.Processing(max_attempts=10, on_failure="park")
    assert spec.selector.to_query() == "app=c"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"startPosition": "middle"}, "spec.startPosition"),
        ({"startPosition": {"sequenceNumber": -1}}, "spec.startPosition.sequenceNumber"),
        ({"startPosition": {"enqueuedTime": "yesterday"}}, "spec.startPosition.enqueuedTime"),
        (
            {
                "checkpointStore": {
                    "containerName": "checkpoints",
                    "credentials": {"workloadIdentity": {}},
                }
            },
            "spec.checkpointStore.accountUrl",
        ),
        ({"selector": {}}, "spec.selector"),
        ({"balancing": {"weighting": "size"}}, "spec.balancing.weighting"),
        ({"balancing": {"lagTolerance": 11}}, "spec.balancing.lagTolerance"),
        ({"balancing": {"lagTolerance": "high"}}, "spec.balancing.lagTolerance"),
        ({"processing": {"maxAttempts": 0}}, "spec.processing.maxAttempts"),
        ({"processing": {"maxAttempts": True}}, "spec.processing.maxAttempts"),
        ({"processing": {"onFailure": "drop"}}, "spec.processing.onFailure"),
        ({"processing": {"retries": 3}}, "spec.processing.retries"),
        ({"processing": "park"}, "spec.processing"),
        (
            {"eventHub": {"fullyQualifiedNamespace": "x", "name": "y", "credentials": {}}},
            "spec.eventHub.credentials",
        ),
    ],
)
def test_spec_errors_name_the_field(patch: dict[str, object], field: str) -> None:
    with pytest.raises(errors.InvalidInput) as e:
        specs.parse_spec({**SPEC, **patch})
    assert e.value.field == field


def test_lag_tolerance_reaches_the_planner() -> None:
    spec = specs.parse_spec({**SPEC, "balancing": {"weighting": "lag", "lagTolerance": 0.5}})
    options = spec.balancing.to_options()
    assert options.weighting == "lag"
    assert options.lag_tolerance == 0.5
    assert specs.parse_spec(SPEC).balancing.to_options().lag_tolerance == (
        models.DEFAULT_LAG_TOLERANCE
    )


@pytest.mark.parametrize(
    ("start", "encoded"),
    [
        (None, '"earliest"'),
        ("latest", '"latest"'),
        ({"sequenceNumber": 5}, '{"sequenceNumber":5}'),
        ({"enqueuedTime": "2024-05-01T00:00:00Z"}, '{"enqueuedTime":"2024-05-01T00:00:00Z"}'),
    ],
)
def test_start_position_reaches_the_configmap_as_json(start: object, encoded: str) -> None:
    spec = specs.parse_spec({**SPEC, "startPosition": start})
    data = podassignments.build_data(
        spec=spec, consumer="orders", pod="c-0", generation=1, partitions={}
    )
    assert data[configmaps.KEY_START_POSITION] == encoded


def test_selector_expressions() -> None:
    sel = specs.parse_spec(
        {
            **SPEC,
            "selector": {
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]},
                    {"key": "x", "operator": "DoesNotExist"},
                ]
            },
        }
    ).selector
    assert sel.matches({"tier": "a"})
    assert not sel.matches({"tier": "c"})
    assert not sel.matches({"tier": "a", "x": "1"})
    assert sel.to_query() == "tier in (a,b),!x"


def test_names_and_labels_are_bounded() -> None:
    name = configmaps.configmap_name(consumer="orders", pod="c-0")
    assert re.fullmatch(r"ehb-orders-c-0-[0-9a-f]{10}", name), name
    assert name == configmaps.configmap_name(consumer="orders", pod="c-0")  # stable
    long = configmaps.configmap_name(consumer="o" * 200, pod="p" * 200)
    assert len(long) <= 253
    assert long != configmaps.configmap_name(consumer="o" * 200, pod="p" * 199)
    value = configmaps.label_value("x" * 100)
    assert len(value) <= 63
    assert value != configmaps.label_value("x" * 99 + "y")
    assert configmaps.label_value("short") == "short"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("a-b", "c"), ("a", "b-c")),
        (("orders-eu", "west-0"), ("orders", "eu-west-0")),
        (("x", "y-z-1"), ("x-y", "z-1")),
    ],
)
def test_configmap_names_of_different_pairs_differ(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    # Without the hash both would be "ehb-a-b-c": two pods sharing one ConfigMap.
    assert f"ehb-{one[0]}-{one[1]}" == f"ehb-{other[0]}-{other[1]}"
    first = configmaps.configmap_name(consumer=one[0], pod=one[1])
    second = configmaps.configmap_name(consumer=other[0], pod=other[1])
    assert first != second
    assert first.startswith(f"ehb-{one[0]}-{one[1]}-")
    assert len(first) <= configmaps.MAX_NAME


def test_data_round_trip_has_no_secret_and_steady_generation() -> None:
    spec = specs.parse_spec(SPEC)
    parts = {
        models.PartitionId("1"): podassignments.PartitionEntry(epoch=3, state="revoking", since=T0)
    }
    data = podassignments.desired_data(
        spec=spec, consumer="orders", pod="c-0", partitions=parts, current=None
    )
    assert data is not None
    assert data["generation"] == "1"
    assert "SharedAccessKey" not in str(data)
    parsed = podassignments.parse_data(data)
    assert parsed.partitions == parts
    assert not parsed.problems
    assert parsed.start_position == "earliest"
    assert (
        podassignments.desired_data(
            spec=spec, consumer="orders", pod="c-0", partitions=parts, current=data
        )
        is None
    )
    changed = podassignments.desired_data(
        spec=spec, consumer="orders", pod="c-0", partitions={}, current=data
    )
    assert changed is not None
    assert changed["generation"] == "2"


def test_the_failure_policy_reaches_the_pod_through_its_configmap() -> None:
    spec = specs.parse_spec({**SPEC, "processing": {"maxAttempts": 3, "onFailure": "deadLetter"}})
    data = podassignments.build_data(
        spec=spec, consumer="orders", pod="c-0", generation=1, partitions={}
    )
    assert podassignments.parse_data(data).processing == failurepolicy.Processing(
        max_attempts=3, on_failure="deadLetter"
    )
    # An operator from before the policy existed writes no key: the pod takes the default.
    older = {k: v for k, v in data.items() if k != configmaps.KEY_PROCESSING}
    assert podassignments.parse_data(older).processing == failurepolicy.Processing()
    assert not podassignments.parse_data(older).problems
    broken = podassignments.parse_data({**data, configmaps.KEY_PROCESSING: '{"onFailure":"x"}'})
    assert broken.processing == failurepolicy.Processing()
    assert broken.problems
    assert "processing" in broken.problems[0]


def test_the_pod_grace_reaches_the_pod_through_its_configmap() -> None:
    """The pod keeps a take-up from making it NotReady past ``podGraceSeconds``
    (`consumer.takeups`), so the operator writes it, as text, next to the failure policy."""
    for grace in (5, 0, 86400):
        spec = specs.parse_spec({**SPEC, "balancing": {"podGraceSeconds": grace}})
        data = podassignments.build_data(
            spec=spec, consumer="orders", pod="c-0", generation=1, partitions={}
        )
        assert data[configmaps.KEY_POD_GRACE_SECONDS] == str(grace)
        parsed = podassignments.parse_data(data)
        assert (parsed.pod_grace_seconds, parsed.problems) == (grace, ())
    # At the default the key is left out: the very data older builds wrote (test_version_skew),
    # which a pod reads as an older operator's, with the bound of the default grace.
    default = podassignments.build_data(
        spec=specs.parse_spec(SPEC), consumer="orders", pod="c-0", generation=1, partitions={}
    )
    assert configmaps.KEY_POD_GRACE_SECONDS not in default
    assert podassignments.parse_data(default).pod_grace_seconds is None
    assert not podassignments.parse_data(default).problems
    # A change of the grace reaches the pods (a generation more), and so does the way back.
    five = specs.parse_spec({**SPEC, "balancing": {"podGraceSeconds": 5}})
    changed = podassignments.desired_data(
        spec=five, consumer="orders", pod="c-0", partitions={}, current=default
    )
    assert changed is not None
    assert (changed["generation"], changed[configmaps.KEY_POD_GRACE_SECONDS]) == ("2", "5")
    back = podassignments.desired_data(
        spec=specs.parse_spec(SPEC), consumer="orders", pod="c-0", partitions={}, current=changed
    )
    assert back is not None
    assert configmaps.KEY_POD_GRACE_SECONDS not in back
    # Unreadable: said (the operator rewrites it) and read as absent.
    for bad in ("-1", "2.5", "five", "", " 5", "1234567890"):
        broken = podassignments.parse_data({**default, configmaps.KEY_POD_GRACE_SECONDS: bad})
        assert broken.pod_grace_seconds is None
        assert broken.problems == (f"podGraceSeconds {bad!r} is not a whole number of seconds",)


def test_a_pod_keeps_the_policy_when_a_newer_operator_adds_a_field_to_it() -> None:
    """An operator newer than the pod may write a field of the policy the pod does not know
    yet: the pod keeps what it does know (dead-lettering here), where refusing the whole
    policy would park the batches its user asked to dead-letter."""
    spec = specs.parse_spec({**SPEC, "processing": {"maxAttempts": 3, "onFailure": "deadLetter"}})
    data = podassignments.build_data(
        spec=spec, consumer="orders", pod="c-0", generation=1, partitions={}
    )
    newer = {
        **data,
        configmaps.KEY_PROCESSING: '{"maxAttempts":3,"onFailure":"deadLetter","backoff":"5s"}',
    }
    parsed = podassignments.parse_data(newer)
    assert parsed.processing == failurepolicy.Processing(max_attempts=3, on_failure="deadLetter")
    assert not parsed.problems
    # The spec itself still refuses a field it does not know, naming it.
    with pytest.raises(errors.InvalidInput, match=r"spec\.processing\.backoff"):
        specs.parse_spec({**SPEC, "processing": {"onFailure": "park", "backoff": "5s"}})


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"partitions": "{oops", "generation": "1"},
        {"partitions": "[]", "generation": "x"},
        {"partitions": '{"1": {"epoch": -1}}', "generation": "1"},
        "not a mapping",
    ],
)
def test_corrupt_data_needs_repair(data: object) -> None:
    assert podassignments.parse_data(data).needs_repair


def test_pod_annotations_both_sides() -> None:
    value = configmaps.build_released({"10": 2, "2": 1})
    assert value == '{"2":1,"10":2}'
    assert configmaps.parse_released({configmaps.ANNOTATION_RELEASED: value}) == {"2": 1, "10": 2}
    assert configmaps.parse_released({configmaps.ANNOTATION_RELEASED: "junk"}) == {}
    assert configmaps.parse_applied_generation({configmaps.ANNOTATION_APPLIED_GENERATION: "4"}) == 4
    assert (
        configmaps.parse_applied_generation({configmaps.ANNOTATION_APPLIED_GENERATION: "-"}) is None
    )


def test_condition_transition_time_moves_only_with_status() -> None:
    c = conditions.Condition(type="Ready", status="True", reason="A", message="m")
    first = conditions.apply(None, [c], observed_generation=1, now=T0)
    later = T0 + datetime.timedelta(minutes=5)
    same = conditions.apply(
        first,
        [conditions.Condition(type="Ready", status="True", reason="B", message="n")],
        observed_generation=2,
        now=later,
    )
    assert same[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert same[0]["reason"] == "B"
    assert same[0]["observedGeneration"] == 2
    flipped = conditions.apply(
        same,
        [conditions.Condition(type="Ready", status="False", reason="C", message="o")],
        observed_generation=2,
        now=later,
    )
    assert flipped[0]["lastTransitionTime"] == timestamps.format_time(later)


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_a_moment_reads_back_as_the_same_text_and_keeps_its_milliseconds(seconds: float) -> None:
    """The record's and the ConfigMaps' moments are read back and written again every cycle:
    the text must not drift (a write every cycle), and must keep the milliseconds that tell a
    grant from its revocation within one second."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    text = timestamps.format_moment(moment)
    again = timestamps.parse_time(text)
    assert again is not None
    assert timestamps.format_moment(again) == text
    assert again <= moment < again + datetime.timedelta(milliseconds=1)
    whole = moment.replace(microsecond=0)
    assert timestamps.format_moment(whole) == timestamps.format_time(whole)


def pod(**status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "uid": "u", "creationTimestamp": "2024-05-01T00:00:00Z"},
        "status": status,
    }


def test_pod_states() -> None:
    ready = pod(
        phase="Running",
        conditions=[
            {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:00:00Z"}
        ],
    )
    assert podstates.pod_state(ready).state == "ready"
    assert podstates.pod_state(ready).since == T0
    notready = pod(
        phase="Running",
        conditions=[
            {"type": "Ready", "status": "False", "lastTransitionTime": "2024-05-01T12:00:00Z"}
        ],
    )
    assert podstates.pod_state(notready).state == "notready"
    assert podstates.pod_state(pod(phase="Pending")).state == "notready"
    assert podstates.pod_state(pod(phase="Failed")).state is None
    terminating = {**ready, "metadata": {"name": "p", "deletionTimestamp": "2024-05-01T12:00:00Z"}}
    assert podstates.pod_state(terminating).state == "terminating"
    assert podstates.pod_state(terminating).since == T0


def test_a_terminating_pod_is_terminating_since_its_grace_period_began() -> None:
    # The API server writes when the grace period ends; the SIGTERM came that much earlier.
    meta = {"name": "p", "deletionTimestamp": "2024-05-01T12:00:30Z"}
    graceful = {"metadata": {**meta, "deletionGracePeriodSeconds": 30}}
    assert podstates.pod_state(graceful).since == T0
    for odd in (-1, "30", True, 10**12):
        body = {"metadata": {**meta, "deletionGracePeriodSeconds": odd}}
        assert podstates.pod_state(body).since == T0 + datetime.timedelta(seconds=30), odd


def test_a_notready_pod_on_a_node_is_starting_and_one_no_node_took_is_not() -> None:
    running = pod(
        phase="Running",
        conditions=[
            {"type": "Ready", "status": "False", "lastTransitionTime": "2024-05-01T12:00:00Z"}
        ],
    )
    assert podstates.pod_state(running).starting
    placed = {**pod(phase="Pending"), "spec": {"nodeName": "node-1"}}
    assert podstates.pod_state(placed).starting
    bound = pod(phase="Pending", conditions=[{"type": "PodScheduled", "status": "True"}])
    assert podstates.pod_state(bound).starting
    unschedulable = pod(
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    assert not podstates.pod_state(unschedulable).starting
    assert not podstates.pod_state(pod(phase="Pending")).starting
    # What pod_state reads includes the node, so a kept state is not reused across binding.
    assert podstates.state_inputs(placed) != podstates.state_inputs(pod(phase="Pending"))


def test_a_sighting_lasts_while_what_since_is_read_from_stays_the_same() -> None:
    def ready(since: str, **labels: str) -> dict[str, object]:
        meta = {"name": "p", "uid": "u", "creationTimestamp": "2024-05-01T00:00:00Z"}
        condition = {"type": "Ready", "status": "True", "lastTransitionTime": since}
        status = {"phase": "Running", "conditions": [condition]}
        return {"metadata": {**meta, "labels": labels}, "status": status}

    first = podstates.sightings({}, [ready("2024-05-01T12:00:00Z")], wall=10.0)
    assert (first["p"].first, first["p"].witnessed) == (10.0, False)
    # A new body that changes only what since is not read from (a label): still first seen at 10.
    relabelled = podstates.sightings(first, [ready("2024-05-01T12:00:00Z", tier="a")], wall=20.0)
    assert (relabelled["p"].first, relabelled["p"].witnessed) == (10.0, False)
    # The Ready condition turned again: seen anew, and witnessed, as the same pod was seen before.
    turned = podstates.sightings(relabelled, [ready("2024-05-01T12:00:25Z")], wall=30.0)
    assert (turned["p"].first, turned["p"].witnessed) == (30.0, True)
