"""The hand-off of a partition from one owner to the next: every rule, as data, in one place.

A partition changes owner by an ordered hand-off: the operator marks it ``revoking`` on its
owner; the owner's worker stops after its in-flight batch, writes a final checkpoint and
acknowledges the release; only then does the operator give it to the next owner, at
epoch + 1. A dead owner, or one that does not acknowledge within ``handoffTimeoutSeconds``,
does not hold the hand-off up: its successor takes over at epoch + 1, which fences it out at
Event Hubs (``owner_level``) and at the checkpoint blob.

Both sides of the hand-off read their rules from here: the planner (`balancing.planning`)
decides each partition's fate from `FATES`, and the consumer runtime (`consumer.partitions`,
`consumer.runtime`) moves its workers through `WORKER_TRANSITIONS`. Nothing here does I/O or
reads a clock: the callers say what they observed. docs/architecture.md draws both tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

# -- the operator's side: one partition in the assignment ------------------------------------

#: What the operator writes into a pod's ConfigMap for a partition: ``owned``, the owner
#: processes it; ``revoking``, the owner must stop, checkpoint and acknowledge the release.
WrittenState = Literal["owned", "revoking"]
WRITTEN_STATES: tuple[WrittenState, ...] = get_args(WrittenState)

#: A partition as the operator reads it at the start of a cycle: the written state together
#: with what was observed since. ``released``: the owner acknowledged the release of this
#: very epoch (revoking; or owned, by a terminating owner that let go of its own accord);
#: ``expired``: revoking for ``handoffTimeoutSeconds`` or longer without that
#: acknowledgement; ``unowned``: nobody owns it (new, or no live pod), its epoch
#: kept so that epochs never go back.
PartitionState = Literal["unowned", "owned", "revoking", "released", "expired"]
PARTITION_STATES: tuple[PartitionState, ...] = get_args(PartitionState)

#: Where the partition's owner stands: ``live`` (Running and Ready), ``held`` (NotReady, within
#: ``podGraceSeconds``: keeps what it owns, gets nothing new), ``draining`` (terminating), or
#: ``gone`` (absent, or NotReady beyond the grace period).
Standing = Literal["live", "held", "draining", "gone"]
STANDINGS: tuple[Standing, ...] = get_args(Standing)

#: What a cycle does with the partition. ``keep``: stays with its live owner (the planner may
#: still revoke it to rebalance); ``hold``: stays with its held owner; ``drain``: revoke it
#: (the owner is terminating); ``wait``: a hand-off is in flight, nobody else gets it yet;
#: ``free``: give it to a new owner now, at epoch + 1.
Fate = Literal["keep", "hold", "drain", "wait", "free"]

#: Why a partition is free: it had no owner, its owner is gone, the owner acknowledged the
#: release, or the hand-off timed out. (The planner's move reasons use the same words.)
FreeReason = Literal["new", "gone", "released", "timeout"]

#: The whole decision, one row per (state, owner standing). A gone owner frees the partition
#: whatever it was doing: nothing waits on a dead process.
FATES: Mapping[tuple[PartitionState, Standing], tuple[Fate, FreeReason | None]] = {
    ("unowned", "live"): ("free", "new"),
    ("unowned", "held"): ("free", "new"),
    ("unowned", "draining"): ("free", "new"),
    ("unowned", "gone"): ("free", "new"),
    ("owned", "live"): ("keep", None),
    ("owned", "held"): ("hold", None),
    ("owned", "draining"): ("drain", None),
    ("owned", "gone"): ("free", "gone"),
    # A hand-off is never cancelled: revoking stays revoking until it ends one of three ways.
    ("revoking", "live"): ("wait", None),
    ("revoking", "held"): ("wait", None),
    ("revoking", "draining"): ("wait", None),
    ("revoking", "gone"): ("free", "gone"),
    ("released", "live"): ("free", "released"),
    ("released", "held"): ("free", "released"),
    ("released", "draining"): ("free", "released"),
    ("released", "gone"): ("free", "gone"),
    ("expired", "live"): ("free", "timeout"),
    ("expired", "held"): ("free", "timeout"),
    ("expired", "draining"): ("free", "timeout"),
    ("expired", "gone"): ("free", "gone"),
}

#: How much a partition's epoch rises when it reaches a new owner. Every change of owner
#: raises it, so that the new owner's ``owner_level`` and checkpoint epoch fence the old one
#: out; revoking and keeping never change it. The planner (`balancing.planning`) raises a
#: freed partition's epoch by this step, and so does a change of coordinates
#: (`reconciling.coordinates`), which moves a partition as if to a new owner: this table is
#: the rule, not a description of it.
EPOCH_STEP: Mapping[Fate, int] = {"keep": 0, "hold": 0, "drain": 0, "wait": 0, "free": 1}


def partition_state(
    written: WrittenState | None,
    *,
    epoch: int,
    acknowledged: int | None,
    waited: float,
    timeout: float,
) -> PartitionState:
    """The state of a partition from what is written and what was observed since.

    ``written`` is None when the partition has no owner; ``acknowledged`` is the epoch whose
    release the owner acknowledged (None: none); ``waited`` is how long it has been revoking.
    """
    if written is None:
        return "unowned"
    if acknowledged == epoch:
        # Asked (revoking), or of its own accord (a terminating pod releases everything):
        # the owner has written its final checkpoint of this epoch and stopped.
        return "released"
    if written == "owned":
        return "owned"
    if waited >= timeout:
        return "expired"
    return "revoking"


def fate(state: PartitionState, standing: Standing) -> tuple[Fate, FreeReason | None]:
    """What a cycle does with a partition in ``state`` whose owner stands ``standing``."""
    return FATES[state, standing]


# -- the pod's side: one worker, one (partition, epoch) ----------------------------------------

#: ``fencing``: writing its epoch into the checkpoint blob; ``running``: receiving and
#: handing batches to the handler; ``releasing``: finishing the in-flight batch and writing
#: the final checkpoint. It ends ``released`` (the pod acknowledges the release), ``lost``
#: (a higher epoch holds the partition: stop at once, write nothing) or ``failed`` (an error
#: the worker cannot handle: the runtime restarts it with backoff).
WorkerState = Literal["fencing", "running", "releasing", "released", "lost", "failed"]
WORKER_STATES: tuple[WorkerState, ...] = get_args(WorkerState)

#: What happens to a worker: its fence is written; the operator revokes the partition (or the
#: pod shuts down); the final checkpoint is written; a higher epoch took the partition (at the
#: blob or at Event Hubs); any other error.
WorkerEvent = Literal["fenced", "revoked", "checkpointed", "ownership_lost", "error"]
WORKER_EVENTS: tuple[WorkerEvent, ...] = get_args(WorkerEvent)

#: The ways a worker ends.
Outcome = Literal["released", "lost", "failed"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

#: Every legal move of a worker; anything else is a bug (`IllegalTransition`).
WORKER_TRANSITIONS: Mapping[tuple[WorkerState, WorkerEvent], WorkerState] = {
    ("fencing", "fenced"): "running",
    # Revoked before it received anything: the fence is the final checkpoint.
    ("fencing", "revoked"): "released",
    ("running", "revoked"): "releasing",
    ("releasing", "checkpointed"): "released",
    ("fencing", "ownership_lost"): "lost",
    ("running", "ownership_lost"): "lost",
    ("releasing", "ownership_lost"): "lost",
    ("fencing", "error"): "failed",
    ("running", "error"): "failed",
    ("releasing", "error"): "failed",
}


class IllegalTransition(RuntimeError):
    """A worker was asked to move in a way the hand-off does not allow."""

    def __init__(self, state: WorkerState, event: WorkerEvent) -> None:
        super().__init__(f"a worker in state {state!r} cannot take event {event!r}")
        self.state = state
        self.event = event


def next_worker_state(state: WorkerState, event: WorkerEvent) -> WorkerState:
    """The state a worker in ``state`` moves to on ``event``."""
    try:
        return WORKER_TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(state, event) from None


def released_at_once(
    written: WrittenState, *, running: bool, failing: bool = False, leaving: bool = False
) -> bool:
    """A pod asked to release a partition it does not run has nothing to finish.

    That happens after the pod restarted, or when its worker already ended (lost or failed):
    it acknowledges the release at once, so the hand-off does not wait for its timeout.
    A pod shutting down (``leaving``) lets go likewise of each owned partition it does not
    run because it is ``failing`` (its worker failed and waits for its restart, or the
    clients cannot open): it holds no link and wrote nothing since its last checkpoint, and
    a checkpoint write that failed leaves its batch to the next owner (at least once).
    """
    if running:
        return False
    return written == "revoking" or (leaving and failing and written == "owned")
