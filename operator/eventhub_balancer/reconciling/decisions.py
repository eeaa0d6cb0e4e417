"""What a cycle's decision says: everything to write, and what to read before it is final.

A value of its own, below `deciding` (which takes it) and `refusals` (which take the decisions
that touch nothing), so that neither has to import the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.reconciling import kubeevents, metrics, observations, writes


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """Everything a cycle writes, and what it still has to read before it is final."""

    generation: int
    #: the pods this consumer concerns (matched, or named by a ConfigMap): their events wake it
    pods: frozenset[str] = frozenset()
    #: list the pods afresh, then decide again: the record or a ConfigMap names a pod that
    #: the pods as read lack and that is not known to be gone (`readbacks.unconfirmed`);
    #: such a decision writes nothing
    needs_pods: bool = False
    #: read the checkpoint blobs (and with weighting "lag" the last sequence numbers), then
    #: decide again: a partition gets a new owner, or the plan weighs by lag
    needs_checkpoints: bool = False
    needs_last_sequences: bool = False
    #: status.epochs to write before anything else; None: no epoch goes up
    epochs: Mapping[str, int] | None = None
    #: status.assignment (the operator's record), written together with ``epochs``: a cycle
    #: that fails after that write (a ConfigMap conflict with a pod's acknowledgement) leaves
    #: a record that agrees with the epochs, so the next cycle carries it on instead of taking
    #: every partition it gave out over once more
    record: Sequence[Mapping[str, Any]] | None = None
    writes: writes.Writes = dataclasses.field(default_factory=writes.Writes)
    #: the merge patch of the status after the epochs (top-level fields); empty: no write
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    events: tuple[kubeevents.KubeEvent, ...] = ()
    #: the Events as the API takes them, in the order of ``events``
    event_bodies: tuple[Mapping[str, Any], ...] = ()
    #: the partitions planned over (listed, or the last known, or those assigned)
    partitions: tuple[models.PartitionId, ...] = ()
    moves: tuple[models.Move, ...] = ()
    balanced: bool = False
    #: a partition waits for its owner's release (revoked, or its pod terminating): the
    #: cycle its release wakes gives it out and reads the blobs for it (`handlers.cycles`)
    awaits_release: bool = False
    #: partitions assigned but not listed by Event Hubs: kept (a wrong answer never revokes)
    unlisted: tuple[models.PartitionId, ...] = ()
    figures: metrics.Figures | None = None
    #: seconds until something changes on its own (a hand-off times out, a grace ends)
    next_in: float | None = None
    #: the wall time (seconds) before which this observation decides the same, with nothing
    #: to write or read (math.inf: no deadline); None: it writes, reads more or weighs by lag
    settled_until: float | None = None
    spec_error: str | None = None
    #: the CR's resourceVersion this decision was taken from: the precondition of its status
    #: writes, so that a decision over a stale read is refused (409) instead of applied
    resource_version: str | None = None


def version(observation: observations.Observation) -> str | None:
    """The CR's resourceVersion ``observation`` was read at: a decision's precondition."""
    return (observation.body.get("metadata") or {}).get("resourceVersion") or None
