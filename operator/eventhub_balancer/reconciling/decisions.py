"""What a cycle's decision says (`Decision`), and what it hands the next decision of the same
consumer (`Carry`), pure.

A `Decision` holds everything to write and what to read before it is final. It is a value of
its own, below `deciding` (which takes it), `refusals` (which take the decisions that touch
nothing) and `deadlines` (which keeps one that stands), so that none of them has to import
another.

A `Carry` holds the fleet a decision read (`fleets`), the record it read from the CR's status,
and the writes a decision that asks for more reads derived from its plan, each with what it
was taken from. A cycle that gives a partition out decides twice over the same bodies: first
without the checkpoint blobs, then with them (`deciding`), and the second decision almost
always plans what the first did. At 1,024 partitions over 512 pods, reading the record (1,024
entries) and deriving every pod's writes (each pod's ConfigMap data built and compared) were
about 60 % of that second decision's CPU. Both are functions of their inputs alone, so each is
kept with its inputs and taken again only when they are the same: the CR as the very object
read, at the same uid and resourceVersion (so the record also serves the cycles that the pods'
events wake while the CR is unchanged); the fleet as the very object; the spec, the planned
assignment and the ConfigMaps' problems by equality. Anything else is read or derived afresh,
so a decision with the carry is the decision without it (``tests/reconciling/test_carry.py``).

None of the carry is what safety rests on: every write carries its precondition whoever
derived it (`handlers.writing`), and the carry is kept by the caller, never by a module.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, specs, statusbodies
from eventhub_balancer.reconciling import (
    fleets,
    kubeevents,
    observations,
    records,
    statuses,
    writes,
)


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
    figures: statuses.Figures | None = None
    #: the Ready condition this decision concludes (``ehb_ready``); None: none (it only asks
    #: for more reads)
    ready: conditions.Condition | None = None
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


Record = Mapping[models.PartitionId, records.Recorded]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordRead:
    """``status.assignment`` as read (`records.read`) from one EventHubConsumer body."""

    #: the very body it was read from, and that body's uid and resourceVersion
    body: specs.ConsumerBody
    uid: str
    resource_version: str
    recorded: Record


def _identity(body: specs.ConsumerBody) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")


#: The status field that names the EventHubConsumer (its uid) the status was written for.
UID_FIELD = "consumerUid"
#: The fields that say who owns what: believed only from a status written for this object.
RECORD_FIELDS = frozenset({"assignment", "epochs", "consumers", "handoffs"})


def own(body: Mapping[str, Any]) -> tuple[statusbodies.StatusBody, Mapping[str, Any]]:
    """``body``'s status as the operator may take it, and the epochs it may take only as a
    floor. A status written for another object of that name (a backup restored with its
    status after the EventHubConsumer was deleted: the restore makes a new object) is of
    another time: believed, its record took the hand-offs made since back from their pods
    and gave their epochs out again. Without its record, the object is new to the operator,
    as one applied again without a status; that status's epochs stay a floor."""
    status = typing.cast(statusbodies.StatusBody, body.get("status") or {})
    uid, written = (body.get("metadata") or {}).get("uid"), status.get(UID_FIELD)
    if not (isinstance(written, str) and written and uid and written != uid):
        return status, {}
    kept = {k: v for k, v in status.items() if k not in RECORD_FIELDS}
    return typing.cast(statusbodies.StatusBody, kept), status.get("epochs") or {}


def read_record(previous: RecordRead | None, body: specs.ConsumerBody) -> RecordRead:
    """The record ``body``'s status holds: ``previous`` when it was read from this very object
    at the same uid and resourceVersion (the roster hands out one object per version), else
    read afresh. An equal copy is read again: no content is taken for another's."""
    uid, resource_version = _identity(body)
    if (
        previous is not None
        and previous.body is body
        and previous.uid == uid
        and previous.resource_version == resource_version
    ):
        return previous
    recorded = records.read(own(body)[0])
    return RecordRead(
        body=body,
        uid=uid,
        resource_version=resource_version,
        recorded=types.MappingProxyType(recorded),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Arguments:
    """What `writes.derive` is given."""

    fleet: fleets.Fleet
    spec: specs.ConsumerSpec
    consumer: str
    namespace: str
    assignment: Mapping[models.PartitionId, models.Ownership]
    problems: Mapping[str, tuple[str, ...]]
    annotate_pods: bool

    def same_as(self, other: Arguments) -> bool:
        """Whether ``other`` is these: the very fleet, the rest equal (the cheap checks
        first)."""
        return (
            self.fleet is other.fleet
            and self.consumer == other.consumer
            and self.namespace == other.namespace
            and self.annotate_pods == other.annotate_pods
            and (self.spec is other.spec or self.spec == other.spec)
            and self.problems == other.problems
            and self.assignment == other.assignment
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived:
    """The writes `writes.derive` gave for these very arguments."""

    arguments: Arguments
    writes: writes.Writes


def derive(
    previous: Derived | None,
    *,
    fleet: fleets.Fleet,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    problems: Mapping[str, tuple[str, ...]],
    annotate_pods: bool,
) -> Derived:
    """`writes.derive` of these arguments: ``previous`` when it was derived from the same
    ones, else derived afresh."""
    arguments = Arguments(
        fleet=fleet,
        spec=spec,
        consumer=consumer,
        namespace=namespace,
        # Copies, so that what a later decision compares with cannot change under it.
        assignment=types.MappingProxyType(dict(assignment)),
        problems=types.MappingProxyType(dict(problems)),
        annotate_pods=annotate_pods,
    )
    if previous is not None and previous.arguments.same_as(arguments):
        return previous
    return Derived(
        arguments=arguments,
        writes=writes.derive(
            fleet=fleet,
            spec=spec,
            consumer=consumer,
            namespace=namespace,
            assignment=assignment,
            problems=problems,
            annotate_pods=annotate_pods,
        ),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Carry:
    """What a decision hands the next decision of the same consumer; the empty one is cold."""

    #: the pods and ConfigMaps as the decision read them (`fleets.advance` carries each read
    #: over while its body is the very same object); None: read every body
    fleet: fleets.Fleet | None = None
    #: the record read from the CR's status, with the body it was read from
    record: RecordRead | None = None
    #: the writes derived by a decision that asked for more reads (the checkpoint blobs, the
    #: hub's end), with what they were derived from: the cycle decides again at once over the
    #: same bodies, and almost always plans the same; None after any other decision, whose
    #: successor is another cycle's
    derived: Derived | None = None


#: The carry of a first decision: nothing read yet.
COLD = Carry()
