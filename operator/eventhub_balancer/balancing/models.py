"""The planner's vocabulary: what goes into a planning cycle and what comes out.

Everything here is immutable data, so that a plan can be compared, cached and replayed, and
so that the operator can hand the same `Scenario` to the planner twice and get the same `Plan`.
Times are plain seconds (any epoch, the planner only subtracts them); the planner never reads
a clock.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Literal, NewType, get_args

from eventhub_balancer import handoffs

#: A partition id as Event Hubs names it ("0", "1", ...): a string, ordered numerically.
PartitionId = NewType("PartitionId", str)

#: A consumer pod's name.
MemberName = NewType("MemberName", str)

#: ready: a live member; notready: keeps what it owns for the grace period, gets nothing new;
#: terminating: drained at once by ordered hand-offs.
MemberState = Literal["ready", "notready", "terminating"]
MEMBER_STATES: tuple[MemberState, ...] = get_args(MemberState)

#: owned: the owner processes the partition; revoking: the owner must stop, checkpoint and
#: acknowledge the release before anyone else gets it (the hand-off's rules: `handoffs`).
OwnershipState = handoffs.WrittenState
OWNERSHIP_STATES: tuple[OwnershipState, ...] = handoffs.WRITTEN_STATES

#: count: spread the number of partitions; lag: spread the backlog (events behind + 1 each).
Weighting = Literal["count", "lag"]
WEIGHTINGS: tuple[Weighting, ...] = get_args(Weighting)

#: The default of ``lagTolerance``: under ``weighting: lag`` a pod's load may stray this far
#: (as a fraction of the mean load) before a partition moves. Lag is noisy from cycle to cycle;
#: a quarter of the mean absorbs ordinary noise and still corrects a pod that falls behind.
DEFAULT_LAG_TOLERANCE = 0.25

#: The largest ``lagTolerance`` accepted: at 10 (1000 %) lag weighting barely ever moves.
MAX_LAG_TOLERANCE = 10.0

#: assign: an unowned partition gets an owner; revoke: a partition is marked revoking on its
#: owner (or, with no target, dropped because it vanished); takeover: the owner changes at once
#: because the hand-off completed or the old owner is gone.
MoveKind = Literal["assign", "revoke", "takeover"]

#: Why a move happened, for logs and Kubernetes Events (not part of the JSON output format).
MoveReason = Literal[
    "new",  # the partition had no owner (fresh start, a new partition, an unowned entry)
    "gone",  # the owner is absent from the members, or NotReady beyond the grace period
    "released",  # the owner acknowledged the release of the revoked epoch
    "timeout",  # the owner did not acknowledge within handoffTimeoutSeconds
    "drain",  # the owner is terminating
    "rebalance",  # the owner holds more than its target
    "vanished",  # the partition is no longer in the partition list
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Member:
    """A consumer pod as the planner sees it."""

    name: MemberName
    state: MemberState
    #: when it entered `state`: a NotReady member's grace and a terminating member's wait for
    #: its own release (`Options.release_wait_seconds`) count from it
    since: float = 0.0
    weight: float = 1.0  # its share relative to the others; must be positive
    #: NotReady only: the pod is on a node and its containers are starting or running, so it
    #: may turn Ready at any moment (a Pending pod no node took is not). While it holds
    #: nothing and is within ``podGraceSeconds`` of ``since`` (or of the moment the first
    #: live member turned Ready since then: `censuses.starting_until`), its share counts in
    #: the targets and stays with the current owners, so that a burst of joins is planned
    #: once (`censuses.Census.starting`).
    starting: bool = False
    #: A rolling update replaces it: its Deployment has pods of a newer revision. What must
    #: move goes to the members that stay first, and (for ``podGraceSeconds``) a new
    #: revision's pod that just turned Ready waits for the partitions of the pod it replaces
    #: rather than taking a share of every pod, so that each partition moves once.
    outgoing: bool = False
    #: Ready only: it turned Ready after one of its containers ended and restarted (a crash,
    #: an OOM kill). Until it has been Ready for ``podGraceSeconds`` it is on probation: it
    #: keeps what it holds and gets nothing new, so that a pod in a crash loop, Ready for a
    #: few seconds after each restart, does not pull partitions off the others every time.
    restarted: bool = False
    #: Terminating only: when it stopped being Ready, if that was before its deletion began
    #: (None otherwise). A pod on a lost node is marked NotReady by the node lifecycle
    #: controller, then evicted, and never gets the SIGTERM on which it would release: it is
    #: gone ``podGraceSeconds`` after this, as it would be had it not been deleted.
    notready_since: float | None = None
    #: Ready only: when the operator first saw it Ready, on its own clock (0: not known). The
    #: Ready condition's time is to the second, so pods of a burst often share ``since``; this
    #: orders them as the operator saw them turn Ready, and a revoke made for the first goes
    #: to it, not to one Ready in the same second that sorts before it by name.
    seen: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ownership:
    """Who owns a partition, under which epoch, and whether it is being handed off.

    ``owner=None`` (always ``owned``) keeps the epoch of a partition nobody can own right now
    (no live members), so that epochs never go back when someone takes it later.
    """

    owner: MemberName | None
    epoch: int
    state: OwnershipState = "owned"
    since: float = 0.0  # when it entered `state`; the hand-off timeout counts from here


#: Seconds after a take-over the operator waits before it rebalances by lag: a moved partition
#: is checkpointed by nobody until its new owner's first batch, so its lag grows by the hand-off
#: itself. Weighed at once, each move made the lag the next one chased: one pod joining moved
#: partitions back and forth for as long as the pods ran (docs/planner.md).
LAG_SETTLE_SECONDS = 10.0
#: Events behind each partition the operator does not weigh, at least: a pod that keeps up has
#: its last batches in flight (two of the consumer's default 500), more or less at each read.
#: Weighed, that noise moved a partition every few seconds while nothing was behind.
LAG_FLOOR = 1000
#: ... and the events each partition receives in this many seconds, when more: what is in
#: flight grows with the rate (at 1000 events a second a batch's handling, its checkpoint's
#: write and the operator's read of the end can pass 1000; ``--checkpoint-interval 5``
#: leaves 5 s more), and a backlog of fewer seconds is worth no hand-off (docs/planner.md).
LAG_FLOOR_SECONDS = 10.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """The tunables of spec.balancing, with the CRD's defaults."""

    pod_grace_seconds: float = 20.0
    handoff_timeout_seconds: float = 30.0
    #: how long a terminating member's partitions wait for its own release (the consumer
    #: runtime releases everything on its SIGTERM, within milliseconds) before they are
    #: revoked: the revocation would cost a cycle of writes to say what the pod is doing anyway.
    #: Counted from the deletion as the API server writes it, to the second: 1-2 s in fact.
    release_wait_seconds: float = 2.0
    max_moves_per_cycle: int = 0  # 0 = no cap
    weighting: Weighting = "count"
    #: weighting "lag" only: how much imbalance, as a fraction of the mean load, is tolerated
    #: before a rebalancing move starts (see planning's module docstring)
    lag_tolerance: float = DEFAULT_LAG_TOLERANCE
    #: weighting "lag" only: seconds after a partition's take-over during which no rebalancing
    #: starts (the operator's `LAG_SETTLE_SECONDS`; 0 plans on the lags as given)
    lag_settle_seconds: float = 0.0
    #: weighting "lag" only: events behind each partition that are not weighed (the
    #: operator's `LAG_FLOOR`; 0 weighs the lags as given)
    lag_floor: int = 0
    #: weighting "lag" only: nor the events a partition receives in this many seconds
    #: (`Scenario.rates`), when more; no rebalancing starts while a lag is given without its
    #: rate (the operator's `LAG_FLOOR_SECONDS`; 0: no such floor)
    lag_floor_seconds: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything one planning cycle depends on."""

    partitions: tuple[PartitionId, ...]
    members: tuple[Member, ...]
    assignment: Mapping[PartitionId, Ownership] = dataclasses.field(default_factory=dict)
    #: partition -> the epoch whose release its owner acknowledged
    released: Mapping[PartitionId, int] = dataclasses.field(default_factory=dict)
    #: partition -> events behind (only used with weighting "lag"; missing means 0)
    lag: Mapping[PartitionId, int] = dataclasses.field(default_factory=dict)
    #: partition -> events it receives a second (only used with weighting "lag" and
    #: ``options.lag_floor_seconds``; missing: unknown, see there)
    rates: Mapping[PartitionId, float] = dataclasses.field(default_factory=dict)
    #: ownerless entries of ``assignment`` that no pod is known to process (the operator:
    #: no pod's ConfigMap names them; the consumer was scaled to zero, or is new over an
    #: earlier one's checkpoints). Like partitions no member ever owned, they wait for the
    #: starting members' shares: nobody processed them a moment ago, and the first pod Ready
    #: would otherwise take up all of them only to hand most on. Not idle: a consumer created
    #: again whose pods still process by their ConfigMaps.
    idle: frozenset[PartitionId] = frozenset()
    now: float = 0.0
    options: Options = dataclasses.field(default_factory=Options)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Move:
    """One change the operator has to carry out (and may report as an Event)."""

    partition: PartitionId
    source: MemberName | None  # "from" in JSON
    target: MemberName | None  # "to" in JSON; for a revoke, the intended next owner
    epoch: int  # the epoch after the move (unchanged by a revoke)
    kind: MoveKind
    reason: MoveReason


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """The planner's answer: the assignment to write and the moves that lead to it."""

    assignment: Mapping[PartitionId, Ownership]
    moves: tuple[Move, ...]
    #: every partition has an owner, nothing is revoking, and (count weighting) every live
    #: member owns exactly its target
    balanced: bool
    #: live member -> its target: a partition count, or with weighting "lag" load units
    targets: Mapping[MemberName, int]
    #: the starting members whose shares the targets left with the current owners
    starting: tuple[MemberName, ...] = ()
    #: when the terminating owners' waits for their own releases end: the partitions they
    #: still hold are revoked then (`Options.release_wait_seconds`)
    release_deadlines: tuple[float, ...] = ()
    #: when the pods of a rolling update's new revision stop waiting for the partitions of the
    #: pods they replace: their shares are revoked from the others from then on
    incoming_deadlines: tuple[float, ...] = ()
    #: when the restarted members on probation (`Member.restarted`) start getting partitions
    probation_deadlines: tuple[float, ...] = ()
    #: when the starting members' shares stop waiting for them (`censuses.starting_until`)
    starting_deadlines: tuple[float, ...] = ()


_RUNS = re.compile(r"(\d+)")

#: The sort key of a name: digit runs compare as numbers ("pod-2" < "pod-10", "2" < "10").
#: Each run of the name is three items, (0, its number, the run) for digits and (1, 0, the
#: run) otherwise, laid end to end in one tuple: compared item by item, that orders as the
#: tuple of per-run triples would, at two thirds of its memory (`name_key`'s memo holds
#: thousands of them).
NameKey = tuple[int | str, ...]

#: Names are sorted in every cycle (partitions, pods, ConfigMaps) and their keys depend on the
#: name alone, so `name_key` is a bounded memo of a pure function, not state between cycles:
#: it never changes what a cycle decides, only what the sort costs. Kept for a fleet of
#: thousands of partitions and pods with some churn (least recently used names drop out).
#: Full, it holds about 10 MB (the key of a pod name such as ``orders-consumer-7d9f8c6b5-x2k4q``
#: costs about 0.6 KiB; as a tuple of triples it cost twice that): an operator under pod churn
#: grows by that much at most, then stays flat (docs/operations.md).
NAME_KEYS_KEPT = 16_384


@functools.lru_cache(maxsize=NAME_KEYS_KEPT)
def name_key(name: str) -> NameKey:
    """Order partition ids and member names naturally; distinct names never compare equal."""
    if name.isdecimal():  # the common case for partition ids, kept fast
        return (0, int(name), name)
    key: list[int | str] = []
    for run in _RUNS.split(name):
        if run:
            key += (0, int(run), run) if run.isdecimal() else (1, 0, run)
    return tuple(key)


def ordered_partitions(partitions: Iterable[PartitionId]) -> list[PartitionId]:
    """Partitions in the planner's order: numerically when they are numbers."""
    return sorted(partitions, key=name_key)


def epochs_given(
    assignment: Mapping[PartitionId, Ownership], pods: Iterable[str] | None = None
) -> dict[str, dict[str, int]]:
    """Each owner's partitions with the epochs ``assignment`` gives them: what a pod may
    report on (``pods``: only these owners; None: every one)."""
    asked = None if pods is None else frozenset(pods)
    given: dict[str, dict[str, int]] = {}
    for pid, o in assignment.items():
        if o.owner is not None and (asked is None or o.owner in asked):
            given.setdefault(o.owner, {})[pid] = o.epoch
    return given
