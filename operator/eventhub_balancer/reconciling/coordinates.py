"""A change of what the pods read: new coordinates reach them by ordered hand-off. Pure.

The coordinates are what a pod reads and where it checkpoints: the Event Hubs namespace, the
hub, the consumer group, the checkpoint account (its URL, or with a connection string the
Secret that holds it) and container, and the start position. Each pod's ConfigMap carries
them (`podassignments.ParsedData`). When the spec names others, every partition a pod owns on the
old ones gets a higher epoch in the ConfigMap that carries the new ones: the pod stops its
workers on the old coordinates (final checkpoint) before it starts on the new ones, and a
worker that outlived its release is fenced out, at the checkpoint blob and at Event Hubs, by
the higher epoch. A partition being revoked keeps its epoch: its hand-off ends with the
release of that very epoch, and its next owner gets epoch + 1 anyway.

Stateless, so that a failed write or an operator restarted mid-change repeats nothing wrong:
the raise is derived from the ConfigMaps, the spec and the operator's record alone. A partition
is raised only while its owner's ConfigMap still has the old coordinates *and* the record's
epoch is not above the ConfigMap's; the record (written with the epochs, before any ConfigMap)
then holds the higher epoch, so a later cycle finds nothing more to raise and only rewrites
the ConfigMap.

After a change of hub, a partition the new hub does not list is gone, not a wrong answer:
it leaves the assignment; its epoch stays in ``status.epochs``, as every epoch given out
does, so that the partition, if the old hub comes back, is never given an epoch again.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping, Sequence

from eventhub_balancer import errors, handoffs
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    bounds,
    configmaps,
    podstates,
    specs,
    startpositions,
)
from eventhub_balancer.reconciling import kubeevents, observations, readbacks

#: The Event when pods are moved to new coordinates.
REASON = "CoordinatesChanged"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Coordinates:
    """Where a consumer reads and checkpoints, as the spec and the ConfigMaps both say it."""

    fully_qualified_namespace: str
    event_hub_name: str
    consumer_group: str
    checkpoint_account_url: str
    #: the checkpoint credentials' reference as the ConfigMap holds it (compact JSON): with a
    #: connection string, the account is whatever that Secret names; None: not in the
    #: ConfigMap (unknown, so not a difference)
    checkpoint_credentials: str | None
    checkpoint_container: str
    #: None: missing or unreadable in the ConfigMap (unknown, so not a difference: the
    #: ConfigMap is rewritten anyway, and a guess must not move every partition)
    start_position: startpositions.StartPosition | None

    def hub(self) -> tuple[str, str]:
        return (self.fully_qualified_namespace, self.event_hub_name)


#: The spec field of each coordinate, for the Event's text.
FIELDS: Mapping[str, str] = types.MappingProxyType(
    {
        "fully_qualified_namespace": "eventHub.fullyQualifiedNamespace",
        "event_hub_name": "eventHub.name",
        "consumer_group": "eventHub.consumerGroup",
        "checkpoint_account_url": "checkpointStore.accountUrl",
        "checkpoint_credentials": "checkpointStore.credentials",
        "checkpoint_container": "checkpointStore.containerName",
        "start_position": "startPosition",
    }
)


def of_spec(spec: specs.ConsumerSpec) -> Coordinates:
    return Coordinates(
        fully_qualified_namespace=spec.fully_qualified_namespace,
        event_hub_name=spec.event_hub_name,
        consumer_group=spec.consumer_group,
        checkpoint_account_url=spec.checkpoint_account_url,
        # The same text `podassignments.build_data` writes, so that equal means unchanged.
        checkpoint_credentials=json.dumps(
            spec.checkpoint_credentials.describe(), separators=(",", ":")
        ),
        checkpoint_container=spec.checkpoint_container,
        start_position=spec.start_position,
    )


def of_map(cm: observations.StoredMap) -> Coordinates | None:
    """The coordinates ``cm`` was written with; None when it names no hub (a corrupt
    ConfigMap is repaired by a rewrite, with no hand-off to order)."""
    parsed = cm.parsed
    if not (parsed.fully_qualified_namespace and parsed.event_hub_name):
        return None
    start: startpositions.StartPosition | None = None
    if configmaps.KEY_START_POSITION in cm.data:
        try:
            start = startpositions.parse_start_position(parsed.start_position)
        except errors.InvalidInput:
            start = None
    credentials = cm.data.get(configmaps.KEY_CHECKPOINT_CREDENTIALS)
    return Coordinates(
        fully_qualified_namespace=parsed.fully_qualified_namespace,
        event_hub_name=parsed.event_hub_name,
        consumer_group=parsed.consumer_group,
        checkpoint_account_url=parsed.checkpoint_account_url,
        checkpoint_credentials=credentials if isinstance(credentials, str) else None,
        checkpoint_container=parsed.checkpoint_container,
        start_position=start,
    )


def differences(old: Coordinates, new: Coordinates) -> tuple[str, ...]:
    """The spec fields in which ``old`` (a ConfigMap's) and ``new`` (the spec's) differ, in
    the spec's order; what ``old`` does not know is no difference."""
    return tuple(
        field
        for attribute, field in FIELDS.items()
        if getattr(old, attribute) is not None
        and getattr(old, attribute) != getattr(new, attribute)
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Change:
    """What moving to the spec's coordinates takes in this cycle."""

    #: the spec fields that differ from some pod's ConfigMap
    fields: tuple[str, ...] = ()
    #: the pods whose ConfigMap has other coordinates
    pods: tuple[str, ...] = ()
    #: partition -> its new epoch (the owner stays; the ConfigMap with the new coordinates
    #: carries it)
    raised: Mapping[models.PartitionId, int] = dataclasses.field(default_factory=dict)
    #: some ConfigMap names another hub: a partition the spec's hub does not list is gone
    hub_changed: bool = False

    def apply(
        self, assignment: Mapping[models.PartitionId, models.Ownership]
    ) -> dict[models.PartitionId, models.Ownership]:
        """``assignment`` with the raised epochs (same owner, state and since)."""
        return {
            pid: dataclasses.replace(o, epoch=self.raised[pid]) if pid in self.raised else o
            for pid, o in assignment.items()
        }

    def event(self) -> kubeevents.KubeEvent | None:
        """Said in the cycle that raises the epochs (it writes them first, so it happens once)."""
        if not self.raised:
            return None
        count = len(self.raised)
        return kubeevents.KubeEvent(
            reason=REASON,
            message=(
                f"spec {', '.join(self.fields)} changed: {count} partition"
                f"{'s' if count != 1 else ''} on {len(self.pods)} pod"
                f"{'s' if len(self.pods) != 1 else ''} move to the new coordinates by "
                "hand-off with new epochs"
            ),
        )


def change(
    *,
    spec: specs.ConsumerSpec,
    maps: Sequence[observations.StoredMap],
    pods: Mapping[str, podstates.PodState],
    assignment: Mapping[models.PartitionId, models.Ownership],
) -> Change:
    """What moving to ``spec``'s coordinates takes, from the ConfigMaps and the record alone.

    Only partitions the record gives to the ConfigMap's pod are raised: a ConfigMap's data is
    compared with the record, never believed (`readbacks`).
    """
    wanted = of_spec(spec)
    fields: set[str] = set()
    stale_pods: list[str] = []
    raised: dict[models.PartitionId, int] = {}
    hub_changed = False
    for cm in maps:
        old = of_map(cm)
        differ = differences(old, wanted) if old is not None else ()
        if old is None or not differ:
            continue
        hub_changed = hub_changed or old.hub() != wanted.hub()
        if not readbacks.belongs(cm, pods):
            continue  # a gone pod's partitions are freed (epoch + 1) by the plan
        fields.update(differ)
        stale_pods.append(cm.pod)
        for pid, entry in cm.parsed.partitions.items():
            o = assignment.get(pid)
            if o is None or o.owner != cm.pod or o.state != "owned":
                continue
            if o.epoch <= entry.epoch and o.epoch < bounds.MAX_EPOCH:
                # Onto new coordinates as onto a new owner: the hand-off table's rise.
                raised[pid] = o.epoch + handoffs.EPOCH_STEP["free"]
    ordered = tuple(f for f in FIELDS.values() if f in fields)
    return Change(
        fields=ordered,
        pods=tuple(sorted(stale_pods, key=models.name_key)),
        raised=raised,
        hub_changed=hub_changed,
    )
