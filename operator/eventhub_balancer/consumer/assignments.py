"""Where a consumer learns its partitions, and where it acknowledges them.

The operator writes one ConfigMap per pod (``contracts.configmaps``); the pod reads it and
writes back three annotations: the generation it applied, the partitions it released, and
its reports of partitions in trouble (``contracts.partitionreports``). The
runtime only sees this module's :class:`AssignmentSource`, with three implementations:

- :class:`ConfigMapSource`: the pod's own ConfigMap, watched through the Kubernetes API (only
  the operator's ConfigMap for this very pod: ``adapters.podconfig`` refuses the others);
- ``assignmentfiles.FileSource``: a ConfigMap-shaped JSON file, for running without
  Kubernetes (a static assignment, a demo, a test that edits the file);
- :class:`MemorySource`: assignments handed over in-process (tests, the Python API).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from eventhub_balancer.adapters import podconfig, podreconnects
from eventhub_balancer.contracts import bounds, configmaps, partitionreports, podassignments

logger = logging.getLogger(__name__)

#: The watch's last resourceVersions kept (`ConfigMapSource`): a patch's echo comes among the
#: next few events, and the operator writes a pod's ConfigMap a few times a minute at most.
VERSIONS_KEPT = 16

Assignment = podassignments.ParsedData
Reports = Mapping[str, partitionreports.PartitionReport]

#: The annotations a pod writes on its ConfigMap; every other one is the operator's.
ACKNOWLEDGEMENT_KEYS = frozenset(
    {
        configmaps.ANNOTATION_APPLIED_GENERATION,
        configmaps.ANNOTATION_RELEASED,
        configmaps.ANNOTATION_PARTITION_REPORTS,
    }
)


class AssignmentSource(Protocol):
    """A stream of assignments, and the channel for acknowledgements."""

    def updates(self) -> AsyncIterator[Assignment]:
        """Every new assignment (the current one first); ends only when the source closes."""
        ...

    async def acknowledge(
        self,
        *,
        applied_generation: int | None,
        released: Mapping[str, int],
        reports: Reports | None = None,
    ) -> bool:
        """Publish the generation applied (None: not yet), the partitions released, and the
        reports of partitions failing, parked, stuck or lost (None or empty: none). False:
        there is nowhere to publish it (no ConfigMap of this pod's, no acknowledgement file),
        so nothing was sent."""
        ...

    def acknowledgement_lost(self) -> bool:
        """The last acknowledgement no longer stands where it was written (removed or edited
        by someone else): the runtime writes its current one again."""
        ...


def acknowledgement_annotations(
    *,
    applied_generation: int | None,
    released: Mapping[str, int],
    reports: Reports | None = None,
) -> dict[str, str]:
    """The annotations of an acknowledgement. The reports' annotation is always written (an
    empty object when there are none), so that a report that ended is cleared."""
    annotations = {
        configmaps.ANNOTATION_RELEASED: configmaps.build_released(released),
        configmaps.ANNOTATION_PARTITION_REPORTS: partitionreports.build(reports or {}),
    }
    if applied_generation is not None:
        annotations[configmaps.ANNOTATION_APPLIED_GENERATION] = configmaps.build_applied_generation(
            applied_generation
        )
    return annotations


def from_configmap(body: Mapping[str, Any]) -> Assignment:
    """The assignment in a ConfigMap object (``{"data": {...}}``) or in its bare data.

    Epochs are bounded as the operator bounds the ones it hands out (`bounds.is_floor`): an
    epoch with no successor, fenced into a checkpoint blob, would lock every later owner out
    of the partition, so such a partition is not applied.
    """
    data = body.get("data") if "data" in body or "metadata" in body else body
    parsed = podassignments.parse_data(data or {})
    unbounded = [p for p, e in parsed.partitions.items() if not bounds.is_floor(e.epoch)]
    if unbounded:
        parsed = dataclasses.replace(
            parsed,
            partitions={p: e for p, e in parsed.partitions.items() if p not in unbounded},
            problems=(
                *parsed.problems,
                *(f"partition {p}: epoch above {bounds.MAX_FLOOR}, not applied" for p in unbounded),
            ),
        )
    if parsed.partitions_unreadable is None:  # else not applied: `Readable` says so, once
        for problem in parsed.problems:
            logger.warning("assignment ConfigMap: %s", problem)
    return parsed


class Readable:
    """The one rule of every source for an assignment whose ``partitions`` cannot be read at
    all (missing, not JSON, not a JSON object; a file that is not JSON yet too): it is not
    applied, and the last readable one stands until the next readable one comes.

    The operator writes only readable ones, so such data is someone's edit or a fault, which
    the operator puts back at its next cycle (``AssignmentTampered``). Applied, it released
    every partition, a hand-off each for nothing. Kept, a partition the operator meanwhile
    gave to another pod is fenced by its new epoch at this pod's next checkpoint, as it is
    when a ConfigMap comes late. With nothing read before, the pod holds none, as before.
    Data that can be read with some bad entries is applied (those entries are not).
    """

    def __init__(self, where: str, *, advice: str) -> None:
        #: What the log names (the ConfigMap, the file) and what it tells the user to do.
        self.where, self.advice = where, advice
        self.last: Assignment | None = None

    def take(self, assignment: Assignment) -> Assignment | None:
        """``assignment`` to apply, or None: keep the last one (said once per call)."""
        why = assignment.partitions_unreadable
        if why is None:
            self.last = assignment
            return assignment
        if self.last is None:
            logger.warning(UNREADABLE, self.where, why, "holding none", self.advice)
            return assignment
        kept = f"keeping the assignment of generation {self.last.generation}"
        logger.warning(UNREADABLE, self.where, why, kept, self.advice)
        return None


#: What a pod says of an assignment whose partitions it cannot read (`Readable`).
UNREADABLE = "%s: %s, which the operator never writes: %s until a readable one comes; %s"
#: What to do about a ConfigMap, or a file, whose partitions cannot be read.
CONFIGMAP_ADVICE = (
    "the operator writes it back at its next cycle (Event AssignmentTampered). To change the "
    "assignment, change the EventHubConsumer, never this ConfigMap"
)
FILE_ADVICE = "write the file whole, with partitions a JSON object of {partition: entry}"


class MemorySource:
    """Assignments put in-process; acknowledgements kept for whoever asks."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Assignment | None] = asyncio.Queue()
        self._readable = Readable("assignment", advice="put a readable one")
        self.applied_generation: int | None = None
        self.released: dict[str, int] = {}
        self.reports: dict[str, partitionreports.PartitionReport] = {}
        #: How many acknowledgements were written (to bound their rate in tests).
        self.writes = 0
        self.acknowledged = asyncio.Condition()

    def put(self, assignment: Assignment | Mapping[str, Any]) -> None:
        if not isinstance(assignment, podassignments.ParsedData):
            assignment = from_configmap(assignment)
        self._queue.put_nowait(assignment)

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def updates(self) -> AsyncIterator[Assignment]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            item = self._readable.take(item)
            if item is not None:
                yield item

    async def acknowledge(
        self,
        *,
        applied_generation: int | None,
        released: Mapping[str, int],
        reports: Reports | None = None,
    ) -> bool:
        async with self.acknowledged:
            self.applied_generation = applied_generation
            self.released = dict(released)
            self.reports = dict(reports or {})
            self.writes += 1
            self.acknowledged.notify_all()
        return True

    def acknowledgement_lost(self) -> bool:
        return False  # nobody else writes here

    async def wait_for(
        self,
        *,
        generation: int | None = None,
        released: Mapping[str, int] | None = None,
    ) -> None:
        """Until the generation is applied and/or the partitions are released (tests wrap
        it in ``asyncio.timeout``)."""

        def done() -> bool:
            if generation is not None and (self.applied_generation or -1) < generation:
                return False
            return all(self.released.get(p) == e for p, e in (released or {}).items())

        async with self.acknowledged:
            await self.acknowledged.wait_for(done)


#: What the pod says when the ConfigMap it ran goes: deleted with its EventHubConsumer (by
#: hand, a GitOps prune, its namespace), or this pod no longer a member; the pod cannot tell
#: which (it may not read EventHubConsumers). It releases everything it holds and idles.
WITHDRAWN = (
    "ConfigMap %s is gone or no longer this pod's: its EventHubConsumer was deleted, or this "
    "pod is no longer one of its members (its labels or spec.selector changed). Releasing "
    "every partition (each writes its final checkpoint); the pod then holds none and idles "
    "until the operator writes its ConfigMap again. If the EventHubConsumer is gone for "
    "good, delete or scale down this workload"
)

#: What the pod says when it starts before the operator wrote its ConfigMap (a new pod, until
#: the operator gives it partitions).
WAITING = (
    "no ConfigMap %s yet: waiting for the operator to assign partitions to this pod (if none "
    "comes, an EventHubConsumer's spec.selector must match this pod's labels)"
)


class ConfigMapSource:
    """The pod's own ConfigMap, watched through the Kubernetes API.

    The acknowledgement is written when it changes, and again when the watch shows that the
    ConfigMap no longer carries it: someone removed or edited the annotations, or the
    ConfigMap was deleted and created again. The operator would otherwise wait for an answer
    that was given once and is gone (Ready says ``AssignmentNotApplied``, a hand-off waits
    for its timeout), or act on a release the pod never made.
    """

    def __init__(self, client: podconfig.PodConfigMaps) -> None:
        self.client = client
        self._readable = Readable(f"ConfigMap {client.name}", advice=CONFIGMAP_ADVICE)
        #: The annotations of the last acknowledgement written (None: none yet).
        self._written: dict[str, str] | None = None
        #: Those annotations on the ConfigMap as last seen (None: no ConfigMap of ours).
        self._standing: dict[str, str] | None = None
        #: The resourceVersions the watch showed last: whether it showed a patch's echo
        #: before the patch's answer came back.
        self._shown: collections.deque[str] = collections.deque(maxlen=VERSIONS_KEPT)

    @property
    def refused(self) -> Mapping[str, int]:
        """ConfigMaps refused as not this pod's own, by reason (``configmaps.refusal``)."""
        return self.client.refused

    async def updates(self) -> AsyncIterator[Assignment]:
        # Our own annotation patches change the object too: only new data is news.
        last_data: Any = None
        async for body in self.client.watch():
            self._standing = _acknowledgement_of(body) if body else None
            if version := str((body.get("metadata") or {}).get("resourceVersion") or ""):
                self._shown.append(version)
            data = body.get("data") or {}
            if data == last_data:
                continue
            if not body:  # none of ours: no problem in its data, none to log
                self._readable.last = None  # held none since: nothing to keep
                if last_data:
                    logger.warning(WITHDRAWN, self.client.name)
                else:
                    logger.info(WAITING, self.client.name)
                last_data = data
                yield podassignments.ParsedData()
                continue
            last_data = data
            assignment = self._readable.take(from_configmap(body))
            if assignment is not None:
                yield assignment

    async def acknowledge(
        self,
        *,
        applied_generation: int | None,
        released: Mapping[str, int],
        reports: Reports | None = None,
    ) -> bool:
        if self._standing is None:
            return False  # no ConfigMap of this pod's (not written yet, or gone): nobody waits
        annotations = acknowledgement_annotations(
            applied_generation=applied_generation, released=released, reports=reports
        )
        version = await self.client.annotate(annotations)
        self._written = annotations
        if version is None or version not in self._shown:
            # What the server holds now, until the watch says otherwise: the echo of this
            # very patch is no news, and is no reason to write again. Once the watch showed
            # that echo, what it showed since stands: a hand that stripped the annotations
            # just after the patch, seen before its answer came, is not covered up.
            self._standing = dict(annotations)
        return True

    def unreadable(self) -> str | None:
        """Why the pod cannot read its ConfigMap, when the API server refuses its credentials
        (401/403 in a row, `podreconnects.Reconnects.refusal`); None while it may."""
        refusal = self.client.reconnects.refusal
        if refusal is None:
            return None
        return str(podreconnects.wrap(refusal, f"cannot read ConfigMap {self.client.name}"))

    def acknowledgement_lost(self) -> bool:
        if self._written is None or self._standing is None:
            return False
        return any(self._standing.get(k) != v for k, v in self._written.items())


def _acknowledgement_of(body: Mapping[str, Any]) -> dict[str, str]:
    """The acknowledgement annotations on a ConfigMap object."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return {k: str(v) for k, v in annotations.items() if k in ACKNOWLEDGEMENT_KEYS}
