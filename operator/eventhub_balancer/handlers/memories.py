"""What the operator keeps about one consumer between cycles: the pacing of failed reads,
the carry its decisions hand on, and the last decision while it stands.

A module of its own so that the daemon in `registering` (which holds one `Memory` per
consumer) and the readers in `observing` (which advance it) need not import each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping

from eventhub_balancer.reconciling import deciding, observations, retries


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settled:
    """A decision that wrote nothing, the inputs it was taken from, and until when it stands.

    A cycle whose inputs (`cycles` builds them from the watch's change counts, the CR's
    resourceVersion, the partition list, the peers and the store's state) equal ``inputs``
    before ``until`` (wall seconds) would decide the same again: it skips reading the pods and
    deciding, the two steps whose cost grows with the fleet."""

    inputs: Hashable
    until: float
    decided_at: float
    decision: deciding.Decision


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreAhead:
    """The checkpoint blobs listed right after a cycle that started hand-offs, for the cycle
    that completes them (`checkpointreads.read_ahead`)."""

    #: the store they were listed from (`checkpointreads.store_key`)
    key: Hashable
    #: the wall seconds of the cycle that listed them
    at: float
    checkpoints: Mapping[str, tuple[int, int]]


@dataclasses.dataclass
class Memory:
    """The backoff of each dependency and the fault it backs off from, the decisions' carry,
    and `Settled`.

    Why it is kept: a failing Event Hubs namespace or storage account is not asked again every
    cycle (`retries.Backoff`), and while the operator waits, the status goes on showing the
    fault that started the wait (the cached `observations.Fault`), and the checkpoint store is
    probed only every `retries.CHECKPOINT_PROBE_SECONDS` when no decision needs it.

    None of it is needed for a correct decision (the last checkpoint positions only keep lag
    weighting steady through a store outage, the carry only spares reading the bodies that did
    not change, and `Settled` only spares a cycle whose inputs did not change): the
    assignment, the epochs and the pods are read afresh whenever they may have changed, so a
    restarted operator starts with an empty Memory and reaches the same assignment. The
    readers in `observing` change it, and only after they asked; `cycles` keeps ``carry`` and
    ``settled``.
    """

    hub: retries.Backoff = dataclasses.field(default_factory=retries.Backoff)
    hub_fault: observations.Fault | None = None
    store: retries.Backoff = dataclasses.field(default_factory=retries.Backoff)
    store_fault: observations.Fault | None = None
    #: when the checkpoint store was last read successfully (seconds); None: never
    store_checked_at: float | None = None
    #: the checkpoint sequence numbers of that read: weighting "lag" goes on from them while
    #: the store is backing off, instead of falling back to count and reshuffling
    store_sequences: dict[str, int] | None = None
    #: the blobs listed ahead by a cycle that revoked; taken, once, by the next read that
    #: needs them within `checkpointreads.AHEAD_SECONDS`
    store_ahead: StoreAhead | None = None
    #: the last decision while it stands; None: decide in the next cycle
    settled: Settled | None = None
    #: what the last decision handed on to the next (`deciding.Carry`: the fleet and the
    #: record it read, the writes a second decision over the same bodies takes again)
    carry: deciding.Carry = deciding.COLD
