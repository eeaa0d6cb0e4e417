"""Where every partition stands at the start of a planning cycle (the planner's rules 1 and 2).

Every member gets a standing from its state and the clock, and every partition a fate from
the hand-off table (`handoffs.FATES`): kept, held, in flight, to be drained, or loose (to be
placed now). The strategies in `planning` (by count) and `lagging` (by lag) decide from here.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

from eventhub_balancer import handoffs
from eventhub_balancer.balancing import models

#: live: gets partitions; held: keeps, gets nothing; draining: loses all by hand-off;
#: gone: loses all at once.
Standing = handoffs.Standing


def standing(member: models.Member | None, *, now: float, options: models.Options) -> Standing:
    """What a member's state means for its partitions at `now` (None: absent, so gone)."""
    if member is None:
        return "gone"
    if member.state == "ready":
        on_probation = member.restarted and now - member.since < options.pod_grace_seconds
        return "held" if on_probation else "live"
    if member.state == "terminating":
        unready = member.notready_since
        if unready is not None and now - unready >= options.pod_grace_seconds:
            return "gone"  # NotReady before its deletion, and for longer than the grace
        return "draining"
    if now - member.since < options.pod_grace_seconds:
        return "held"
    return "gone"


def starting_until(
    member: models.Member, *, readied: Sequence[float], options: models.Options
) -> float:
    """Until when a starting member's share waits for it: ``podGraceSeconds`` after it came
    up (``since``), or after the first live member that turned Ready since then (``readied``:
    when each live member did, in order), when that is later. The pods of a burst come up
    together and turn Ready a moment apart, however long each takes to start (a Spark
    session's JVM: 40 s on the local stack), so the others still count when the first is
    Ready; a pod that never turns Ready stops counting one grace after that at the latest."""
    at = bisect.bisect_left(readied, member.since)
    start = readied[at] if at < len(readied) else member.since
    return start + options.pod_grace_seconds


class Loose(NamedTuple):
    """A partition to be placed in this cycle (a tuple: there are up to P of them)."""

    partition: models.PartitionId
    entry: models.Ownership | None
    reason: models.MoveReason  # new, gone, released or timeout


class Revoke(NamedTuple):
    """A partition to be marked revoking on its owner in this cycle."""

    partition: models.PartitionId
    entry: models.Ownership
    reason: models.MoveReason  # drain or rebalance


@dataclasses.dataclass(kw_only=True)
class Census:
    """Where every partition stands at the start of the cycle."""

    order: list[models.PartitionId]  # the partitions, in order
    rank: dict[models.PartitionId, int]  # partition -> its place in `order`
    live: list[models.Member]  # by name
    kept: dict[models.MemberName, list[models.PartitionId]]  # live owner -> owned, in order
    loose: list[Loose] = dataclasses.field(default_factory=list)
    in_flight: list[models.PartitionId] = dataclasses.field(default_factory=list)
    drains: list[Revoke] = dataclasses.field(default_factory=list)
    held: list[models.PartitionId] = dataclasses.field(default_factory=list)
    vanished: list[models.Move] = dataclasses.field(default_factory=list)
    #: NotReady members that are starting (`models.Member.starting`), hold nothing and are
    #: within their grace, and restarted members on probation holding nothing, by name:
    #: weighting by count gives them a share they do not get yet, so that the partitions they
    #: will take stay where they are until they are Ready (or their probation is over)
    starting: list[models.Member] = dataclasses.field(default_factory=list)
    #: the starting members that are NotReady, by name: when their shares stop waiting for
    #: them (`starting_until`)
    starting_until: dict[models.MemberName, float] = dataclasses.field(default_factory=dict)
    #: when the terminating owners whose own releases are waited for stop being waited for
    release_deadlines: set[float] = dataclasses.field(default_factory=set)
    #: live members of a rolling update's new revision, Ready less than ``podGraceSeconds``
    #: ago while members it replaces are still there (`models.Member.outgoing`), by name:
    #: nothing is revoked for their shares, which the replaced pods' partitions fill
    incoming: dict[models.MemberName, float] = dataclasses.field(default_factory=dict)
    #: when the restarted members on probation (held while Ready) start getting partitions
    probation: set[float] = dataclasses.field(default_factory=set)
    #: `models.Scenario.idle`: ownerless partitions no pod processes
    idle: frozenset[models.PartitionId] = frozenset()

    @property
    def unattended(self) -> frozenset[models.PartitionId]:
        """The loose partitions nobody processed a moment ago, which may wait for the starting
        members: no member ever owned them (no entry, or an ownerless one at epoch 0: a fresh
        start's, a grown hub's), or they are ownerless and idle (a consumer scaled up from
        zero, or new over an earlier one's checkpoints)."""
        return frozenset(
            x.partition
            for x in self.loose
            if x.entry is None
            or x.entry.epoch == 0
            or (x.entry.owner is None and x.partition in self.idle)
        )


@dataclasses.dataclass(kw_only=True)
class Decision:
    """What the weighting strategy decided: targets, revokes, and where partitions go."""

    targets: dict[models.MemberName, int]
    revokes: list[Revoke]
    #: loose and revoked partitions -> their (intended) next owner; None: no live member
    destinations: dict[models.PartitionId, models.MemberName | None]
    #: the starting members counted in the targets (weighting by count only)
    starting: tuple[models.MemberName, ...] = ()


def take_census(scenario: models.Scenario) -> Census:
    now, options = scenario.now, scenario.options
    members = {m.name: m for m in scenario.members}
    standings = {n: standing(m, now=now, options=options) for n, m in members.items()}
    live = sorted(
        (m for m in scenario.members if standings[m.name] == "live"),
        key=lambda m: models.name_key(m.name),
    )
    order = models.ordered_partitions(scenario.partitions)
    census = Census(
        order=order,
        rank={p: i for i, p in enumerate(order)},
        live=live,
        kept={m.name: [] for m in live},
        idle=scenario.idle,
    )
    present = set(scenario.partitions)
    owners = {entry.owner for entry in scenario.assignment.values()}
    readied = sorted(m.since for m in live)
    census.starting_until = {
        m.name: until
        for m in scenario.members
        if m.starting
        and m.state == "notready"
        and m.name not in owners
        and now < (until := starting_until(m, readied=readied, options=options))
    }
    census.starting = sorted(
        (
            m
            for m in scenario.members
            if m.name in census.starting_until
            # a restarted pod Ready on probation
            or (m.state == "ready" and standings[m.name] == "held" and m.name not in owners)
        ),
        key=lambda m: models.name_key(m.name),
    )
    # A terminating member NotReady since before its deletion is gone when its grace ends.
    census.release_deadlines.update(
        m.notready_since + options.pod_grace_seconds
        for m in scenario.members
        if m.notready_since is not None and standings[m.name] == "draining" and m.name in owners
    )
    census.probation = {
        m.since + options.pod_grace_seconds
        for m in scenario.members
        if m.state == "ready" and standings[m.name] == "held"
    }
    if any(m.outgoing for m in scenario.members if standings[m.name] in ("live", "held")):
        census.incoming = {
            m.name: m.since + options.pod_grace_seconds
            for m in live
            if not m.outgoing and now - m.since < options.pod_grace_seconds
        }

    for p, old in scenario.assignment.items():
        if (
            p not in present
            and old.owner is not None
            and standings.get(old.owner, "gone") != "gone"
        ):
            # Tell the owner to stop; nobody takes a partition that no longer exists.
            census.vanished.append(
                models.Move(
                    partition=p,
                    source=old.owner,
                    target=None,
                    epoch=old.epoch,
                    kind="revoke",
                    reason="vanished",
                )
            )

    for p in order:
        entry = scenario.assignment.get(p)
        owner = entry.owner if entry is not None else None
        if entry is None or owner is None:
            census.loose.append(Loose(partition=p, entry=entry, reason="new"))
            continue
        state = handoffs.partition_state(
            entry.state,
            epoch=entry.epoch,
            acknowledged=scenario.released.get(p),
            waited=now - entry.since,
            timeout=options.handoff_timeout_seconds,
        )
        fate, reason = handoffs.fate(state, standings.get(owner, "gone"))
        if fate == "free":
            assert reason is not None
            census.loose.append(Loose(partition=p, entry=entry, reason=reason))
        elif fate == "wait":
            # Leaving in any case (a hand-off is never cancelled), so it counts as available
            # even on a held owner.
            census.in_flight.append(p)
        elif fate == "keep":
            census.kept[owner].append(p)
        elif fate == "hold":
            census.held.append(p)
        elif now - members[owner].since < options.release_wait_seconds:
            # Terminating a moment ago: it releases everything on its SIGTERM. Leaving in any
            # case, so in flight like a revoked partition, and revoked if it has not let go
            # by the end of the wait (a preStop hook delays the SIGTERM, say).
            census.in_flight.append(p)
            census.release_deadlines.add(members[owner].since + options.release_wait_seconds)
        else:
            census.drains.append(Revoke(partition=p, entry=entry, reason="drain"))
    return census


def budget(scenario: models.Scenario, census: Census) -> float:
    """How many rebalancing revokes may start: drains come first and are never held back."""
    cap = scenario.options.max_moves_per_cycle
    return math.inf if cap == 0 else max(0, cap - len(census.drains))
