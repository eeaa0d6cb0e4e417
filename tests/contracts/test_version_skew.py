"""An operator and consumer pods of different builds: what they exchange stays readable both ways.

Users upgrade the operator long before they rebuild their consumer images (which embed this
package at the version they pinned), or the reverse. The two meet in three places only: the
pod's assignment ConfigMap (its name, labels and data, written by the operator), the three
annotations the pod writes on it, and the checkpoint blobs' metadata. The values below are
what the operator and the runtime of 2026-11-23 (the oldest build docs/operations.md,
"Upgrading", supports beside today's) wrote for the same inputs, recorded from that build.

Today's writers must write the very same bytes, so an older pod reads today's assignment and
an older operator reads today's acknowledgements as they always did; today's readers must read
what the older build wrote. A change that breaks either is a change of the supported skew:
say so in docs/operations.md, and keep the older form readable.
"""

from __future__ import annotations

import datetime

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    bounds,
    checkpointblobs,
    configmaps,
    failurepolicy,
    partitionreports,
    podassignments,
    specs,
    startpositions,
)

CONSUMER = "orders"
POD = "orders-7d9f-abcde"
SPEC = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "consumer"}},
    "startPosition": {"enqueuedTime": "2026-11-20T08:00:00Z"},
    "processing": {"maxAttempts": 3, "onFailure": "deadLetter"},
}
SINCE = datetime.datetime(2026, 11, 23, 21, 0, 5, tzinfo=datetime.UTC)

# --- recorded from the build of 2026-11-23 ---

#: `configmap_name` and `labels` of (CONSUMER, POD): a pod applies only this name and labels.
RECORDED_NAME = "ehb-orders-orders-7d9f-abcde-f9d3b3bb7b"
RECORDED_LABELS = {
    "eventhub-balancer.dev/consumer": "orders",
    "eventhub-balancer.dev/pod": "orders-7d9f-abcde",
    "app.kubernetes.io/managed-by": "eventhub-balancer",
}
#: The operator's annotation and the pod's three.
RECORDED_ANNOTATIONS = (
    "eventhub-balancer.dev/pod-uid",
    "eventhub-balancer.dev/applied-generation",
    "eventhub-balancer.dev/released",
    "eventhub-balancer.dev/partition-reports",
)
#: The data of SPEC at generation 7: partition 0 owned at epoch 3, 1 revoking at 5 since SINCE.
RECORDED_DATA = {
    "checkpointAccountUrl": "",
    "checkpointContainer": "checkpoints",
    "checkpointCredentials": '{"connectionStringSecretRef":{"name":"blob","key":"cs"}}',
    "consumer": "orders",
    "consumerGroup": "$Default",
    "eventHubCredentials": '{"connectionStringSecretRef":{"name":"eh","key":"cs"}}',
    "eventHubName": "orders",
    "fullyQualifiedNamespace": "shop.servicebus.windows.net",
    "generation": "7",
    "partitions": (
        '{"0":{"epoch":3,"state":"owned"},'
        '"1":{"epoch":5,"state":"revoking","since":"2026-11-23T21:00:05Z"}}'
    ),
    "pod": "orders-7d9f-abcde",
    "processing": '{"maxAttempts":3,"onFailure":"deadLetter"}',
    "startPosition": '{"enqueuedTime":"2026-11-20T08:00:00Z"}',
}
#: The pod's released annotation for {1: 5, 2: 4}, and its report of partition 0 parked.
RECORDED_RELEASED = '{"1":5,"2":4}'
RECORDED_REPORTS = '{"0":{"epoch":3,"state":"parked","attempts":3,"error":"ValueError: bad order"}}'
#: A checkpoint at sequence number 41 (offset 4096) by POD at epoch 3.
RECORDED_METADATA = {
    "offset": "4096",
    "sequencenumber": "41",
    "ownerid": "orders-7d9f-abcde",
    "epoch": "3",
}


def todays_data(spec: specs.ConsumerSpec | None = None) -> dict[str, str]:
    return podassignments.build_data(
        spec=spec or specs.parse_spec(SPEC),
        consumer=CONSUMER,
        pod=POD,
        generation=7,
        partitions={
            models.PartitionId("0"): podassignments.PartitionEntry(epoch=3),
            models.PartitionId("1"): podassignments.PartitionEntry(
                epoch=5, state="revoking", since=SINCE
            ),
        },
    )


def test_todays_operator_writes_the_assignment_an_older_pod_reads() -> None:
    assert configmaps.configmap_name(consumer=CONSUMER, pod=POD) == RECORDED_NAME
    assert configmaps.labels(consumer=CONSUMER, pod=POD) == RECORDED_LABELS
    assert todays_data() == RECORDED_DATA


def test_a_grace_other_than_the_default_is_one_key_an_older_pod_passes_over() -> None:
    """``podGraceSeconds`` came after that build, and is written only when it is not the
    default: an older pod reads the keys it knows by name and passes over the others."""
    spec = specs.parse_spec({**SPEC, "balancing": {"podGraceSeconds": 5}})
    assert todays_data(spec) == {**RECORDED_DATA, "podGraceSeconds": "5"}


def test_a_handoff_timeout_other_than_the_default_is_one_key_an_older_pod_passes_over() -> None:
    """``handoffTimeoutSeconds`` came later still, on the same terms as the grace."""
    spec = specs.parse_spec({**SPEC, "balancing": {"handoffTimeoutSeconds": 60}})
    assert todays_data(spec) == {**RECORDED_DATA, "handoffTimeoutSeconds": "60"}
    assert podassignments.parse_data(todays_data(spec)).handoff_timeout_seconds == 60


def test_todays_pod_reads_the_assignment_an_older_operator_wrote() -> None:
    parsed = podassignments.parse_data(RECORDED_DATA)
    assert parsed.problems == ()
    assert (parsed.consumer, parsed.pod, parsed.generation) == (CONSUMER, POD, 7)
    assert parsed.partitions == {
        "0": podassignments.PartitionEntry(epoch=3),
        "1": podassignments.PartitionEntry(epoch=5, state="revoking", since=SINCE),
    }
    assert parsed.processing == failurepolicy.Processing(max_attempts=3, on_failure="deadLetter")
    assert parsed.pod_grace_seconds is None  # not said: the pod keeps its take-up bound of then
    assert parsed.handoff_timeout_seconds is None  # not said: the default
    assert startpositions.parse_start_position(parsed.start_position) == (
        specs.parse_spec(SPEC).start_position
    )


def test_both_sides_name_the_same_annotations() -> None:
    assert (
        configmaps.ANNOTATION_POD_UID,
        *configmaps.POD_WRITTEN_ANNOTATIONS,
    ) == RECORDED_ANNOTATIONS


def test_todays_pod_acknowledges_as_an_older_operator_reads() -> None:
    assert configmaps.build_released({"2": 4, "1": 5}) == RECORDED_RELEASED
    report = partitionreports.PartitionReport(
        partition="0", epoch=3, state="parked", attempts=3, error="ValueError: bad order"
    )
    # The reports as they were, and one key more: the batches set aside, under a key that is
    # no partition id, which the older operator's reader drops (it reads a key only as a
    # partition given to the pod; run against the build of 2026-11-23 when the key came).
    assert partitionreports.build({"0": report}) == RECORDED_REPORTS[:-1] + ',"deadLettered":{}}'
    assert not bounds.is_partition_id(partitionreports.SET_ASIDE_KEY)


def test_todays_operator_reads_an_older_pods_acknowledgements() -> None:
    annotations = {
        configmaps.ANNOTATION_APPLIED_GENERATION: "7",
        configmaps.ANNOTATION_RELEASED: RECORDED_RELEASED,
        configmaps.ANNOTATION_PARTITION_REPORTS: RECORDED_REPORTS,
    }
    assert configmaps.parse_applied_generation(annotations) == 7
    assert configmaps.parse_released(annotations) == {"1": 5, "2": 4}
    reports = partitionreports.parse(annotations, current={"0": 3})
    assert reports["0"].state == "parked"
    assert reports["0"].attempts == 3
    assert reports["0"].error == "ValueError: bad order"


def test_checkpoint_metadata_keeps_its_keys_and_adds_only_the_crash_count() -> None:
    position = checkpointblobs.Position(offset="4096", sequence_number=41)
    assert (
        checkpointblobs.encode_metadata(position=position, owner_id=POD, epoch=3)
        == RECORDED_METADATA
    )
    stored = checkpointblobs.decode_metadata(RECORDED_METADATA)
    assert (stored.position, stored.owner_id, stored.epoch, stored.deaths) == (
        position,
        POD,
        3,
        None,
    )
    # A batch that killed processes adds one key, which an older build does not read (and
    # drops when it checkpoints the partition: docs/failures.md); every other key is as before.
    deaths = checkpointblobs.Deaths(first=42, attempts=2)
    with_deaths = checkpointblobs.encode_metadata(
        position=position, owner_id=POD, epoch=3, deaths=deaths
    )
    assert with_deaths == {**RECORDED_METADATA, checkpointblobs.DEATHS_KEY: "42:2"}
