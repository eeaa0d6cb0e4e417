"""The epoch audit of a chaos run: was an epoch ever handed out twice, did one ever go down?

The operator's promise is that every change of owner carries a new epoch and that
``status.epochs`` never goes back, whatever its caches served it. The checkpoint blobs only
fence *lower* epochs, so a second pod given the same epoch would not be fenced out: this has
to be checked where the assignment is made. The audit reads the local API server's write
record (every committed write, `kube.histories.WriteRecord`), never a watch, because the
faults under test make watches lag, stall and re-list.

- ``epoch_reuse``: the (partition, epoch) pairs of one EventHubConsumer that a committed
  ConfigMap write gave, as owned, to two different pods (the ConfigMap's data parsed with the
  product's own contract, `contracts.configmaps`). Pods are told apart by the uid the
  ConfigMap's annotation names (by name where it names none), so a pod recreated under its
  old name is another pod;
- ``epochs_decreased``: committed status writes in which a partition's epoch is lower than an
  epoch committed earlier for it in the same EventHubConsumer (counted per partition).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from eventhub_balancer.contracts import bounds, configmaps, podassignments, specs

#: How many findings of each kind the report lists in words (the counts are complete).
EXAMPLES_KEPT = 5

#: (namespace, EventHubConsumer name): the scope of a partition's epochs.
Consumer = tuple[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Write:
    """One committed write as the audit needs it: its type and the object after it."""

    type: str
    body: Mapping[str, Any]


class EpochLedger:
    """Fed with committed writes in commit order; counts epochs given twice and going down."""

    def __init__(self) -> None:
        #: (consumer, partition, epoch) -> the first pod given it.
        self._given: dict[tuple[Consumer, str, int], str] = {}
        self._reused: set[tuple[Consumer, str, int]] = set()
        #: (consumer, CR uid, partition) -> the highest epoch committed in status.epochs.
        self._highest: dict[tuple[Consumer, str, str], int] = {}
        self.epochs_decreased = 0
        self.writes = 0
        self.examples: list[str] = []

    @property
    def epoch_reuse(self) -> int:
        return len(self._reused)

    def feed(self, writes: Iterable[Write]) -> None:
        for write in writes:
            if write.type == "DELETED":
                continue  # a deletion hands nothing out
            kind = write.body.get("kind")
            if kind == "ConfigMap":
                self._configmap(write.body)
            elif kind == specs.KIND:
                self._status(write.body)

    def _note(self, text: str) -> None:
        if len(self.examples) < 2 * EXAMPLES_KEPT:
            self.examples.append(text)

    def _configmap(self, body: Mapping[str, Any]) -> None:
        data = body.get("data")
        if not isinstance(data, Mapping) or configmaps.KEY_PARTITIONS not in data:
            return  # not an assignment ConfigMap
        self.writes += 1
        parsed = podassignments.parse_data(data)
        metadata = body.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        pod = str((metadata.get("annotations") or {}).get(configmaps.ANNOTATION_POD_UID) or "")
        pod = pod or parsed.pod
        consumer = (namespace, parsed.consumer)
        for partition, entry in parsed.partitions.items():
            if entry.state != "owned":
                continue
            key = (consumer, str(partition), entry.epoch)
            first = self._given.setdefault(key, pod)
            if first != pod and key not in self._reused:
                self._reused.add(key)
                self._note(
                    f"{namespace}/{parsed.consumer}: partition {partition} epoch {entry.epoch} "
                    f"given to {first} and to {pod}"
                )

    def _status(self, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        epochs = (body.get("status") or {}).get("epochs")
        if not isinstance(epochs, Mapping):
            return
        self.writes += 1
        consumer = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        uid = str(metadata.get("uid") or "")
        for partition, epoch in epochs.items():
            if not bounds.is_epoch(epoch):
                continue
            key = (consumer, uid, str(partition))
            highest = self._highest.get(key)
            if highest is not None and epoch < highest:
                self.epochs_decreased += 1
                self._note(
                    f"{consumer[0]}/{consumer[1]}: status.epochs[{partition}] {highest} -> {epoch}"
                )
            else:
                self._highest[key] = epoch
