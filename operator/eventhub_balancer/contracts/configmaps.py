"""The per-pod assignment ConfigMap: the one channel between the operator and a consumer pod.

One ConfigMap per (EventHubConsumer, pod). Its ``data`` is written only by the operator: the
Event Hub coordinates (never a secret), the checkpoint container, a ``generation`` that grows
with every change of the data, and the partitions with epoch, state and since. The pod writes
only three annotations on it (`POD_WRITTEN_ANNOTATIONS`): the generation it has applied, the
partitions it has released (``{partition: epoch}``) after its final checkpoint, and its
reports of partitions in trouble. Both sides use this module, so the names, labels, keys
and annotation formats live here once, and so does the rule of which ConfigMap a pod may
apply (`refusal`). Building the data and reading it back is ``contracts.podassignments``'s.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds

PREFIX = "eventhub-balancer.dev/"

#: Labels on the ConfigMap, for list/watch selectors (values cut to 63: `label_value`).
LABEL_CONSUMER = PREFIX + "consumer"
LABEL_POD = PREFIX + "pod"
#: Label on the ConfigMap that marks it as ours, whatever the consumer is called.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "eventhub-balancer"
#: The label selector of every ConfigMap the operator manages in a namespace (what it watches).
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"

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
#: ``spec.balancing.podGraceSeconds``, as text, only when it is not the default: a take-up
#: keeps the pod NotReady for less than the grace (``consumer.takeups``).
KEY_POD_GRACE_SECONDS = "podGraceSeconds"
#: ``spec.balancing.handoffTimeoutSeconds``, as text, only when it is not the default: the pod
#: warns when its release may outlast it (``consumer.releasebudgets``).
KEY_HANDOFF_TIMEOUT_SECONDS = "handoffTimeoutSeconds"
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
        KEY_POD_GRACE_SECONDS,
        KEY_HANDOFF_TIMEOUT_SECONDS,
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


def changed_labels(wanted: Mapping[str, str], found: Mapping[str, Any]) -> list[str]:
    """How the labels ``found`` on a ConfigMap differ from the operator's ``wanted`` ones (a
    label someone added is no difference): ``["app.kubernetes.io/managed-by: eventhub-balancer
    -> argocd", "eventhub-balancer.dev/pod removed"]``, empty when they are all there."""
    changes = []
    for key, value in wanted.items():
        if key not in found:
            changes.append(f"{key} removed")
        elif found[key] != value:
            changes.append(f"{key}: {value} -> {found[key]}")
    return changes


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
