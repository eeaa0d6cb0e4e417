"""The per-pod assignment ConfigMap: the one channel between the operator and a consumer pod.

One ConfigMap per (EventHubConsumer, pod). Its ``data`` is written only by the operator: the
Event Hub coordinates (never a secret), the checkpoint container, a ``generation`` that grows
with every change of the data, and the partitions with epoch, state and since. The pod writes
only three annotations on it (`POD_WRITTEN_ANNOTATIONS`): the generation it has applied, the
partitions it has released (``{partition: epoch}``) after its final checkpoint, and its
reports of partitions in trouble. Both sides use this module, so the keys
and formats live here once.

Reading is lenient on purpose: a hand-edited or half-written ConfigMap yields a `ParsedData`
with ``problems`` (the operator rewrites it, the pod keeps what it can read), never an
exception.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, failurepolicy, specs, startpositions, timestamps

PREFIX = "eventhub-balancer.dev/"

#: Labels on the ConfigMap, for list/watch selectors (values cut to 63: `label_value`).
LABEL_CONSUMER = PREFIX + "consumer"
LABEL_POD = PREFIX + "pod"
#: Label on the ConfigMap that marks it as ours, whatever the consumer is called.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "eventhub-balancer"

#: Annotation (operator): the uid of the pod the ConfigMap belongs to; a pod re-created under
#: the same name (a StatefulSet) gets a fresh ConfigMap rather than the old pod's partitions.
ANNOTATION_POD_UID = PREFIX + "pod-uid"
#: Annotations (pod): the generation applied; the released partitions, JSON {partition: epoch}.
ANNOTATION_APPLIED_GENERATION = PREFIX + "applied-generation"
ANNOTATION_RELEASED = PREFIX + "released"
#: Annotation (pod): its partitions in trouble (failing, parked, stuck, lost); the format is
#: `contracts.partitionreports`'s.
ANNOTATION_PARTITION_REPORTS = PREFIX + "partition-reports"
#: Annotations (operator) on the Pod itself, for humans and tooling: its partitions.
POD_ANNOTATION_PARTITIONS = PREFIX + "partitions"
POD_ANNOTATION_CONSUMER = PREFIX + "consumer"

# The keys of ``data``. Values are strings (ConfigMap data), JSON where structured.
KEY_CONSUMER = "consumer"
KEY_POD = "pod"
KEY_FQNS = "fullyQualifiedNamespace"
KEY_EVENTHUB = "eventHubName"
KEY_CONSUMER_GROUP = "consumerGroup"
KEY_CREDENTIALS = "eventHubCredentials"  # the reference (Secret name/key or workload identity)
KEY_CONTAINER = "checkpointContainer"
KEY_ACCOUNT_URL = "checkpointAccountUrl"
KEY_CHECKPOINT_CREDENTIALS = "checkpointCredentials"
KEY_START_POSITION = "startPosition"
#: The failure policy (``spec.processing``): JSON ``{"maxAttempts": n, "onFailure": "park"}``.
KEY_PROCESSING = "processing"
KEY_GENERATION = "generation"
KEY_PARTITIONS = "partitions"
#: Every key of ``data`` the operator writes: any other key was added by someone else.
DATA_KEYS = frozenset(
    {
        KEY_CONSUMER,
        KEY_POD,
        KEY_FQNS,
        KEY_EVENTHUB,
        KEY_CONSUMER_GROUP,
        KEY_CREDENTIALS,
        KEY_CONTAINER,
        KEY_ACCOUNT_URL,
        KEY_CHECKPOINT_CREDENTIALS,
        KEY_START_POSITION,
        KEY_PROCESSING,
        KEY_GENERATION,
        KEY_PARTITIONS,
    }
)

#: The pod may write only these annotations on its ConfigMap; any other change is tampering.
POD_WRITTEN_ANNOTATIONS = (
    ANNOTATION_APPLIED_GENERATION,
    ANNOTATION_RELEASED,
    ANNOTATION_PARTITION_REPORTS,
)
#: An int64 has at most 19 digits (and a sign): a longer ``applied-generation`` is not one.
MAX_GENERATION_DIGITS = 20
#: A ConfigMap name is a DNS subdomain: at most 253 characters.
MAX_NAME = 253
#: A label value: at most 63 characters.
MAX_LABEL_VALUE = 63
#: Hex digits of the hash suffix that keeps cut names unique.
HASH_LENGTH = 10

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)?\Z")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def configmap_name(*, consumer: str, pod: str) -> str:
    """``ehb-<consumer>-<pod>-<hash of "consumer/pod">``, the readable part cut to fit 253.

    The hash is always there: names may contain dashes, so ``ehb-a-b-c`` alone would be both
    (consumer ``a-b``, pod ``c``) and (``a``, ``b-c``). "/" is in neither name, so the hashed
    text is unambiguous. The operator finds ConfigMaps by their labels; a pod applies only the
    one of this name (`refusal`).
    """
    suffix = _digest(f"{consumer}/{pod}")
    head = f"ehb-{consumer}-{pod}".lower()[: MAX_NAME - HASH_LENGTH - 1].rstrip("-.")
    return f"{head}-{suffix}"


def label_value(value: str) -> str:
    """A label value for a name: itself when it fits, else cut to 63 with a hash suffix."""
    if len(value) <= MAX_LABEL_VALUE and _LABEL_VALUE.match(value):
        return value
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[: MAX_LABEL_VALUE - HASH_LENGTH - 1]
    head = head.strip("-_.")
    return f"{head}-{_digest(value)}" if head else _digest(value)


def labels(*, consumer: str, pod: str) -> dict[str, str]:
    return {
        LABEL_CONSUMER: label_value(consumer),
        LABEL_POD: label_value(pod),
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def pod_selector(*, consumer: str, pod: str) -> str:
    """The label selector of one pod's ConfigMap: its two labels and the managed-by label."""
    wanted = labels(consumer=consumer, pod=pod)
    return ",".join(f"{k}={wanted[k]}" for k in (LABEL_CONSUMER, LABEL_POD, LABEL_MANAGED_BY))


#: Why a pod refuses a ConfigMap that matched its labels (the metric's ``reason`` label).
REFUSED_NAME = "name"
REFUSED_UNMANAGED = "unmanaged"
REFUSED_LABELS = "labels"
REFUSED_DATA = "data"
REFUSED_POD_UID = "pod-uid"


def refusal(
    body: Mapping[str, Any], *, consumer: str, pod: str, pod_uid: str
) -> tuple[str, str] | None:
    """Why the pod (``consumer``, ``pod``, ``pod_uid``) must not apply ``body``, or None.

    ``(reason, message)``: only the operator's ConfigMap for this very pod counts. Its name is
    pinned (`configmap_name`), it carries the managed-by label and this pod's two labels, its
    data names this pod and consumer, and its pod-uid annotation is this pod's uid (a
    StatefulSet pod re-created under the same name must not apply its predecessor's
    partitions). Any ConfigMap can carry labels; only the operator's passes all of these, and
    the admission policy keeps service accounts from forging the managed ones.
    """
    metadata = body.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = str(metadata.get("name", ""))[:MAX_NAME]
    expected = configmap_name(consumer=consumer, pod=pod)
    if name != expected:
        return REFUSED_NAME, f"ConfigMap {name!r} is not {expected!r}, this pod's"
    found = metadata.get("labels")
    found = found if isinstance(found, Mapping) else {}
    if found.get(LABEL_MANAGED_BY) != MANAGED_BY:
        return (
            REFUSED_UNMANAGED,
            f"ConfigMap {name} lacks the label {LABEL_MANAGED_BY}={MANAGED_BY}",
        )
    wanted = labels(consumer=consumer, pod=pod)
    if any(found.get(k) != wanted[k] for k in (LABEL_CONSUMER, LABEL_POD)):
        return REFUSED_LABELS, f"ConfigMap {name}'s labels name another consumer or pod"
    data = body.get("data")
    data = data if isinstance(data, Mapping) else {}
    if data.get(KEY_CONSUMER) != consumer or data.get(KEY_POD) != pod:
        return (
            REFUSED_DATA,
            f"ConfigMap {name}'s data is for consumer {str(data.get(KEY_CONSUMER))[:80]!r}, pod "
            f"{str(data.get(KEY_POD))[:80]!r}",
        )
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    uid = annotations.get(ANNOTATION_POD_UID)
    if pod_uid and uid != pod_uid:
        return (
            REFUSED_POD_UID,
            f"ConfigMap {name} is for pod uid {str(uid)[:40]!r}, not this pod's {pod_uid!r}",
        )
    return None


def consumer_selector(consumer: str) -> str:
    """The label selector of all ConfigMaps of one EventHubConsumer (in its namespace): only
    those the operator manages, as its watch selects them, so an unmanaged ConfigMap given the
    consumer's label is never read as one of its own."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CONSUMER}={label_value(consumer)}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionEntry:
    """A partition in a pod's ConfigMap: the epoch to fence with, and owned or revoking."""

    epoch: int
    state: models.OwnershipState = "owned"
    since: datetime.datetime | None = None  # when it entered `state`


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParsedData:
    """What could be read from a ConfigMap's data; ``problems`` non-empty means repair it."""

    consumer: str = ""
    pod: str = ""
    generation: int = 0
    partitions: Mapping[models.PartitionId, PartitionEntry] = dataclasses.field(
        default_factory=dict
    )
    fully_qualified_namespace: str = ""
    event_hub_name: str = ""
    consumer_group: str = ""
    checkpoint_container: str = ""
    checkpoint_account_url: str = ""
    start_position: Any = None  # the CR's shape: `startpositions.parse_start_position` reads it
    #: the failure policy; the default when the key is missing (an operator before it existed)
    processing: failurepolicy.Processing = dataclasses.field(
        default_factory=failurepolicy.Processing
    )
    problems: tuple[str, ...] = ()

    @property
    def needs_repair(self) -> bool:
        return bool(self.problems)


def _partitions_json(partitions: Mapping[models.PartitionId, PartitionEntry]) -> str:
    body: dict[str, Any] = {}
    for pid in sorted(partitions, key=models.name_key):
        entry = partitions[pid]
        item: dict[str, Any] = {"epoch": entry.epoch, "state": entry.state}
        if entry.since is not None:
            item["since"] = timestamps.format_time(entry.since)
        body[pid] = item
    return json.dumps(body, separators=(",", ":"))


def build_data(
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    pod: str,
    generation: int,
    partitions: Mapping[models.PartitionId, PartitionEntry],
) -> dict[str, str]:
    """The full ``data`` of a pod's ConfigMap. No secret goes in: only references to them."""
    return {
        KEY_CONSUMER: consumer,
        KEY_POD: pod,
        KEY_FQNS: spec.fully_qualified_namespace,
        KEY_EVENTHUB: spec.event_hub_name,
        KEY_CONSUMER_GROUP: spec.consumer_group,
        KEY_CREDENTIALS: json.dumps(spec.event_hub_credentials.describe(), separators=(",", ":")),
        KEY_CONTAINER: spec.checkpoint_container,
        KEY_ACCOUNT_URL: spec.checkpoint_account_url,
        KEY_CHECKPOINT_CREDENTIALS: json.dumps(
            spec.checkpoint_credentials.describe(), separators=(",", ":")
        ),
        KEY_START_POSITION: startpositions.to_json(spec.start_position),
        KEY_PROCESSING: json.dumps(spec.processing.describe(), separators=(",", ":")),
        KEY_GENERATION: str(generation),
        KEY_PARTITIONS: _partitions_json(partitions),
    }


def desired_data(
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    pod: str,
    partitions: Mapping[models.PartitionId, PartitionEntry],
    current: Mapping[str, str] | None,
    build: Callable[[int], Mapping[str, str]] | None = None,
) -> dict[str, str] | None:
    """The data to write, or None when ``current`` already says the same.

    The generation grows by one with every change, so a pod can tell that it has applied the
    latest assignment (``applied-generation``); an unchanged ConfigMap keeps its generation,
    which is what keeps a steady state free of writes. ``build`` gives `build_data` of these
    arguments at a generation when the caller keeps it (the operator's memo, which spares an
    unchanged pod the JSON).
    """
    # Only the generation is needed of what is there (not a whole parse: this runs for every
    # pod in every cycle).
    generation, _problem = _generation(current or {})
    base = (
        build(generation)
        if build is not None
        else build_data(
            spec=spec, consumer=consumer, pod=pod, generation=generation, partitions=partitions
        )
    )
    if current is not None and dict(current) == base:
        return None
    return {**base, KEY_GENERATION: str(generation + 1)}


def _generation(data: Mapping[str, object]) -> tuple[int, str | None]:
    """The generation a ConfigMap's data holds (0 when unreadable) and what is wrong with it."""
    raw = data.get(KEY_GENERATION)
    if raw is None:
        return 0, f"{KEY_GENERATION} is missing"
    try:
        generation = int(str(raw))
    except ValueError:
        return 0, f"{KEY_GENERATION} {raw!r} is not an integer"
    if not bounds.is_epoch(generation):
        return 0, f"{KEY_GENERATION} is out of range (0..2^63-1)"
    return generation, None


def parse_data(data: object) -> ParsedData:
    """Read a ConfigMap's data leniently: keep every valid partition, list every problem."""
    problems: list[str] = []
    if not isinstance(data, Mapping):
        return ParsedData(problems=("data is not a mapping",))

    def text(key: str) -> str:
        value = data.get(key, "")
        if not isinstance(value, str):
            problems.append(f"{key} is not a string")
            return ""
        return value

    generation, problem = _generation(data)
    if problem:
        problems.append(problem)

    start_position: Any = None
    raw_start = data.get(KEY_START_POSITION)
    if raw_start is not None:
        try:
            start_position = bounds.loads(str(raw_start))
        except ValueError:
            problems.append(f"{KEY_START_POSITION} is not JSON")

    processing = failurepolicy.Processing()
    raw_processing = data.get(KEY_PROCESSING)
    if raw_processing is not None:
        try:
            processing = failurepolicy.parse(bounds.loads(str(raw_processing)))
        except ValueError as e:  # JSONDecodeError and errors.InvalidInput alike
            problems.append(f"{KEY_PROCESSING} is unreadable: {str(e)[:80]}")

    partitions: dict[models.PartitionId, PartitionEntry] = {}
    raw_partitions = data.get(KEY_PARTITIONS)
    if raw_partitions is None:
        problems.append(f"{KEY_PARTITIONS} is missing")
    else:
        try:
            decoded = bounds.loads(str(raw_partitions))
        except ValueError:
            decoded = None
            problems.append(f"{KEY_PARTITIONS} is not JSON")
        if decoded is not None and not isinstance(decoded, dict):
            problems.append(f"{KEY_PARTITIONS} is not a JSON object")
            decoded = None
        for pid, item in (decoded or {}).items():
            entry = _parse_entry(item) if bounds.is_partition_id(pid) else None
            if entry is None:
                problems.append(f"partition {str(pid)[:20]!r}: unreadable entry {str(item)[:80]}")
            else:
                partitions[models.PartitionId(pid)] = entry

    return ParsedData(
        consumer=text(KEY_CONSUMER),
        pod=text(KEY_POD),
        generation=generation,
        partitions=partitions,
        fully_qualified_namespace=text(KEY_FQNS),
        event_hub_name=text(KEY_EVENTHUB),
        consumer_group=text(KEY_CONSUMER_GROUP),
        checkpoint_container=text(KEY_CONTAINER),
        checkpoint_account_url=text(KEY_ACCOUNT_URL),
        start_position=start_position,
        processing=processing,
        problems=tuple(problems),
    )


def _parse_entry(item: Any) -> PartitionEntry | None:
    if not isinstance(item, Mapping):
        return None
    epoch = item.get("epoch")
    state = item.get("state", "owned")
    if not bounds.is_epoch(epoch) or not isinstance(epoch, int):
        return None
    if state not in models.OWNERSHIP_STATES:
        return None
    since = timestamps.parse_time(item.get("since"))
    if "since" in item and since is None:
        return None
    return PartitionEntry(epoch=epoch, state=state, since=since)


# --- the pod's side: annotations it writes on its own ConfigMap ---


def build_released(released: Mapping[str, int]) -> str:
    """The ``released`` annotation value: compact JSON ``{partition: epoch}``, sorted."""
    ordered = {pid: released[pid] for pid in sorted(released, key=models.name_key)}
    return json.dumps(ordered, separators=(",", ":"))


def parse_released(annotations: Mapping[str, str] | None) -> dict[models.PartitionId, int]:
    """The partitions a pod acknowledged as released; unreadable entries are ignored.

    Untrusted input (the pod writes it): a value longer than `bounds.MAX_ANNOTATION_BYTES`
    counts as no acknowledgement, and only partition ids and int64 epochs count."""
    raw = (annotations or {}).get(ANNOTATION_RELEASED)
    if not raw or not isinstance(raw, str) or len(raw) > bounds.MAX_ANNOTATION_BYTES:
        return {}
    try:
        decoded = bounds.loads(raw)
    except ValueError:
        return {}
    if not isinstance(decoded, dict):
        return {}
    return {
        models.PartitionId(str(pid)): epoch
        for pid, epoch in decoded.items()
        if bounds.is_partition_id(pid) and bounds.is_epoch(epoch)
    }


def build_applied_generation(generation: int) -> str:
    return str(generation)


def parse_applied_generation(annotations: Mapping[str, str] | None) -> int | None:
    """The generation the pod says it applied, or None when it has not said (or said nonsense)."""
    raw = (annotations or {}).get(ANNOTATION_APPLIED_GENERATION)
    if not isinstance(raw, str) or len(raw) > MAX_GENERATION_DIGITS:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if bounds.is_epoch(value) else None


def pod_annotations(
    *, consumer: str, partitions: Mapping[models.PartitionId, Any]
) -> dict[str, str]:
    """The operator's annotations on the Pod: which consumer, which partitions (for humans)."""
    return {
        POD_ANNOTATION_CONSUMER: consumer,
        POD_ANNOTATION_PARTITIONS: ",".join(sorted(partitions, key=models.name_key)),
    }
