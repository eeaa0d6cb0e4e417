"""A pod's assignment as the operator writes it in the data of the pod's ConfigMap.

The data is the whole assignment: the Event Hub coordinates (never a secret, only
references to them), the checkpoint container, the start position and failure policy, the
pod grace when it is not the default, a ``generation`` that grows with every change, and the
partitions with epoch, state and since.
The operator builds it whole (`build_data`) and writes it only when it differs
(`desired_data`), which keeps a steady state free of writes; both sides read it back
(`parse_data`). Kept apart from ``contracts.configmaps``, which names the ConfigMap, its
labels and keys and decides which one a pod may apply, because building and reading the
data is a concern of its own that both sides share.

Reading is lenient on purpose: a hand-edited or half-written ConfigMap yields a `ParsedData`
with ``problems`` (the operator rewrites it, the pod keeps what it can read), never an
exception.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from eventhub_balancer.balancing import models, partitionlists
from eventhub_balancer.contracts import (
    bounds,
    configmaps,
    failurepolicy,
    specs,
    startpositions,
    timestamps,
)


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
    #: ``podGraceSeconds``; None when the key is missing: the default grace, or an operator
    #: from before the key, which the pod cannot tell apart and need not (`consumer.takeups`)
    pod_grace_seconds: int | None = None
    #: ``handoffTimeoutSeconds``; None when the key is missing: the default, or an operator
    #: from before the key (`consumer.releasebudgets` takes the default for both)
    handoff_timeout_seconds: int | None = None
    problems: tuple[str, ...] = ()
    #: Why ``partitions`` could not be read at all (missing, not JSON, not a JSON object; one of
    #: ``problems``), so that ``partitions`` says nothing; None when it could be read, bad
    #: entries or not. The pod does not apply such data (`consumer.assignments`).
    partitions_unreadable: str | None = None

    @property
    def needs_repair(self) -> bool:
        return bool(self.problems)


def described(partitions: Mapping[models.PartitionId, PartitionEntry]) -> str:
    """A pod's partitions for a log line, by state, each with its epochs:
    ``owned 0-2,5 (epoch 3); revoking 4 (epoch 2)``, or ``no partitions``."""
    entries: dict[str, tuple[str, int]] = {p: (e.state, e.epoch) for p, e in partitions.items()}
    return partitionlists.by_state(models.OWNERSHIP_STATES, entries) or "no partitions"


def _partitions_json(partitions: Mapping[models.PartitionId, PartitionEntry]) -> str:
    body: dict[str, Any] = {}
    for pid in sorted(partitions, key=models.name_key):
        entry = partitions[pid]
        item: dict[str, Any] = {"epoch": entry.epoch, "state": entry.state}
        if entry.since is not None:
            item["since"] = timestamps.format_moment(entry.since)
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
    """The full ``data`` of a pod's ConfigMap. No secret goes in: only references to them.

    The pod grace and the hand-off timeout are left out at their defaults, so that the data
    stays what operators before the keys wrote: an upgrade rewrites only the ConfigMaps of a
    consumer that sets one, and a rollback finds no others it did not write."""
    grace = spec.balancing.pod_grace_seconds
    handoff = spec.balancing.handoff_timeout_seconds
    data = {
        configmaps.KEY_CONSUMER: consumer,
        configmaps.KEY_POD: pod,
        configmaps.KEY_FQNS: spec.fully_qualified_namespace,
        configmaps.KEY_EVENTHUB: spec.event_hub_name,
        configmaps.KEY_CONSUMER_GROUP: spec.consumer_group,
        configmaps.KEY_CREDENTIALS: json.dumps(
            spec.event_hub_credentials.describe(), separators=(",", ":")
        ),
        configmaps.KEY_CONTAINER: spec.checkpoint_container,
        configmaps.KEY_ACCOUNT_URL: spec.checkpoint_account_url,
        configmaps.KEY_CHECKPOINT_CREDENTIALS: json.dumps(
            spec.checkpoint_credentials.describe(), separators=(",", ":")
        ),
        configmaps.KEY_START_POSITION: startpositions.to_json(spec.start_position),
        configmaps.KEY_PROCESSING: json.dumps(spec.processing.describe(), separators=(",", ":")),
        configmaps.KEY_GENERATION: str(generation),
        configmaps.KEY_PARTITIONS: _partitions_json(partitions),
    }
    if grace != specs.DEFAULT_POD_GRACE_SECONDS:
        data[configmaps.KEY_POD_GRACE_SECONDS] = str(grace)
    if handoff != specs.DEFAULT_HANDOFF_TIMEOUT_SECONDS:
        data[configmaps.KEY_HANDOFF_TIMEOUT_SECONDS] = str(handoff)
    return data


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
    return {**base, configmaps.KEY_GENERATION: str(generation + 1)}


def _generation(data: Mapping[str, object]) -> tuple[int, str | None]:
    """The generation a ConfigMap's data holds (0 when unreadable) and what is wrong with it."""
    raw = data.get(configmaps.KEY_GENERATION)
    if raw is None:
        return 0, f"{configmaps.KEY_GENERATION} is missing"
    try:
        generation = int(str(raw))
    except ValueError:
        return 0, f"{configmaps.KEY_GENERATION} {raw!r} is not an integer"
    if not bounds.is_epoch(generation):
        return 0, f"{configmaps.KEY_GENERATION} is out of range (0..2^63-1)"
    return generation, None


def parse_data(data: object) -> ParsedData:
    """Read a ConfigMap's data leniently: keep every valid partition, list every problem."""
    problems: list[str] = []
    if not isinstance(data, Mapping):
        return ParsedData(
            problems=("data is not a mapping",), partitions_unreadable="data is not a mapping"
        )

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
    raw_start = data.get(configmaps.KEY_START_POSITION)
    if raw_start is not None:
        try:
            start_position = bounds.loads(str(raw_start))
        except ValueError:
            problems.append(f"{configmaps.KEY_START_POSITION} is not JSON")

    processing = failurepolicy.Processing()
    raw_processing = data.get(configmaps.KEY_PROCESSING)
    if raw_processing is not None:
        try:
            processing = failurepolicy.parse(bounds.loads(str(raw_processing)), unknown_fields=True)
        except ValueError as e:  # JSONDecodeError and errors.InvalidInput alike
            problems.append(f"{configmaps.KEY_PROCESSING} is unreadable: {str(e)[:80]}")

    grace = _seconds(data, configmaps.KEY_POD_GRACE_SECONDS, problems)
    handoff = _seconds(data, configmaps.KEY_HANDOFF_TIMEOUT_SECONDS, problems)

    partitions: dict[models.PartitionId, PartitionEntry] = {}
    unreadable: str | None = None
    raw_partitions = data.get(configmaps.KEY_PARTITIONS)
    if raw_partitions is None:
        unreadable = f"{configmaps.KEY_PARTITIONS} is missing"
    else:
        try:
            decoded = bounds.loads(str(raw_partitions))
        except ValueError:
            decoded = None
            unreadable = f"{configmaps.KEY_PARTITIONS} is not JSON"
        if decoded is not None and not isinstance(decoded, dict):
            unreadable = f"{configmaps.KEY_PARTITIONS} is not a JSON object"
            decoded = None
        for pid, item in (decoded or {}).items():
            entry = _parse_entry(item) if bounds.is_partition_id(pid) else None
            if entry is None:
                problems.append(f"partition {str(pid)[:20]!r}: unreadable entry {str(item)[:80]}")
            else:
                partitions[models.PartitionId(pid)] = entry

    if unreadable is not None:
        problems.append(unreadable)
    return ParsedData(
        consumer=text(configmaps.KEY_CONSUMER),
        pod=text(configmaps.KEY_POD),
        generation=generation,
        partitions=partitions,
        fully_qualified_namespace=text(configmaps.KEY_FQNS),
        event_hub_name=text(configmaps.KEY_EVENTHUB),
        consumer_group=text(configmaps.KEY_CONSUMER_GROUP),
        checkpoint_container=text(configmaps.KEY_CONTAINER),
        checkpoint_account_url=text(configmaps.KEY_ACCOUNT_URL),
        start_position=start_position,
        processing=processing,
        pod_grace_seconds=grace,
        handoff_timeout_seconds=handoff,
        problems=tuple(problems),
        partitions_unreadable=unreadable,
    )


def _seconds(data: Mapping[str, Any], key: str, problems: list[str]) -> int | None:
    """A whole number of seconds the operator writes only when it is not the default (None)."""
    raw = data.get(key)
    if raw is None:
        return None
    if isinstance(raw, str) and re.fullmatch(r"[0-9]{1,9}", raw):
        return int(raw)
    problems.append(f"{key} {str(raw)[:20]!r} is not a whole number of seconds")
    return None


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
