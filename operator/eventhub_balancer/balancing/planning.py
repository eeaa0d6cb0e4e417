"""The planning rules: one cycle from a `Scenario` to a `Plan`, with no I/O and no clock.

The operator runs `plan` every cycle with what it observed (members, the assignment read back
from the ConfigMaps, acknowledgements, `now`) and writes what changed. The rules, in order:

1. Every member has a *standing*: ready members are live, except that one Ready after a
   container restart is held for ``podGraceSeconds`` (`models.Member.restarted`, a probation
   that keeps a crash loop from pulling partitions at each restart); NotReady members are
   held (they keep what they own, get nothing new) until ``podGraceSeconds`` passed, then gone;
   terminating members are draining; members absent from the list are gone.
2. Every partition is then one of: kept by its live owner; held by a held owner; revoking and
   still waiting for its owner's acknowledgement (in flight); owned by a draining member (in
   flight for ``release_wait_seconds`` after its deletion, waiting for the release the pod
   makes on its SIGTERM; revoked after that); or loose (no owner, owner gone, revoke
   acknowledged or timed out), to be placed now. Partitions no longer listed are dropped.
3. Targets are computed over the live members and (weighting by count) over the *starting*
   members, NotReady pods that are on a node, hold nothing and are within ``podGraceSeconds``
   of coming up, or of the first pod that turned Ready since (they may turn Ready at any
   moment: the pods of a burst turn Ready a moment apart, however slowly each starts), and
   the held members, which keep what they hold. By lag, the partitions of held members are
   left out and only the live members count.
4. Live members above their target revoke their surplus (capped by ``maxMovesPerCycle``,
   after the drains) as far as live members below their target lack it; loose partitions go
   at once to live members below their target (the longest Ready first; while a held member
   keeps more than its share, those holding the least first), with epoch + 1. A
   revoked partition changes owner in a later cycle, once it is loose. A starting member's
   share stays with the current owners until it is Ready, so a burst of joins is planned
   once: each partition moves straight to its final owner, never through a pod that joined a
   moment earlier.
   Loose partitions that nobody processed a moment ago wait for the starting members' shares
   as well, so that the first pod of a fresh start does not take up every partition only to
   hand most of them on: those no member ever owned (a fresh start, a grown hub), and the
   ownerless ones the scenario says are idle (`models.Scenario.idle`: a consumer scaled up
   from zero, or new over an earlier one's checkpoints). Every other loose partition (a gone
   or released owner's: behind, and processed a moment ago) never waits: what the live
   members have no room for goes to those holding the least.
5. During a rolling update, members a newer revision replaces are *outgoing*
   (`models.Member.outgoing`). What must move goes to the members that stay first, and a
   member of the new revision that turned Ready less than ``podGraceSeconds`` ago gets no
   revokes for its share: the Deployment deletes an old pod as soon as it is Ready, and that
   pod's partitions fill the share. So each partition moves once, from an old pod to a new
   one, never through an old pod that is replaced next or from one new pod to the next.

With ``weighting: lag`` the unit is load, and moves are damped: see `lagging`. Where every
partition stands at the start of the cycle (rules 1 and 2) is taken in `censuses`.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from eventhub_balancer import errors, handoffs
from eventhub_balancer.balancing import censuses, lagging, models, targets


def plan(scenario: models.Scenario) -> models.Plan:
    """Plan one cycle. Pure: the same scenario always gives the same plan."""
    _check(scenario)
    census = censuses.take_census(scenario)
    if scenario.options.weighting == "lag":
        decision = lagging.decide(scenario, census)
    else:
        decision = _decide_by_count(scenario, census)
    return _assemble(scenario, census, decision)


#: Partitions in the planner's order: numerically when they are numbers.
ordered_partitions = models.ordered_partitions
#: A member's standing at ``now``: live, held, draining or gone.
standing = censuses.standing
Standing = censuses.Standing


def _check(scenario: models.Scenario) -> None:
    # The parser reports these with positions; this guards callers that build a Scenario.
    if len(set(scenario.partitions)) != len(scenario.partitions):
        raise errors.InvalidInput("partitions", "duplicate partition ids")
    names = [m.name for m in scenario.members]
    if len(set(names)) != len(names):
        raise errors.InvalidInput("members", "duplicate member names")
    for m in scenario.members:
        if not (m.weight > 0 and math.isfinite(m.weight)):
            raise errors.InvalidInput(f"members[{m.name}].weight", "must be a positive number")
    tolerance = scenario.options.lag_tolerance
    if not 0 <= tolerance <= models.MAX_LAG_TOLERANCE:
        raise errors.InvalidInput(
            "options.lagTolerance", f"must be between 0 and 10, got {tolerance}"
        )


def _decide_by_count(scenario: models.Scenario, census: censuses.Census) -> censuses.Decision:
    # Starting members claim their share as well: what the live members give up now goes
    # straight to its final owner, and a starting member's share stays with its current owners
    # until it is Ready (nothing is revoked for it, nothing is given to it before). So do held
    # members, up to what they hold: a pod back from a restart in place finds the live members
    # at the targets they would have had with it, and gives its surplus only to those below.
    claims = [
        targets.Claim(name=m.name, weight=m.weight, current=len(census.kept[m.name]))
        for m in census.live
    ] + [
        targets.Claim(name=m.name, weight=m.weight, current=0, starting=True)
        for m in census.starting
    ]
    held = _held_claims(scenario, census)
    free = total = len(scenario.partitions) - len(census.held)
    if held:
        # A held member gets nothing new: what it holds below its share, the others carry.
        shares = targets.quotas(total=len(scenario.partitions), claims=claims + held)
        total = len(scenario.partitions) - sum(min(c.current, shares[c.name]) for c in held)
    quota = targets.quotas(total=total, claims=claims)
    # Each member's surplus: the last partitions in order, revoked from the end.
    surplus = {
        m.name: census.kept[m.name][quota[m.name] :]
        for m in census.live
        if len(census.kept[m.name]) > quota[m.name]
    }
    holding = {m.name: len(census.kept[m.name]) for m in census.live}
    # The surpluses fill what the live members lack beyond the loose, in-flight and drained
    # partitions; with nobody starting that is every surplus, else the starting members'
    # shares are what is left of them.
    # A rolling update's new pod that just turned Ready lacks nothing yet: the pod it replaces
    # is deleted in a moment, and its partitions fill that share (rule 5).
    lacking = sum(
        max(0, quota[name] - held) for name, held in holding.items() if name not in census.incoming
    )
    wanted = lacking - len(census.loose) - len(census.in_flight) - len(census.drains)
    picked = _pick_surplus(surplus, budget=min(censuses.budget(scenario, census), max(0, wanted)))
    entries = scenario.assignment
    revokes = census.drains + [
        censuses.Revoke(partition=p, entry=entries[p], reason="rebalance")
        for p in sorted(picked, key=census.rank.__getitem__)
    ]

    # Fill each member up to its target, the longest Ready first (then by name): loose
    # partitions for real, then the in-flight and revoked ones to name the intended next owner
    # of each revoke. Pods that turn Ready one after another get their shares in that order:
    # what the first one's revocations free goes to it, not to one that sorts before it.
    for source in picked.values():
        holding[source] -= 1
    openings = [
        (m.name, quota[m.name] - holding[m.name])
        for m in sorted(census.live, key=lambda m: (m.outgoing, m.since, m.seen))
        if quota[m.name] > holding[m.name]
    ]
    # A hand-off that ended (released, or timed out) and one still in flight keep the order
    # they were revoked in, so each goes where its revoke said: released first, the second
    # of two pods joining together got the first one's partitions and the other way round.
    ended = {x.partition for x in census.loose if x.entry and x.entry.state == "revoking"}
    queue = [x.partition for x in census.loose if x.partition not in ended]
    queue += sorted([*ended, *census.in_flight], key=lambda p: (entries[p].since, census.rank[p]))
    queue += [r.partition for r in revokes]
    destinations: dict[models.PartitionId, models.MemberName | None] = {}
    position = 0
    if total > free and len(queue) < sum(room for _, room in openings):
        # A held pod keeps more than its share: the live pods lack it evenly.
        openings = _evenly(openings, holding, len(queue))
    for name, room in openings:
        for p in queue[position : position + room]:
            destinations[p] = name
            holding[name] += 1
        position += room
        if position >= len(queue):
            break
    waiting = sum(quota[m.name] for m in census.starting)
    outgoing = frozenset(m.name for m in census.live if m.outgoing)
    _overflow(
        queue[position:],
        holding,
        destinations,
        waiting=waiting,
        new=census.unattended,
        outgoing=outgoing,
    )
    return censuses.Decision(
        targets={m.name: quota[m.name] for m in census.live},
        revokes=revokes,
        destinations=destinations,
        starting=tuple(m.name for m in census.starting),
    )


def _evenly(
    openings: list[tuple[models.MemberName, int]], holding: dict[models.MemberName, int], count: int
) -> list[tuple[models.MemberName, int]]:
    """Share `count` partitions over the openings, the members holding the least first (then in
    the openings' order): none is given a second partition while another has room and none.
    Only while a held pod keeps more than its share, so that what it hands on once back goes
    to the live pods holding the least; otherwise the openings fill in order (rule 4)."""
    heap = [(holding[name], rank, name, room) for rank, (name, room) in enumerate(openings)]
    heapq.heapify(heap)
    given = dict.fromkeys((name for name, _ in openings), 0)
    for _ in range(count):
        held, rank, name, room = heapq.heappop(heap)
        given[name] += 1
        if room > 1:
            heapq.heappush(heap, (held + 1, rank, name, room - 1))
    return [(name, given[name]) for name, _ in openings if given[name]]


def _held_claims(scenario: models.Scenario, census: censuses.Census) -> list[targets.Claim]:
    """The held members' stakes: each NotReady member within its grace, with what it keeps.

    Left out of the targets, a held pod's partitions would make the live members balance
    among themselves: a pod joining meanwhile would take shares of the live members only,
    and the held pod, back, would hand its surplus on to them: moves the change did not need.
    """
    if not census.held:
        return []
    holding: dict[models.MemberName, int] = {}
    for p in census.held:
        owner = scenario.assignment[p].owner
        assert owner is not None
        holding[owner] = holding.get(owner, 0) + 1
    return [
        targets.Claim(name=m.name, weight=m.weight, current=holding[m.name])
        for m in scenario.members
        if m.name in holding
    ]


def _overflow(
    rest: list[models.PartitionId],
    holding: dict[models.MemberName, int],
    destinations: dict[models.PartitionId, models.MemberName | None],
    *,
    waiting: int,
    new: frozenset[models.PartitionId],
    outgoing: frozenset[models.MemberName] = frozenset(),
) -> None:
    """Place what no live member has room for: the starting members' shares of what must move
    now (loose partitions, and those leaving a terminating or revoking owner).

    Partitions nobody processed a moment ago (``new``: `censuses.Census.unattended`) wait for
    the starting members, up to their shares (``waiting``): a fresh start's first Ready pod
    would otherwise take up all of them and hand most on. The wait ends when the starting
    pods are Ready or their grace is over. Everything else never waits for a pod that is not
    Ready yet (it may never be): it goes to the live members that hold the least, and moves
    once more when that pod is Ready. With no live member, nobody. Between members holding
    as many, one a rolling update replaces (``outgoing``) comes last: it would hand the
    partition on again."""
    heap = [
        (count, name in outgoing, models.name_key(name), name) for name, count in holding.items()
    ]
    heapq.heapify(heap)
    for p in rest:
        if waiting > 0 and p in new:
            destinations[p] = None
            waiting -= 1
            continue
        if not heap:
            destinations[p] = None
            continue
        count, leaving, key, name = heapq.heappop(heap)
        destinations[p] = name
        heapq.heappush(heap, (count + 1, leaving, key, name))


def _pick_surplus(
    surplus: dict[models.MemberName, list[models.PartitionId]], *, budget: float
) -> dict[models.PartitionId, models.MemberName]:
    """The rebalancing revokes to start: all, or under a cap the largest surpluses first."""
    total = sum(len(ps) for ps in surplus.values())
    if total <= budget:
        return {p: name for name, ps in surplus.items() for p in ps}
    heap = [(-len(ps), models.name_key(name), name) for name, ps in surplus.items()]
    heapq.heapify(heap)
    left = {name: list(ps) for name, ps in surplus.items()}
    picked: dict[models.PartitionId, models.MemberName] = {}
    while heap and len(picked) < budget:
        negative, key, name = heapq.heappop(heap)
        picked[left[name].pop()] = name
        if left[name]:
            heapq.heappush(heap, (negative + 1, key, name))
    return picked


def _assemble(
    scenario: models.Scenario, census: censuses.Census, decision: censuses.Decision
) -> models.Plan:
    now = scenario.now
    changes: dict[models.PartitionId, models.Ownership | None] = {}
    moves: list[models.Move] = []
    for x in census.loose:
        epoch = x.entry.epoch if x.entry is not None else 0
        source = x.entry.owner if x.entry is not None else None
        target = decision.destinations[x.partition]
        if target is not None:
            # A loose partition's fate is "free": the hand-off table says how far it rises.
            raised = epoch + handoffs.EPOCH_STEP["free"]
            changes[x.partition] = models.Ownership(owner=target, epoch=raised, since=now)
            moves.append(
                models.Move(
                    partition=x.partition,
                    source=source,
                    target=target,
                    epoch=raised,
                    kind="assign" if source is None else "takeover",
                    reason=x.reason,
                )
            )
        elif source is not None:
            # Nobody can take it: keep the epoch on an ownerless entry until someone can.
            changes[x.partition] = models.Ownership(owner=None, epoch=epoch, since=now)
            moves.append(
                models.Move(
                    partition=x.partition,
                    source=source,
                    target=None,
                    epoch=epoch,
                    kind="takeover",
                    reason=x.reason,
                )
            )
    for r in decision.revokes:
        changes[r.partition] = dataclasses.replace(r.entry, state="revoking", since=now)
        moves.append(
            models.Move(
                partition=r.partition,
                source=r.entry.owner,
                target=decision.destinations.get(r.partition),
                epoch=r.entry.epoch,
                kind="revoke",
                reason=r.reason,
            )
        )

    assignment: dict[models.PartitionId, models.Ownership] = {}
    for p in census.order:
        entry = changes[p] if p in changes else scenario.assignment.get(p)
        if entry is not None:
            assignment[p] = entry
    moves.sort(key=lambda m: census.rank[m.partition])
    census.vanished.sort(key=lambda m: models.name_key(m.partition))
    return models.Plan(
        assignment=assignment,
        moves=(*moves, *census.vanished),
        balanced=_is_balanced(scenario, census, decision, assignment),
        targets=decision.targets,
        starting=decision.starting,
        release_deadlines=tuple(sorted(census.release_deadlines)),
        incoming_deadlines=tuple(sorted(set(census.incoming.values()))),
        probation_deadlines=tuple(sorted(census.probation)),
        starting_deadlines=tuple(sorted(set(census.starting_until.values()))),
    )


def _is_balanced(
    scenario: models.Scenario,
    census: censuses.Census,
    decision: censuses.Decision,
    assignment: dict[models.PartitionId, models.Ownership],
) -> bool:
    if len(assignment) != len(scenario.partitions):
        return False
    holding = {m.name: 0 for m in census.live}
    for entry in assignment.values():
        if entry.owner is None or entry.state == "revoking":
            return False
        if entry.owner in holding:
            holding[entry.owner] += 1
    if scenario.options.weighting == "lag":
        # Targets are load shares there; no revoke started means no move would help.
        return True
    return holding == decision.targets
