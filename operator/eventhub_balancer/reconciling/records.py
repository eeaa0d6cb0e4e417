"""The operator's record in the status, as read: who owns each partition, at which epoch. Pure.

``status.assignment`` (partition, pod, pod uid, epoch, state, since) is the one source of
ownership the operator trusts (`readbacks`); the record is the operator's own write, but a
user may edit the status by hand, so an entry out of bounds is skipped, never believed. A
status written by an older operator (no ``assignment``) is read from ``consumers[].partitions``,
``handoffs`` and ``epochs``. Kept apart from `readbacks` so that `fleets` can compare the
ConfigMaps with the record (`fleets.configmap_faults`) without importing the step that reads
them back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, podstates, statusbodies, timestamps


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recorded:
    """One partition as the status records it."""

    pod: str
    pod_uid: str  # empty: recorded by an older operator, any incarnation matches
    epoch: int
    state: models.OwnershipState
    since: float | None


def read_entry(
    item: Mapping[str, Any], *, times: dict[Any, float | None] | None = None
) -> tuple[models.PartitionId, Recorded] | None:
    """One entry of ``status.assignment``; None when it is out of bounds. ``times``: the
    seconds of each ``since`` text read so far in this record (most entries share a few)."""
    get = item.get
    pid, pod, epoch, state = get("partition"), get("pod"), get("epoch"), get("state")
    pod_uid = str(get("podUid") or "")
    if not (bounds.is_partition_id(pid) and isinstance(pod, str) and pod):
        return None
    if not bounds.is_epoch(epoch) or state not in models.OWNERSHIP_STATES:
        return None
    assert isinstance(pid, str)
    assert isinstance(epoch, int)
    raw = get("since")
    if times is not None and isinstance(raw, str) and raw in times:
        seconds = times[raw]
    else:
        since = timestamps.parse_time(raw)
        seconds = podstates.to_seconds(since) if since else None
        if times is not None and isinstance(raw, str):
            times[raw] = seconds
    return models.PartitionId(pid), Recorded(
        pod=pod, pod_uid=pod_uid, epoch=epoch, state=state, since=seconds
    )


def read(status: statusbodies.StatusBody) -> dict[models.PartitionId, Recorded]:
    """The assignment the status records; entries out of bounds are skipped."""
    raw = status.get("assignment")
    if raw is None:
        return _legacy_record(status)
    result: dict[models.PartitionId, Recorded] = {}
    items: list[Any] = list(raw) if isinstance(raw, list) else []
    times: dict[Any, float | None] = {}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        read = read_entry(item, times=times)
        if read is None:
            continue
        pid, entry = read
        if pid in result and result[pid].epoch >= entry.epoch:
            continue
        result[pid] = entry
    return result


def _legacy_record(status: statusbodies.StatusBody) -> dict[models.PartitionId, Recorded]:
    """The record of an older operator's status: owners from ``consumers``, the epoch of an
    owned partition from ``epochs``, of a revoking one (and its since) from ``handoffs``."""
    epochs: Mapping[str, Any] = status.get("epochs") or {}
    handed: dict[str, Mapping[str, Any]] = {
        str(h.get("partition")): h for h in status.get("handoffs") or [] if isinstance(h, Mapping)
    }
    result: dict[models.PartitionId, Recorded] = {}
    for consumer in status.get("consumers") or []:
        pod = consumer.get("pod")
        revoking = set(consumer.get("revoking") or [])
        for pid in consumer.get("partitions") or []:
            if not (isinstance(pod, str) and pod and bounds.is_partition_id(pid)):
                continue
            handoff = handed.get(pid, {})
            epoch = handoff.get("epoch") if pid in revoking else epochs.get(pid)
            if not bounds.is_epoch(epoch):
                continue
            assert isinstance(epoch, int)
            since = timestamps.parse_time(handoff.get("since")) if pid in revoking else None
            result[models.PartitionId(pid)] = Recorded(
                pod=pod,
                pod_uid="",
                epoch=epoch,
                state="revoking" if pid in revoking else "owned",
                since=podstates.to_seconds(since) if since else None,
            )
    return result
