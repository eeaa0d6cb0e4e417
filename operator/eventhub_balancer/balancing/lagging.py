"""Planning with ``weighting: lag``: spread the backlog, not the count, without ping-pong.

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
   before the next move (the guarantees are in docs/planner.md).
"""

from __future__ import annotations

import bisect
import fractions
import math
from collections.abc import Callable, Container, Mapping

from eventhub_balancer.balancing import censuses, loads, models, targets


def decide(scenario: models.Scenario, census: censuses.Census) -> censuses.Decision:
    """Targets in load units, the revokes to start, and where loose and leaving ones go."""

    floor, seconds = scenario.options.lag_floor, scenario.options.lag_floor_seconds
    # What a partition receives in that many seconds is in flight, not behind.
    floors = {p: max(floor, math.ceil(r * seconds)) for p, r in scenario.rates.items()}

    # A partition that keeps up weighs what is in flight on an average one, the same for all
    # (spread as by count, whatever each one's traffic); its backlog beyond its own floor adds
    # to that. Weighed as one event, partitions that keep up gathered on few pods beside a
    # backlog. Without a floor (`ehb plan`): lag + 1, so that idle partitions still spread.
    given = [floors.get(p, floor) for p in scenario.partitions]
    unit = max(1, math.ceil(sum(given) / len(given))) if given else 1

    def size(p: models.PartitionId) -> int:
        return max(0, scenario.lag.get(p, 0) - floors.get(p, floor)) + unit

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
    # A partition that changed owner lately is checkpointed by nobody from its revoke to its
    # new owner's first batch: its lag grows by the hand-off itself, and is no load to spread.
    settle = scenario.options.lag_settle_seconds
    recent = scenario.now - settle
    settling = any(e.owner and e.since > recent for e in scenario.assignment.values())
    # Nor while some lag is given without the partition's rate: what is in flight is unknown
    # (the operator's first read of the ends, a new partition).
    unmeasured = seconds > 0 and any(p not in scenario.rates for p in scenario.lag)
    if placing or leaving or not census.live or settling or unmeasured:
        # Something is in motion: place it, start nothing new until the loads have settled.
        book = loads.Loads(loads=kept, weights=weights)
        destinations = _place(book, placing, size=size, rank=census.rank, owners=owners)
        destinations.update(_place(book, leaving, size=size, rank=census.rank, owners=owners))
        return censuses.Decision(targets=quota, revokes=revokes, destinations=destinations)

    whole = sum((fractions.Fraction(w) for w in weights.values()), fractions.Fraction(0))
    mean = available / whole  # load per unit of weight
    tolerance = fractions.Fraction(scenario.options.lag_tolerance)
    budget = censuses.budget(scenario, census)
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

    def placed(
        shed: Mapping[models.PartitionId, models.MemberName],
    ) -> tuple[loads.Loads, dict[models.PartitionId, models.MemberName | None]]:
        """The loads once the revoked partitions are placed, and their next owners, as the
        next cycle will place them once released."""
        remaining = dict(kept)
        for p, owner in shed.items():
            remaining[owner] -= size(p)
        book = loads.Loads(loads=remaining, weights=weights)
        return book, _place(book, list(shed), size=size, rank=census.rank, owners=owners)

    # Placement may differ from what the shedding assumed, so each round looks again from the
    # placed loads. It may also leave a giver so much lighter than assumed that the next cycle
    # would revoke a partition back to it (weights 0.5, 0.5, 0.5 and 1, 15 partitions on the
    # first: it kept 2 of its share of 3): such a partition stays with its owner instead, for
    # good (`kept_back`), and the shedding looks again. A partition joins `shed` at most once and
    # leaves it at most once, so this ends.
    kept_back: set[models.PartitionId] = set()
    while True:
        book, destinations = placed(shed)
        found = {}
        if len(shed) < budget:
            found = _shed(
                book,
                smallest_first,
                shed.keys() | kept_back,
                size=size,
                margin=margin,
                budget=budget - len(shed),
                probe=not started,
            )
        if found and not started:
            started, margin = True, margin / 2
            continue
        if found:
            shed.update({p: giver for p, (giver, _) in found.items()})
            continue
        back = _returning(
            book, shed, destinations, weighed, size=size, rank=census.rank, margin=tolerance * mean
        )
        if not back:
            break
        for p in back:
            del shed[p]
        kept_back.update(back)
    revokes += [
        censuses.Revoke(partition=p, entry=scenario.assignment[p], reason="rebalance")
        for p in sorted(shed, key=census.rank.__getitem__)
    ]
    return censuses.Decision(targets=quota, revokes=revokes, destinations=destinations)


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


def _returning(
    book: loads.Loads,
    shed: Mapping[models.PartitionId, models.MemberName],
    destinations: Mapping[models.PartitionId, models.MemberName | None],
    weighed: Mapping[models.MemberName, list[tuple[int, int, models.PartitionId]]],
    *,
    size: Callable[[models.PartitionId], int],
    rank: Mapping[models.PartitionId, int],
    margin: fractions.Fraction,
) -> list[models.PartitionId]:
    """The revoked partitions to keep with their owners: those the next cycle, with the revoked
    ones placed (`book`, `destinations`), would move straight back. It starts on a move at the
    full tolerance (`margin`), and goes on at half of it, as `decide` does."""
    half = margin / 2
    if not any(
        target is not None
        and _largest(book, giver=target, receiver=shed[p], margin=half) >= size(p)
        for p, target in destinations.items()
    ):
        return []  # no move straight back is material, even at half the tolerance
    held: dict[models.MemberName, list[tuple[int, int, models.PartitionId]]] = {
        name: [e for e in entries if e[2] not in shed] for name, entries in weighed.items()
    }
    for p, target in destinations.items():
        if target is not None:
            held[target].append((size(p), rank[p], p))
    for entries in held.values():
        entries.sort()

    def next_cycle(
        margin: fractions.Fraction, *, probe: bool
    ) -> dict[models.PartitionId, tuple[models.MemberName, models.MemberName]]:
        after = loads.Loads(
            loads={name: book[name] for name in held},
            weights={name: book.weight(name) for name in held},
        )
        return _shed(
            after, held.__getitem__, (), size=size, margin=margin, budget=math.inf, probe=probe
        )

    if not next_cycle(margin, probe=True):
        return []
    moves = next_cycle(half, probe=False)
    return [p for p, (_, receiver) in moves.items() if shed.get(p) == receiver]


def _shed(
    book: loads.Loads,
    movable: Callable[[models.MemberName], list[tuple[int, int, models.PartitionId]]],
    gone: Container[models.PartitionId],
    *,
    size: Callable[[models.PartitionId], int],
    margin: fractions.Fraction,
    budget: float,
    probe: bool,
) -> dict[models.PartitionId, tuple[models.MemberName, models.MemberName]]:
    """Material moves, most loaded member first, until none is left (`probe`: the first one),
    each partition with its giver and its receiver.

    `movable` gives a member's partitions, smallest first; those in `gone` are already leaving.

    A move of a partition of size s from g to r is material when, per unit of weight, the giver
    stays at least `margin` above where the receiver was and the receiver stays at least
    `margin` below where the giver was (equal weights: load(g) - load(r) >= s + margin); with no
    margin, strictly. Each such move lowers sum(load^2 / weight) by at least 2 x s x margin, so
    this ends. Among the material moves of the giver, the one that best evens out the pair.
    """
    left: dict[models.MemberName, list[models.PartitionId]] = {}
    sizes: dict[models.MemberName, list[int]] = {}
    found: dict[models.PartitionId, tuple[models.MemberName, models.MemberName]] = {}
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
        if not sizes[giver]:
            settled.add(giver)  # nothing of its own left to give
            continue
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
        found[p] = (giver, receiver)
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
