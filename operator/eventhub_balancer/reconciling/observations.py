"""What a cycle read, as one value: the input of `deciding.decide`.

`handlers.observing` fills an `Observation` through the ports and changes nothing else; what
the bodies mean (which pods are members, which ConfigMaps are this consumer's, what a fault
says) is read here, so that the whole cycle can be replayed from one value.

The checkpoint blobs are read only when a decision needs them (a partition gets a new owner,
or weighting "lag"): the first decision says so (``Decision.needs_checkpoints``), the cycle
reads them into `StoreRead.checkpoints` and decides again. Nothing travels through a side
channel.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    configmaps,
    podassignments,
    podstates,
    specs,
    startpositions,
    statusbodies,
)
from eventhub_balancer.reconciling import conflicts


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fault:
    """A failure of a dependency as the status shows it: the error's reason and text."""

    reason: str
    message: str

    @classmethod
    def of(cls, error: errors.EventHubBalancerError) -> Fault:
        return cls(reason=error.reason, message=error.steady or str(error))


@dataclasses.dataclass(frozen=True, kw_only=True)
class HubRead:
    """The partition list: listed now, or on a fault (or while backing off) the last known."""

    #: None: never listed (the cycle plans over the partitions already assigned)
    ids: tuple[str, ...] | None = None
    #: why the list is not fresh; None: Event Hubs answered
    fault: Fault | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreRead:
    """The checkpoint store: its blobs when read in this cycle, else what is known of it."""

    #: {partition: (epoch, sequence number)} read in this cycle; None: not read in this cycle
    checkpoints: Mapping[str, tuple[int, int]] | None = None
    #: the last failure, while it stands (backing off from it); None: no failure
    fault: Fault | None = None
    #: the store was read successfully in this cycle or an earlier one
    listed: bool = False
    #: {partition: checkpoint sequence number} of the last successful read, in this cycle or
    #: an earlier one: weighting "lag" goes on from it while the store cannot be read (a slow
    #: store is no reason to weigh by count and reshuffle); None: never read
    known_sequences: Mapping[str, int] | None = None
    #: when it was last read successfully (wall seconds); None: never
    checked_at: float | None = None
    #: when the blobs that a cycle listed after its writes, for this one, were listed (wall
    #: seconds); None: none was (`deadlines.lists_ahead`)
    ahead_at: float | None = None
    #: an SDK processor runs on the same consumer group: its ownership claims were rewritten
    #: in two probe intervals running (`handlers.foreignclaims`)
    foreign: bool = False
    #: the partitions whose blobs an earlier listing held and the last one lacks (`Vanished`)
    gone: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Vanished:
    """The checkpoint blobs a listing lacks that an earlier listing of the same store held:
    deleted (by hand, by a lifecycle policy, with their container), since only owners write
    them and nothing here deletes one. Kept until a listing has them again."""

    #: the store they were listed in (`handlers.observing.store_key`); None: never listed
    key: Hashable | None = None
    #: the partitions whose blobs the last listing held
    listed: frozenset[str] = frozenset()
    #: the partitions whose blobs an earlier listing held and the listings since lack
    gone: frozenset[str] = frozenset()

    def after(self, listed: Iterable[str], *, key: Hashable, given: Iterable[str] = ()) -> Vanished:
        """What a listing of ``listed`` in the store ``key`` leaves. The first one of this
        operator has nothing to compare with: only the partitions ``given`` (those given out,
        when the status says blobs were lost before an operator restart) count as listed."""
        now = frozenset(listed)
        if self.key == key:
            return Vanished(key=key, listed=now, gone=(self.listed | self.gone) - now)
        return Vanished(key=key, listed=now, gone=frozenset(given) - now)


#: The least seconds between the two reads of the hub's ends a partition's rate is measured
#: over (`Traffic`): a producer's bursts even out over them.
RATE_SECONDS = 10.0
#: Until then (after an operator start, or a change of hub) over one second at least, from the
#: first read: a partition's end moves by its producers' sends, not smoothly. Measured too low,
#: the floor is `models.LAG_FLOOR`, as with no rate; too high, a backlog waits a cycle more.
RATE_LEAST_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Traffic:
    """The hub's last sequence numbers at earlier reads, for the events a second each partition
    receives: weighting "lag" leaves that many seconds of them out of each lag
    (`models.LAG_FLOOR_SECONDS`). The older read is kept until the newer one is
    `RATE_SECONDS` old, so that each rate is measured over `RATE_SECONDS` to twice that
    (longer when reads were skipped)."""

    #: the hub they were read from (its namespace and name); another hub's are no rate here
    key: Hashable | None = None
    #: (wall seconds, {partition: last sequence number}) of the two reads; None: none yet
    older: tuple[float, Mapping[str, int]] | None = None
    newer: tuple[float, Mapping[str, int]] | None = None

    def rates(
        self, ends: Mapping[str, startpositions.PartitionBounds], *, key: Hashable, wall: float
    ) -> dict[models.PartitionId, float]:
        """Events a second each partition received from the older read kept to ``ends``,
        read at ``wall``; none from another hub, nor for a partition whose end went back, nor
        over less than `RATE_LEAST_SECONDS`."""
        since = self.older or self.newer
        if self.key != key or since is None or wall - since[0] < RATE_LEAST_SECONDS:
            return {}
        at, then = since
        return {
            models.PartitionId(p): (b.last_sequence_number - then[p]) / (wall - at)
            for p, b in ends.items()
            if b.last_sequence_number >= then.get(p, b.last_sequence_number + 1)
        }

    def after(
        self, ends: Mapping[str, startpositions.PartitionBounds], *, key: Hashable, wall: float
    ) -> Traffic:
        """What a read of ``ends`` at ``wall`` leaves kept."""
        last = {p: b.last_sequence_number for p, b in ends.items()}
        if self.key != key or self.newer is None or wall < self.newer[0]:
            return Traffic(key=key, newer=(wall, last))
        if wall - self.newer[0] >= RATE_SECONDS:
            return Traffic(key=key, older=self.newer, newer=(wall, last))
        return self


#: No ConfigMap seen deleted (an immutable default: `Departures.vanished`).
NOTHING_VANISHED: Mapping[str, int | None] = types.MappingProxyType({})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Departures:
    """What the pods as read say of a pod they lack (whether it is known to be gone), and of
    a pod they have whose ConfigMap was deleted (whether it stands).

    A pod a cache lacks may be gone, or may be one that cache has not been shown yet (its
    watch lags). A pod is known gone when the cache saw it leave (``departed``: a deletion,
    a relabel, a listing without it), or when the pods were listed afresh at a version at or
    after the evidence that it existed (the record that names it, the ConfigMap written for
    it): what a listing lacks does not exist as of that listing. The other way round, a pod
    the cache has may be gone: its ConfigMap going (``vanished``) is the garbage collector
    following the pod, seen before the late pod watch shows the pod leave."""

    #: every read goes to the API server (no cache): whatever the pods lack is gone
    uncached: bool = False
    #: the resourceVersion the pods were last listed afresh at; None: never
    listed: int | None = None
    #: the pods the cache saw leave (bounded, newest last)
    departed: frozenset[str] = frozenset()
    #: of ``departed``, the pods seen leaving the selector, not deleted: they may run on
    left: frozenset[str] = frozenset()
    #: the ConfigMaps the cache saw deleted (bounded), by name, with the version of their
    #: deletion: each may have gone with its pod (`confirmed`)
    vanished: Mapping[str, int | None] = dataclasses.field(default_factory=lambda: NOTHING_VANISHED)

    def gone(self, pod: str, *, seen_at: int | None) -> bool:
        """Whether ``pod``, which the pods as read lack, is known to be gone; ``seen_at``:
        the version of the evidence that it existed (None: unknown)."""
        if self.uncached or pod in self.departed:
            return True
        return self.listed is not None and seen_at is not None and self.listed >= seen_at

    def confirmed(self, pod: str, *, map_name: str) -> bool:
        """Whether ``pod``, which the pods as read have, stands: a pod's ConfigMap is deleted
        with the pod (its owner), so a pod whose ConfigMap ``map_name`` the cache saw
        deleted stands only once the pods were listed afresh at or after that deletion."""
        if self.uncached or map_name not in self.vanished:
            return True
        at = self.vanished[map_name]
        return at is None or (self.listed is not None and self.listed >= at)


#: Pods read with no cache in between: whatever they lack is gone.
UNCACHED = Departures(uncached=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything one cycle read about one EventHubConsumer."""

    namespace: str
    name: str
    #: the EventHubConsumer as read (metadata, spec, status)
    body: specs.ConsumerBody
    #: the parsed spec; None when it is invalid (then ``spec_error`` says why)
    spec: specs.ConsumerSpec | None = None
    spec_error: errors.InvalidInput | None = None
    hub: HubRead = HubRead()
    #: the pods as listed by spec.selector, and this consumer's ConfigMaps, as raw bodies
    pods: tuple[Mapping[str, Any], ...] = ()
    configmaps: tuple[Mapping[str, Any], ...] = ()
    #: what the pods as read say of the pods they lack (`Departures`)
    departures: Departures = UNCACHED
    store: StoreRead = StoreRead()
    #: partition -> its last enqueued sequence number and where the events it holds begin
    #: (weighting "lag", the backlog); None: not read
    last_sequences: Mapping[str, startpositions.PartitionBounds] | None = None
    #: partition -> events it received a second, measured from an earlier read of the ends
    #: (`Traffic`; weighting "lag"); empty: not measured
    rates: Mapping[models.PartitionId, float] = dataclasses.field(default_factory=dict)
    #: write the informational ``eventhub-balancer.dev/partitions`` annotation on each pod
    #: (``ehb operator --annotate-pods``; needs ``patch`` on pods, which the default install
    #: does not grant)
    annotate_pods: bool = False
    #: every other EventHubConsumer the operator sees, summed up (`conflicts.Peer`): the
    #: later of two that overlap writes nothing; empty: none known (no conflict is found)
    peers: tuple[conflicts.Peer, ...] = ()
    #: the hosts the install binds to one namespace each (`conflicts.Bindings`): a consumer
    #: of another namespace that names one is refused; empty: nothing bound
    bindings: conflicts.Bindings = conflicts.UNBOUND
    #: the pods the operator watches at all, as its ``--pod-selector`` reads; empty: every pod
    pod_scope: str = ""
    #: when this operator first saw each pod's state, by pod name (`podstates.Sighting`):
    #: a ``since`` stamped on a clock ahead or behind counts within what was seen; empty: as
    #: stamped
    sightings: Mapping[str, podstates.Sighting] = dataclasses.field(default_factory=dict)
    #: why the operator's last ConfigMap write for this consumer failed (`handlers.writing`),
    #: said where a Ready owner has no ConfigMap (`silentowners`); None: the last one went out
    refused: Fault | None = None

    @property
    def generation(self) -> int:
        return int((self.body.get("metadata") or {}).get("generation") or 0)

    @property
    def status(self) -> statusbodies.StatusBody:
        return self.body.get("status") or {}

    def lag(self) -> dict[models.PartitionId, int]:
        """Events not yet checkpointed per partition; empty unless the hub's end was read now
        and the checkpoints are known (read now, or the last read while the store is
        unreachable)."""
        store, last = self.store, self.last_sequences
        if store.checkpoints is not None:
            done: Mapping[str, int] | None = {p: s for p, (_e, s) in store.checkpoints.items()}
        else:
            done = store.known_sequences
        if done is None or last is None:
            return {}
        # Only the events the hub still holds wait: "nothing processed" (-1, or no checkpoint)
        # on a partition retention emptied is no backlog.
        return {
            models.PartitionId(p): ends.waiting_after(done.get(p, -1)) for p, ends in last.items()
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredMap:
    """An assignment ConfigMap as read from the API."""

    name: str
    uid: str
    resource_version: str
    pod: str  # the pod it is for (from data, else the label)
    pod_uid: str
    data: Mapping[str, str]
    annotations: Mapping[str, str]
    parsed: podassignments.ParsedData
    #: deleted already (its deletionTimestamp is set), and held by someone else's finalizer:
    #: it goes when they take it off, and is not deleted again
    deleting: bool = False


def stored_map(body: Mapping[str, Any]) -> StoredMap:
    meta = body.get("metadata") or {}
    data = body.get("data") or {}
    annotations = meta.get("annotations") or {}
    parsed = podassignments.parse_data(data)
    label_pod = str((meta.get("labels") or {}).get(configmaps.LABEL_POD, ""))
    return StoredMap(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        pod=parsed.pod or label_pod,
        pod_uid=str(annotations.get(configmaps.ANNOTATION_POD_UID, "")),
        data=dict(data),
        annotations=dict(annotations),
        parsed=parsed,
        deleting=bool(meta.get("deletionTimestamp")),
    )
