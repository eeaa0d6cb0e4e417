"""One record per consumer, owned by its daemon: all the operator keeps about it between cycles.

kopf keeps everything it knows about one object in one record (``ResourceMemory``), and
forgetting the object is one ``del``. The operator does the same for each EventHubConsumer:
`registering.Operator.consumers` maps its key to its `Memory`, which its daemon makes when it
starts and pops when it stops. Others only set its ``wake`` (the watch handlers, the answer of a
write, the growth watch); every field is written by its daemon alone. The readers in
`observing` and `checkpointreads` read it and return what they learnt (`Pacing`,
`StorePacing`, the listing made ahead); the cycle (`cycles`) keeps what they return and what
the decision hands on.

Why it is kept: a failing Event Hubs namespace or storage account is not asked again every
cycle (`deadlines.Backoff`), and while the operator waits, the status goes on showing the fault
that started the wait; the checkpoint store is probed only every
`deadlines.CHECKPOINT_PROBE_SECONDS` when no decision needs it, and each probe's ETags of the
SDK's ownership blobs are kept to tell a processor left running beside the pods (`Claims`).
None of it is needed for a correct decision (the last checkpoint positions only keep lag
weighting steady through a store outage, the hub's earlier ends only measure each partition's
rate for it, the carry only spares reading the bodies that did not change, and
`deadlines.Settled` only spares a cycle whose inputs did not change): the assignment, the
epochs and the pods are read afresh whenever they may have changed, so a restarted operator
starts with empty records and reaches the same assignment.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Hashable, Mapping

from eventhub_balancer.contracts import podstates, specs
from eventhub_balancer.reconciling import deadlines, decisions, observations


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreAhead:
    """The checkpoint blobs listed right after a cycle that started hand-offs, for the cycle
    that completes them (`checkpointreads.read_ahead`)."""

    #: the store they were listed from (`observing.store_key`)
    key: Hashable
    #: the wall seconds of the cycle that listed them
    at: float
    checkpoints: Mapping[str, tuple[int, int]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Claims:
    """The SDK's ownership blobs of the consumer group as the store's probes listed them
    (`foreignclaims`): a processor left running beside the pods rewrites them at every
    balancing pass, one stopped cleanly once."""

    #: the store they were listed from (`observing.store_key`): another store's claims are
    #: no rewrite of these
    key: Hashable | None = None
    #: {partition: ETag} at the last probe; None: none listed yet
    etags: Mapping[str, str] | None = None
    #: the probe intervals running in which some claim was rewritten, and in which none was
    rewritten: int = 0
    quiet: int = 0
    #: another processor runs on the consumer group (claims rewritten in two intervals
    #: running), until two intervals are quiet
    live: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pacing:
    """A dependency's backoff and the fault it backs off from (None: it answered)."""

    backoff: deadlines.Backoff = dataclasses.field(default_factory=deadlines.Backoff)
    fault: observations.Fault | None = None
    #: the run of failed attempts the fault ends: when it started, how many failed, and when
    #: the log last said it (wall seconds; `observing.told`)
    since: float = 0.0
    attempts: int = 0
    said: float = 0.0
    #: how many partitions the pods reported in trouble when it last failed: fewer since say
    #: that it answers them again (a partition fenced, checkpointed or receiving), and end the
    #: backoff
    failing: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class StorePacing(Pacing):
    """The checkpoint store's `Pacing`, when it was last read and what it held then."""

    #: when the checkpoint store was last read successfully (seconds); None: never
    checked_at: float | None = None
    #: the checkpoint sequence numbers of that read: weighting "lag" goes on from them while
    #: the store is backing off, instead of falling back to count and reshuffling
    sequences: Mapping[str, int] | None = None
    #: the store they were read from (`observing.store_key`)
    sequences_key: Hashable | None = None
    #: the blobs listed ahead by a cycle that started hand-offs; taken, once, by the next
    #: read that needs them (`checkpointreads.read_store`)
    ahead: StoreAhead | None = None
    #: why the hub's last sequence numbers, read beside the blobs, could not be read, as last
    #: logged: a standing fault is warned of once, not at every cycle; None: they were read
    ends_fault: str | None = None
    #: the ends of earlier reads, each partition's rate measured from them (weighting "lag")
    traffic: observations.Traffic = dataclasses.field(default_factory=observations.Traffic)
    #: the SDK's ownership claims as the probes saw them (`Claims`)
    claims: Claims = Claims()
    #: the blobs listed before that the listings since lack (`observations.Vanished`)
    vanished: observations.Vanished = dataclasses.field(default_factory=observations.Vanished)


@dataclasses.dataclass(eq=False)
class Memory:
    """Everything the operator keeps about one consumer (`memories`), its daemon's alone."""

    #: set to make the daemon cycle now: a watch event that changed its roster, a write's
    #: answer that showed someone else's change, a hub that grew
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    #: the generation the last cycle decided: a CR event of another one re-plans at once
    generation: int | None = None
    #: when the daemon's loop last came round (the loop's clock), and its interval: a loop
    #: that has not come round for ten intervals is stuck (`registering.Operator.stuck`)
    heartbeat: float | None = None
    interval: float = float(specs.DEFAULT_INTERVAL_SECONDS)
    #: Event Hubs' and the checkpoint store's pacing, as the last reads left them
    hub: Pacing = dataclasses.field(default_factory=Pacing)
    store: StorePacing = dataclasses.field(default_factory=StorePacing)
    #: the last decision while it stands; None: decide in the next cycle
    settled: deadlines.Settled | None = None
    #: what the last decision handed on to the next (`decisions.Carry`: the fleet and the
    #: record it read, the writes a second decision over the same bodies takes again)
    carry: decisions.Carry = decisions.COLD
    #: the partitions assigned but not listed by Event Hubs, as last logged: a warning says
    #: so once for each new set, not at every cycle
    unlisted: tuple[str, ...] = ()
    #: when this operator first saw each pod's state, on its own clock (`podstates.sightings`)
    sightings: Mapping[str, podstates.Sighting] = dataclasses.field(default_factory=dict)
    #: why the last ConfigMap write failed (`writing.refused`); None once one goes out
    refused: observations.Fault | None = None
