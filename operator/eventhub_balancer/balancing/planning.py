"""The planning rules: one cycle from a `Scenario` to a `Plan`, with no I/O and no clock.

The operator runs `plan` every cycle with what it observed (members, the assignment read back
from the ConfigMaps, acknowledgements, `now`) and writes what changed. The rules, in order:

1. Every member has a *standing*: ready members are live; NotReady members are held (they
   keep what they own, get nothing new) until ``podGraceSeconds`` passed, then gone;
   terminating members are draining; members absent from the list are gone.
2. Every partition is then one of: kept by its live owner; held by a held owner; revoking and
   still waiting for its owner's acknowledgement (in flight); owned by a draining member (to
   be revoked now); or loose (no owner, owner gone, revoke acknowledged or timed out), to be
   placed now. Partitions no longer listed are dropped.
3. Targets are computed over the live members for every partition not held by a held member.
4. Live members above their target revoke their surplus (capped by ``maxMovesPerCycle``,
   after the drains); loose partitions go at once to live members below their target, with
   epoch + 1. A revoked partition changes owner in a later cycle, once it is loose.

With ``weighting: lag`` the unit is load (events behind + 1 per partition), and lag changes
every cycle, so moves are damped (``lagTolerance`` = t, m = the mean load per unit of weight):

5. A cycle with anything in motion (partitions to place, hand-offs in flight, drains) only
   places: loose partitions, then leaving ones, heaviest first, each to whoever carries the
   least after taking it (never back to the member it leaves).
6. A quiet cycle starts rebalancing only if a *material* move exists at margin t x m: moving
   a partition of size s from g to r leaves g at least the margin above r's old load and r at
   least the margin below g's old load, per unit of weight (equal weights: load(g) - load(r)
   >= s + t x m). Once started it goes on at margin t x m / 2 (hysteresis), most loaded member
   first, and names each revoke's next owner exactly as rule 5 will place it when released.
   Each move lowers sum(load^2 / weight) by at least 2 x s x margin, so it stops; the state it
   leaves has no move material at half the tolerance, so lags must change by a material amount
   before the next move (the guarantees are in .readme/planner.md).
"""

from __future__ import annotations

import bisect
import dataclasses
import fractions
import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from eventhub_balancer import errors, handoffs
from eventhub_balancer.balancing import loads, models, targets

#: live: gets partitions; held: keeps, gets nothing; draining: loses all by hand-off;
#: gone: loses all at once.
Standing = handoffs.Standing


def standing(member: models.Member | None, *, now: float, options: models.Options) -> Standing:
    """What a member's state means for its partitions at `now` (None: absent, so gone)."""
    if member is None:
        return "gone"
    if member.state == "ready":
        return "live"
    if member.state == "terminating":
        return "draining"
    if now - member.since < options.pod_grace_seconds:
        return "held"
    return "gone"


class _Loose(NamedTuple):
    """A partition to be placed in this cycle (a tuple: there are up to P of them)."""

    partition: models.PartitionId
    entry: models.Ownership | None
    reason: models.MoveReason  # new, gone, released or timeout


class _Revoke(NamedTuple):
    """A partition to be marked revoking on its owner in this cycle."""

    partition: models.PartitionId
    entry: models.Ownership
    reason: models.MoveReason  # drain or rebalance


@dataclasses.dataclass(kw_only=True)
class _Census:
    """Where every partition stands at the start of the cycle."""

    order: list[models.PartitionId]  # the partitions, in order
    rank: dict[models.PartitionId, int]  # partition -> its place in `order`
    live: list[models.Member]  # by name
    kept: dict[models.MemberName, list[models.PartitionId]]  # live owner -> owned, in order
    loose: list[_Loose] = dataclasses.field(default_factory=list)
    in_flight: list[models.PartitionId] = dataclasses.field(default_factory=list)
    drains: list[_Revoke] = dataclasses.field(default_factory=list)
    held: list[models.PartitionId] = dataclasses.field(default_factory=list)
    vanished: list[models.Move] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class _Decision:
    """What the weighting strategy decided: targets, revokes, and where partitions go."""

    targets: dict[models.MemberName, int]
    revokes: list[_Revoke]
    #: loose and revoked partitions -> their (intended) next owner; None: no live member
    destinations: dict[models.PartitionId, models.MemberName | None]


def plan(scenario: models.Scenario) -> models.Plan:
    """Plan one cycle. Pure: the same scenario always gives the same plan."""
    _check(scenario)
    census = _take_census(scenario)
    if scenario.options.weighting == "lag":
        decision = _decide_by_lag(scenario, census)
    else:
        decision = _decide_by_count(scenario, census)
    return _assemble(scenario, census, decision)


def ordered_partitions(partitions: Iterable[models.PartitionId]) -> list[models.PartitionId]:
    """Partitions in the planner's order: numerically when they are numbers."""
    return sorted(partitions, key=models.name_key)


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


def _take_census(scenario: models.Scenario) -> _Census:
    now, options = scenario.now, scenario.options
    members = {m.name: m for m in scenario.members}
    standings = {n: standing(m, now=now, options=options) for n, m in members.items()}
    live = sorted(
        (m for m in scenario.members if standings[m.name] == "live"),
        key=lambda m: models.name_key(m.name),
    )
    order = ordered_partitions(scenario.partitions)
    census = _Census(
        order=order,
        rank={p: i for i, p in enumerate(order)},
        live=live,
        kept={m.name: [] for m in live},
    )
    present = set(scenario.partitions)

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
            census.loose.append(_Loose(partition=p, entry=entry, reason="new"))
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
            census.loose.append(_Loose(partition=p, entry=entry, reason=reason))
        elif fate == "wait":
            # Leaving in any case (a hand-off is never cancelled), so it counts as available
            # even on a held owner.
            census.in_flight.append(p)
        elif fate == "keep":
            census.kept[owner].append(p)
        elif fate == "hold":
            census.held.append(p)
        else:
            census.drains.append(_Revoke(partition=p, entry=entry, reason="drain"))
    return census


def _budget(scenario: models.Scenario, census: _Census) -> float:
    """How many rebalancing revokes may start: drains come first and are never held back."""
    cap = scenario.options.max_moves_per_cycle
    return math.inf if cap == 0 else max(0, cap - len(census.drains))


def _decide_by_count(scenario: models.Scenario, census: _Census) -> _Decision:
    available = len(scenario.partitions) - len(census.held)
    quota = targets.quotas(
        total=available,
        claims=[
            targets.Claim(name=m.name, weight=m.weight, current=len(census.kept[m.name]))
            for m in census.live
        ],
    )
    # Each member's surplus: the last partitions in order, revoked from the end.
    surplus = {
        m.name: census.kept[m.name][quota[m.name] :]
        for m in census.live
        if len(census.kept[m.name]) > quota[m.name]
    }
    picked = _pick_surplus(surplus, budget=_budget(scenario, census))
    entries = scenario.assignment
    revokes = census.drains + [
        _Revoke(partition=p, entry=entries[p], reason="rebalance")
        for p in sorted(picked, key=census.rank.__getitem__)
    ]

    # Fill each member up to its target, in name order: loose partitions for real, then the
    # in-flight and revoked ones to name the intended next owner of each revoke.
    holding = {m.name: len(census.kept[m.name]) for m in census.live}
    for source in picked.values():
        holding[source] -= 1
    openings = (
        (m.name, quota[m.name] - holding[m.name])
        for m in census.live
        if quota[m.name] > holding[m.name]
    )
    queue = [x.partition for x in census.loose] + census.in_flight + [r.partition for r in revokes]
    destinations: dict[models.PartitionId, models.MemberName | None] = {}
    position = 0
    for name, room in openings:
        for p in queue[position : position + room]:
            destinations[p] = name
        position += room
        if position >= len(queue):
            break
    for p in queue[position:]:
        destinations[p] = None  # only when there is no live member at all
    return _Decision(targets=quota, revokes=revokes, destinations=destinations)


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


def _decide_by_lag(scenario: models.Scenario, census: _Census) -> _Decision:
    def size(p: models.PartitionId) -> int:
        # +1 so that idle partitions still spread.
        return scenario.lag.get(p, 0) + 1

    weighed = {
        m.name: [(size(p), census.rank[p], p) for p in census.kept[m.name]] for m in census.live
    }
    kept = {name: sum(s for s, _, _ in ps) for name, ps in weighed.items()}
    weights = {m.name: m.weight for m in census.live}
    available = sum(size(p) for p in scenario.partitions) - sum(size(p) for p in census.held)
    quota = targets.quotas(
        total=available,
        claims=[
            targets.Claim(name=m.name, weight=m.weight, current=kept[m.name]) for m in census.live
        ],
    )
    owners = {p: e.owner for p, e in scenario.assignment.items()}
    # Loose partitions are placed for real, then the in-flight and drained ones to name their
    # next owner: the same two steps, in the same order, that the next cycles will take.
    placing = [x.partition for x in census.loose]
    leaving = census.in_flight + [r.partition for r in census.drains]
    revokes = list(census.drains)
    if placing or leaving or not census.live:
        # Something is in motion: place it, start nothing new until the loads have settled.
        book = loads.Loads(loads=kept, weights=weights)
        destinations = _place(book, placing, size=size, rank=census.rank, owners=owners)
        destinations.update(_place(book, leaving, size=size, rank=census.rank, owners=owners))
        return _Decision(targets=quota, revokes=revokes, destinations=destinations)

    whole = sum((fractions.Fraction(w) for w in weights.values()), fractions.Fraction(0))
    mean = available / whole  # load per unit of weight
    tolerance = fractions.Fraction(scenario.options.lag_tolerance)
    budget = _budget(scenario, census)
    # A member's partitions, smallest first; sorted only for the members that come up as givers.
    movable: dict[models.MemberName, list[tuple[int, int, models.PartitionId]]] = {}

    def smallest_first(name: models.MemberName) -> list[tuple[int, int, models.PartitionId]]:
        if name not in movable:
            movable[name] = sorted(weighed[name])
        return movable[name]

    shed: dict[models.PartitionId, models.MemberName] = {}  # revoked partition -> its owner
    # Start only on a move that is material at the full tolerance; once started, go on down to
    # half of it (hysteresis), so that the result is not on the edge of the trigger.
    started = False
    margin = tolerance * mean
    while True:
        remaining = dict(kept)
        for p, owner in shed.items():
            remaining[owner] -= size(p)
        book = loads.Loads(loads=remaining, weights=weights)
        # The next owners as the next cycle will place the revoked partitions once released.
        destinations = _place(book, list(shed), size=size, rank=census.rank, owners=owners)
        if len(shed) >= budget:
            break
        found = _shed(
            book,
            smallest_first,
            shed,
            size=size,
            margin=margin,
            budget=budget - len(shed),
            probe=not started,
        )
        if not found:
            break
        if not started:
            started, margin = True, margin / 2
            continue
        # Placement may differ from what the shedding assumed: look again from there.
        shed.update(found)
    revokes += [
        _Revoke(partition=p, entry=scenario.assignment[p], reason="rebalance")
        for p in sorted(shed, key=census.rank.__getitem__)
    ]
    return _Decision(targets=quota, revokes=revokes, destinations=destinations)


def _place(
    book: loads.Loads,
    partitions: list[models.PartitionId],
    *,
    size: Callable[[models.PartitionId], int],
    rank: dict[models.PartitionId, int],
    owners: Mapping[models.PartitionId, models.MemberName | None],
) -> dict[models.PartitionId, models.MemberName | None]:
    """Heaviest first, each to whoever carries the least after taking it, never back to the
    member it leaves while another one is live."""
    destinations: dict[models.PartitionId, models.MemberName | None] = {}
    for p in sorted(partitions, key=lambda p: (-size(p), rank[p])):
        receiver = book.receiver(size(p), avoid=owners.get(p))
        destinations[p] = receiver
        if receiver is not None:
            book.add(receiver, size(p))
    return destinations


def _shed(
    book: loads.Loads,
    movable: Callable[[models.MemberName], list[tuple[int, int, models.PartitionId]]],
    gone: Mapping[models.PartitionId, object],
    *,
    size: Callable[[models.PartitionId], int],
    margin: fractions.Fraction,
    budget: float,
    probe: bool,
) -> dict[models.PartitionId, models.MemberName]:
    """Material moves, most loaded member first, until none is left (`probe`: the first one).

    `movable` gives a member's partitions, smallest first; those in `gone` are already leaving.

    A move of a partition of size s from g to r is material when, per unit of weight, the giver
    stays at least `margin` above where the receiver was and the receiver stays at least
    `margin` below where the giver was (equal weights: load(g) - load(r) >= s + margin); with no
    margin, strictly. Each such move lowers sum(load^2 / weight) by at least 2 x s x margin, so
    this ends. Among the material moves of the giver, the one that best evens out the pair.
    """
    left: dict[models.MemberName, list[models.PartitionId]] = {}
    sizes: dict[models.MemberName, list[int]] = {}
    found: dict[models.PartitionId, models.MemberName] = {}
    settled: set[models.MemberName] = set()
    need: dict[float, int] = {}  # weight -> the least whole load gap, with equal weights
    while len(found) < budget:
        giver = book.heaviest(skip=settled)
        if giver is None:
            break
        lightest = book.lightest()
        if len(lightest) == 1:  # equal weights: integers
            w = book.weight(giver)
            if w not in need:
                need[w] = max(1, math.ceil(margin * fractions.Fraction(w)))
            # A move needs load(g) - load(r) - s >= need with s >= 1.
            if book[giver] - book[lightest[0]] <= need[w]:
                break  # no material move from this giver, nor from any lighter one
        else:
            floor = min(
                fractions.Fraction(book[n]) / fractions.Fraction(book.weight(n)) for n in lightest
            )
            level = fractions.Fraction(book[giver]) / fractions.Fraction(book.weight(giver))
            if level - floor <= margin:
                break
        if giver not in left:
            entries = [e for e in movable(giver) if e[2] not in gone]
            left[giver] = [p for _, _, p in entries]
            sizes[giver] = [n for n, _, _ in entries]
        best: tuple[float, models.NameKey, int, models.MemberName] | None = None
        for receiver in book.lightest(avoid=giver):
            if book.weight(receiver) == book.weight(giver) and book.weight(giver) in need:
                largest = book[giver] - book[receiver] - need[book.weight(giver)]
            else:
                largest = _largest(book, giver=giver, receiver=receiver, margin=margin)
            fitting = bisect.bisect_right(sizes[giver], largest)
            if fitting == 0:
                continue
            w_giver, w_receiver = book.weight(giver), book.weight(receiver)
            even = (book[giver] * w_receiver - book[receiver] * w_giver) / (w_giver + w_receiver)
            middle = bisect.bisect_right(sizes[giver], even, hi=fitting)
            for index in {max(middle - 1, 0), min(middle, fitting - 1)}:
                moved = sizes[giver][index]
                higher = max((book[giver] - moved) / w_giver, (book[receiver] + moved) / w_receiver)
                candidate = (higher, models.name_key(receiver), index, receiver)
                if best is None or candidate < best:
                    best = candidate
        if best is None:
            settled.add(giver)
            continue
        *_, index, receiver = best
        p = left[giver].pop(index)
        book.add(giver, -sizes[giver].pop(index))
        book.add(receiver, size(p))
        found[p] = giver
        if probe:
            break
    return found


def _largest(
    book: loads.Loads,
    *,
    giver: models.MemberName,
    receiver: models.MemberName,
    margin: fractions.Fraction,
) -> int:
    """The largest partition size whose move from giver to receiver is material.

    Exact (integers, or fractions for unequal weights): a rounding error here would let a
    partition go back and forth between two members.
    """
    w_giver, w_receiver = book.weight(giver), book.weight(receiver)
    if w_giver == w_receiver:
        # load(g) - load(r) - s >= margin x w, and > 0 (sizes and loads are integers).
        return (
            book[giver] - book[receiver] - max(1, math.ceil(margin * fractions.Fraction(w_giver)))
        )
    wg, wr = fractions.Fraction(w_giver), fractions.Fraction(w_receiver)
    limit = (book[giver] / wg - book[receiver] / wr - margin) * min(wg, wr)
    return math.floor(limit) if margin else math.ceil(limit) - 1


def _assemble(scenario: models.Scenario, census: _Census, decision: _Decision) -> models.Plan:
    now = scenario.now
    changes: dict[models.PartitionId, models.Ownership | None] = {}
    moves: list[models.Move] = []
    for x in census.loose:
        epoch = x.entry.epoch if x.entry is not None else 0
        source = x.entry.owner if x.entry is not None else None
        target = decision.destinations[x.partition]
        if target is not None:
            changes[x.partition] = models.Ownership(owner=target, epoch=epoch + 1, since=now)
            moves.append(
                models.Move(
                    partition=x.partition,
                    source=source,
                    target=target,
                    epoch=epoch + 1,
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
    )


def _is_balanced(
    scenario: models.Scenario,
    census: _Census,
    decision: _Decision,
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
