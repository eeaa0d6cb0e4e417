"""Time in a decision, pure: the deadlines it names, whether the last one still stands, and
the pace of retries and probes. Nothing here reads a clock: the time comes in as ``wall``
(seconds), so all of it is tested without one.

Deadlines. Nothing in a decision depends on the time but a hand-off's timeout, a NotReady
pod's grace, a terminating owner's wait for its own release (the plan's
``release_deadlines``) and the hold of a partition reported lost right after it was given out
(``held``). `next_in` says when the cycle should come back for the nearest one;
`settled_until` says until when a decision that writes nothing stands over the same
observation. Both look at the hand-offs in the plan and at the NotReady pods alone, which the
fleet keeps as a sum (`fleets.Fleet.notready`).

Standing. Reading the pods and deciding cost what the fleet costs, and most wake-ups change
nothing (the interval's safety net, the echo of the operator's own writes, another consumer's
event). A decision that wrote and read nothing more is kept (`Settled`) with the inputs it was
taken from (`inputs`): the watch's stamp of what concerns the consumer, the CR's uid and
resourceVersion, the partition list, the peers its decision reads (`Peers`) and the store's
state. A cycle that finds the
same inputs before the decision's next deadline or the store's next probe reads nothing more
and decides nothing: the decision stands (`stands`; the cycle that skips is
`handlers.cycles`). A cycle that starts hand-offs lists the checkpoint blobs once its writes
are done, for the cycle the releases wake (`lists_ahead`): that one gives the partitions out
and needs the blobs' epochs, and finds them listed if the listing is at most `AHEAD_SECONDS`
old.

Retries. The operator's memory between cycles (`handlers.memories.Memory`) keeps one
`Backoff` for Event Hubs and one for the checkpoint store; the readers in `handlers.observing`
consult and advance them. A fault that may pass (an outage, a throttle) is asked again sooner,
then later and later (`after_failure`). A configuration error (a connection string that can
never work, a host the install does not allow) fails the same way until someone changes the
CR or its Secret, so it waits the longest delay at once (`after_misconfiguration`). Either
wait lasts no longer than until the CR points elsewhere: the new hub or store is asked at once.
The checkpoint store is also probed now and then for its condition alone (`probe_due`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Iterable, Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import podstates, specs
from eventhub_balancer.reconciling import conflicts, decisions, observations

#: The soonest a cycle comes back for a deadline (a hand-off timeout, a grace period): a
#: deadline just passed is acted on without a busy loop.
MIN_NEXT_IN = 0.05
#: A deadline this far in the past is stale (the cycle that acted on it already ran).
STALE_DEADLINE = 1.0


def next_in(
    *,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
    notready: Iterable[str] | None = None,
    held: Iterable[float] = (),
) -> float | None:
    """The next moment something changes on its own: a hand-off times out, a NotReady pod's
    grace ends, a starting pod's share stops waiting, a held report of a lost partition is
    due. ``notready``: the NotReady pods' names (`fleets.Fleet.notready`); None: any pod may
    be."""
    deadlines = [
        o.since + spec.balancing.handoff_timeout_seconds
        for o in plan.assignment.values()
        if o.state == "revoking"
    ]
    owners = {o.owner for o in plan.assignment.values() if o.owner}
    # A held owner's partitions are taken over when its grace ends, and any NotReady pod stops
    # counting as a member then (`statuses.member_count`). When a starting pod's share stops
    # waiting is the plan's to say (`starting_deadlines`): later, when its burst is Ready late.
    grace = spec.balancing.pod_grace_seconds
    for p in _notready(pods, notready):
        end = podstates.to_seconds(p.since) + grace
        if end > wall or p.name in owners:
            deadlines.append(end)
    deadlines += held
    deadlines += (*plan.release_deadlines, *plan.incoming_deadlines, *plan.probation_deadlines)
    deadlines += plan.starting_deadlines
    future = [d - wall for d in deadlines if d - wall > -STALE_DEADLINE]
    return max(MIN_NEXT_IN, min(future)) if future else None


def settled_until(
    *,
    quiet: bool,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
    notready: Iterable[str] | None = None,
    held: Iterable[float] = (),
) -> float | None:
    """Until when a decision stands over the same observation (`decisions.Decision`'s
    ``settled_until``); ``quiet``: it writes nothing and needs no further read."""
    if not quiet or spec.balancing.to_options().weighting == "lag":
        return None
    deadlines = _deadlines(plan, _notready(pods, notready), spec, wall)
    deadlines += [d for d in held if d > wall]
    return min(deadlines, default=math.inf)


def _notready(
    pods: Mapping[str, podstates.PodState], notready: Iterable[str] | None
) -> list[podstates.PodState]:
    if notready is None:
        return [p for p in pods.values() if p.state == "notready"]
    return [pods[name] for name in notready]


def _deadlines(
    plan: models.Plan,
    notready: Iterable[podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
) -> list[float]:
    """Each moment at which the same observation decides otherwise: the timeout of each
    hand-off and the grace of each NotReady pod (owner or not: the status counts members) not
    yet over at ``wall``, tested as the planner tests them, and the plan's own moments (a
    starting pod's share stops waiting later when the first of its burst is Ready late, a
    restarted pod's probation ends)."""
    timeout = spec.balancing.handoff_timeout_seconds
    deadlines = [
        o.since + timeout
        for o in plan.assignment.values()
        if o.state == "revoking" and wall - o.since < timeout
    ]
    grace = spec.balancing.pod_grace_seconds
    for p in notready:
        since = podstates.to_seconds(p.since)
        if wall - since < grace:
            deadlines.append(since + grace)
    # Each of the plan's own moments, as `next_in` has them: a probation left out stood for good.
    own = (*plan.release_deadlines, *plan.incoming_deadlines, *plan.probation_deadlines)
    deadlines += [d for d in own if d > wall]
    deadlines += plan.starting_deadlines  # each is ahead of the plan's now
    return deadlines


#: The longest backoff between attempts to reach Event Hubs or the checkpoint store: five
#: minutes keeps a long outage cheap and still notices the recovery within minutes.
MAX_BACKOFF_SECONDS = 300.0
#: The longest backoff while an Event Hub, a consumer group, a checkpoint container or a Secret
#: (or its key) does not exist: someone creates it and then waits for the consumer to take it
#: up, and asking again costs one listing and one link (`adapters.consumergroups`), one
#: listing of the container, or one read of the API server, so it is asked at most every 30 s.
MISSING_BACKOFF_SECONDS = 30.0
#: How often the checkpoint store is probed when nothing needs its epochs, only so that the
#: CheckpointStoreReachable condition stays true to the facts (a minute is cheap: one listing).
CHECKPOINT_PROBE_SECONDS = 60.0
#: How old a listing of the blobs made ahead (after a cycle that started hand-offs) may be and
#: still stand for the listing a cycle that gives partitions out makes: a release comes within
#: this in practice.
AHEAD_SECONDS = 10.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Backoff:
    """The last delay and when the next attempt is due; the zero value: not backing off."""

    delay: float = 0.0
    retry_at: float = 0.0
    #: the spec's settings the failure was found under (no secret: the references to them):
    #: the backoff is theirs; None: any settings
    refused: Hashable | None = None

    def waiting(self, wall: float, *, settings: Hashable | None = None) -> bool:
        """Whether an attempt at ``wall`` would come too soon after the last failure: never
        once ``settings`` differ from those the failure was found under (a spec edited to
        point elsewhere, a hub that may answer, is asked at once)."""
        if self.refused is not None and settings is not None and settings != self.refused:
            return False
        return wall < self.retry_at


def after_failure(
    backoff: Backoff,
    *,
    wall: float,
    base: float,
    longest: float = MAX_BACKOFF_SECONDS,
    settings: Hashable | None = None,
) -> Backoff:
    """Double the delay (at least ``base``, the cycle interval; at most ``longest``) while
    the ``settings`` it fails under stay; other settings start again from ``base``."""
    before = backoff.delay if settings is None or settings == backoff.refused else 0.0
    delay = min(longest, max(base, before * 2))
    return Backoff(delay=delay, retry_at=wall + delay, refused=settings)


def after_misconfiguration(*, wall: float, settings: Hashable) -> Backoff:
    """Wait the longest delay at once: asking again changes nothing until the CR's
    ``settings`` change (`Backoff.waiting`) or its Secret does (read afresh at the retry)."""
    return Backoff(delay=MAX_BACKOFF_SECONDS, retry_at=wall + MAX_BACKOFF_SECONDS, refused=settings)


def probe_due(checked_at: float | None, *, wall: float) -> bool:
    """Whether the checkpoint store should be read for its condition alone."""
    return checked_at is None or wall - checked_at >= CHECKPOINT_PROBE_SECONDS


def next_probe(checked_at: float | None, backoff: Backoff) -> float:
    """When the store is next read for its condition alone (`probe_due`, past the backoff)."""
    due = -math.inf if checked_at is None else checked_at + CHECKPOINT_PROBE_SECONDS
    return max(backoff.retry_at, due)


def ahead_stands(at: float | None, *, wall: float) -> bool:
    """Whether a listing of the blobs made ahead at ``at`` stands for a read at ``wall``."""
    return at is not None and 0 <= wall - at <= AHEAD_SECONDS


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settled:
    """A decision that wrote nothing, the inputs it was taken from, and until when (wall
    seconds) it stands over them."""

    inputs: Hashable
    until: float
    decided_at: float
    decision: decisions.Decision


@dataclasses.dataclass(frozen=True, eq=False)
class Peers:
    """The peers of a settled decision's inputs: equal when the peers its consumer's decision
    reads are (`conflicts.concerning`), so that another tenant's consumers elsewhere, created,
    edited or deleted, leave it standing. The very same peers (no CR event since) are equal at
    once: a steady cycle passes over no summary."""

    peers: tuple[conflicts.Peer, ...]
    namespace: str
    location: tuple[str, ...] | None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Peers):
            return NotImplemented
        if (self.namespace, self.location) != (other.namespace, other.location):
            return False
        return self.peers is other.peers or self.concerning() == other.concerning()

    def __hash__(self) -> int:
        return hash((self.namespace, self.location))

    def concerning(self) -> tuple[conflicts.Peer, ...]:
        return conflicts.concerning(self.peers, namespace=self.namespace, location=self.location)


def inputs(stamp: Hashable | None, observation: observations.Observation) -> Hashable | None:
    """What a settled decision is taken from, short of the pods and ConfigMaps (``stamp``, the
    cache's, stands for them); None when a change could go unnoticed (no watch, no
    resourceVersion, no valid spec)."""
    meta = observation.body.get("metadata") or {}
    version = meta.get("resourceVersion")
    if stamp is None or not version or observation.spec is None:
        return None
    location = conflicts.location(observation.spec, namespace=observation.namespace)
    return (
        stamp,
        meta.get("uid"),
        version,
        observation.hub,
        Peers(peers=observation.peers, namespace=observation.namespace, location=location),
        observation.annotate_pods,
        observation.store.fault,
        observation.store.checked_at,
    )


def settle(
    decision: decisions.Decision,
    taken_from: Hashable | None,
    *,
    wall: float,
    store_backoff: Backoff,
    store_checked_at: float | None,
) -> Settled | None:
    """``decision`` kept with what it was taken from, when it stands until a deadline (it
    writes nothing and reads nothing more); None otherwise."""
    if taken_from is None or decision.settled_until is None:
        return None
    until = min(decision.settled_until, next_probe(store_checked_at, store_backoff))
    return Settled(inputs=taken_from, until=until, decided_at=wall, decision=decision)


def stands(kept: Settled | None, taken_from: Hashable | None, *, wall: float) -> bool:
    """Whether ``kept`` stands for a cycle at ``wall`` whose inputs are ``taken_from``."""
    return (
        kept is not None
        and taken_from is not None
        and kept.inputs == taken_from
        and (wall < kept.until)
    )


def standing(kept: Settled, *, wall: float) -> decisions.Decision:
    """The settled decision again at ``wall``: nothing to write, no figures to record again,
    its deadline (if any) as far away as it is now."""
    decision = kept.decision
    due = decision.next_in
    if due is not None:
        due = max(MIN_NEXT_IN, kept.decided_at + due - wall)
    return dataclasses.replace(decision, figures=None, next_in=due)


def lists_ahead(
    decision: decisions.Decision, observation: observations.Observation, *, wall: float
) -> bool:
    """Whether the blobs are to be listed after this decision's writes: it revokes (the
    releases wake the cycle that gives out), or a partition waits for a release (a
    terminating pod's, or hand-offs started before) and no listing made ahead stands."""
    if observation.spec is None:
        return False
    if any(m.kind == "revoke" for m in decision.moves):
        return True
    ahead = observation.store.ahead_at
    return decision.awaits_release and not ahead_stands(ahead, wall=wall)
