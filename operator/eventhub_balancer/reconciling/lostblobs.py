"""What CheckpointStoreReachable says while checkpoint blobs the operator listed are gone.

Only the owners write the blobs and nothing of this project deletes one, so a blob that a
listing held and a later one lacks was deleted: by hand, by a lifecycle policy, with its
container (`observations.Vanished`). Where its partition stood is lost. An owner still running
writes its last checkpoint back (the pods keep it), but a pod that takes the partition up
before that, a new owner or the same pod restarted, finds no checkpoint and starts from
spec.startPosition. Pods log that; this says it where users look: the condition False with
`REASON`, whose Warning Event `kubeevents` posts when it starts, and the
Normal ``CheckpointStoreReachable`` when the blobs are all back. Blobs never written (an owner
that never started) are no loss the operator can tell, and it says nothing of them.
"""

from __future__ import annotations

from collections.abc import Iterable

from eventhub_balancer.balancing import models, partitionlists
from eventhub_balancer.contracts import conditions, specs, startpositions, statusbodies

#: CheckpointStoreReachable's reason, and its Warning Event's, while listed blobs are gone.
REASON = "CheckpointsLost"
#: Runs of partitions named in the message (``0-3, 9``); the partitions past them are counted.
NAMED = 16


def _start(position: startpositions.StartPosition) -> str:
    """What a start from ``position`` costs, against the lost checkpoint."""
    match position:
        case startpositions.Earliest():
            return "earliest: what the hub still holds is processed again"
        case startpositions.Latest():
            return "latest: the events since the lost checkpoint are skipped"
    return (
        f"{startpositions.to_json(position)}: the events between the lost checkpoint and "
        "there are skipped or processed again"
    )


def condition(gone: Iterable[str], *, spec: specs.ConsumerSpec) -> conditions.Condition:
    """CheckpointStoreReachable False naming the partitions of ``gone`` and where they start."""
    ordered = sorted(gone, key=models.name_key)
    names = partitionlists.named(ordered, NAMED)
    which = (
        f"the checkpoint blob of partition {names} is"
        if len(ordered) == 1
        else f"the checkpoint blobs of partitions {names} are"
    )
    return conditions.Condition(
        type=conditions.CHECKPOINT_STORE_REACHABLE,
        status="False",
        reason=REASON,
        message=conditions.shorten(
            f"{which} gone from container {spec.checkpoint_container!r} since the operator "
            "listed them (deleted by hand, by a lifecycle policy, or with the container): an "
            "owner still running writes its last checkpoint back, but a pod that takes such a "
            "partition up before that (a new owner, or its pod restarted) starts from "
            f"spec.startPosition ({_start(spec.start_position)}). Import an export with the "
            "consumer paused (ehb checkpoints import) to put them back"
        ),
    )


def said(status: statusbodies.StatusBody) -> frozenset[str]:
    """The partitions given out (``status.epochs``) when ``status`` says blobs are lost: for a
    restarted operator, which has listed nothing yet, those whose blobs its first listing
    lacks are still lost."""
    told = conditions.find(status.get("conditions"), conditions.CHECKPOINT_STORE_REACHABLE)
    if told is None or told.get("reason") != REASON:
        return frozenset()
    return frozenset(str(p) for p in status.get("epochs") or {})
