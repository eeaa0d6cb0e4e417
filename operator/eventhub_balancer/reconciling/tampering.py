"""What the ConfigMaps got wrong: their own problems and what they claim beyond the record.

A ConfigMap's ``data`` is the operator's output, compared with its record, never believed
(`readbacks`): a ConfigMap that claims a partition the record does not give its pod (or at
another epoch) is tampered with, and is put back and reported. Every decision checks every
ConfigMap: a pass over the partitions they name, which costs little next to reading them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.reconciling import observations, records

Record = Mapping[models.PartitionId, records.Recorded]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Found:
    """ConfigMap name -> what is wrong with it; and the part of that it claims beyond the
    record (tampering)."""

    problems: Mapping[str, tuple[str, ...]]
    tampered: Mapping[str, tuple[str, ...]]


def beyond_record(
    cm: observations.StoredMap, recorded: Record, status_epochs: Mapping[str, Any]
) -> tuple[str, ...]:
    """What ``cm``'s data says that the operator did not write there.

    The operator's own writes can run ahead of its record by one interrupted cycle (a
    partition at exactly the epoch ``status.epochs`` holds, or ``revoking`` where the record
    still says ``owned``) or behind it (an older epoch than the record's, not yet rewritten).
    Anything else is someone else's doing.
    """
    claims = [
        f"data key {k[:40]!r} is not the operator's"
        for k in cm.data
        if k not in configmaps.DATA_KEYS
    ]
    claims += [f"data: {p}" for p in cm.parsed.problems if "partition" in p]
    for pid, entry in cm.parsed.partitions.items():
        mine = recorded.get(pid)
        same = mine is not None and mine.pod == cm.pod and mine.epoch == entry.epoch
        if same and mine is not None and entry.state in (mine.state, "revoking"):
            continue  # as recorded, or revoking ahead of the record (an interrupted cycle)
        latest = status_epochs.get(pid)
        if entry.epoch == latest and (mine is None or mine.epoch < entry.epoch):
            continue
        if mine is not None and entry.epoch < mine.epoch:
            # An older grant the operator has not rewritten yet (a cycle failed between its
            # ConfigMap writes): fenced out by the record's epoch, so nothing to gain by it.
            # It is rewritten like any stale entry, but it is nobody's tampering.
            continue
        held = f"{mine.pod} at epoch {mine.epoch}" if mine is not None else "nobody"
        claims.append(
            f"partition {pid} at epoch {entry.epoch} ({entry.state}) is not assigned to "
            f"{cm.pod or 'this pod'}: the operator's record gives it to {held}"
        )
    return tuple(claims)


def find(
    maps: Iterable[observations.StoredMap], recorded: Record, status_epochs: Mapping[str, Any]
) -> Found:
    """The findings over every one of ``maps``."""
    claims = {}
    flagged = {}
    for cm in maps:
        if cm.parsed.problems:
            flagged[cm.name] = cm
        if found := beyond_record(cm, recorded, status_epochs):
            claims[cm.name] = found
    return _found(flagged, claims)


def _found(
    flagged: Mapping[str, observations.StoredMap], claims: Mapping[str, tuple[str, ...]]
) -> Found:
    problems = {
        name: (*(flagged[name].parsed.problems if name in flagged else ()), *claims.get(name, ()))
        for name in flagged.keys() | claims.keys()
    }
    return Found(problems=problems, tampered=dict(claims))
