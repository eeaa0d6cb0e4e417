"""What a decision hands the next of the same consumer (`Carry`), pure: the fleet it read
(`fleets`), the record it read from the CR's status, and the writes a decision that asks for
more reads derived from its plan, each with what it was taken from.

A cycle that gives a partition out decides twice over the same bodies: first without the
checkpoint blobs, then with them (`deciding`), and the second decision almost always plans
what the first did. At 1,024 partitions over 512 pods, reading the record (1,024 entries) and
deriving every pod's writes (each pod's ConfigMap data built and compared) were about 60 % of
that second decision's CPU. Both are functions of their inputs alone, so each is kept with its
inputs and taken again only when they are the same: the CR as the very object read, at the
same uid and resourceVersion (so the record also serves the cycles that the pods' events wake
while the CR is unchanged); the fleet as the very object; the spec, the planned assignment and
the ConfigMaps' problems by equality. Anything else is read or derived afresh, so a decision
with the carry is the decision without it (``tests/reconciling/test_carry.py``).

None of this is what safety rests on: every write carries its precondition whoever derived
it (`handlers.writing`), and the carry is kept by the caller, never by a module.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import specs
from eventhub_balancer.reconciling import fleets, records, writes

Record = Mapping[models.PartitionId, records.Recorded]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordRead:
    """``status.assignment`` as read (`records.read`) from one EventHubConsumer body."""

    #: the very body it was read from, and that body's uid and resourceVersion
    body: specs.ConsumerBody
    uid: str
    resource_version: str
    recorded: Record


def _version(body: specs.ConsumerBody) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")


def read_record(previous: RecordRead | None, body: specs.ConsumerBody) -> RecordRead:
    """The record ``body``'s status holds: ``previous`` when it was read from this very object
    at the same uid and resourceVersion (the roster hands out one object per version), else
    read afresh. An equal copy is read again: no content is taken for another's."""
    uid, version = _version(body)
    if (
        previous is not None
        and previous.body is body
        and previous.uid == uid
        and previous.resource_version == version
    ):
        return previous
    recorded = records.read(body.get("status") or {})
    return RecordRead(
        body=body, uid=uid, resource_version=version, recorded=types.MappingProxyType(recorded)
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
