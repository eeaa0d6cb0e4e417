"""How many units (partitions, or load units) each live member should end up with.

Kept apart from the planning rules because it is pure arithmetic with one subtle point:
when the quotas leave a remainder, who gets the extra unit decides how many partitions have
to move. The extras go by largest remainder (weights), then to the members that already hold
the most above their floor, then by name, so that a balanced assignment is left alone and
the number of moves is the lower bound.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
from collections.abc import Sequence

from eventhub_balancer.balancing import models


@dataclasses.dataclass(frozen=True, kw_only=True)
class Claim:
    """A live member's stake: its weight and what it holds now."""

    name: models.MemberName
    weight: float
    current: int
    #: a starting member's claim (`censuses.Census.starting`): a tie goes to the live members
    #: first, which take their partitions now, so that a quota does not change hands when a
    #: live member that holds nothing yet holds its floor a cycle later
    starting: bool = False


def quotas(*, total: int, claims: Sequence[Claim]) -> dict[models.MemberName, int]:
    """Split `total` units over the claims proportionally to their weights.

    Every member gets the floor of its exact share, and the remaining units go one each to the
    largest remainders; ties go to the members holding the most above their floor (with equal
    weights: holding the most), then to the live members before the starting ones, then by
    name. The result sums
    to `total` and each quota is within one of the exact share. No claims: no quotas.
    """
    if not claims:
        return {}
    if total < 0:
        raise ValueError(f"total must not be negative, got {total}")
    first = claims[0].weight
    if all(c.weight == first for c in claims):
        # Equal weights (the usual case): plain floor/ceil, exact and fast.
        base, extra = divmod(total, len(claims))
        ranked = sorted(claims, key=lambda c: (-c.current, c.starting, models.name_key(c.name)))
        return {c.name: base + (1 if rank < extra else 0) for rank, c in enumerate(ranked)}
    # Fractions, so that equal remainders are equal and ties go by the documented order.
    weights = [fractions.Fraction(c.weight) for c in claims]
    whole = sum(weights, fractions.Fraction(0))
    shares = [total * w / whole for w in weights]
    bases = [math.floor(s) for s in shares]
    extra = total - sum(bases)
    order = sorted(
        range(len(claims)),
        key=lambda i: (
            -(shares[i] - bases[i]),
            # Holding more than its floor already, not holding the most: with unequal
            # weights the biggest holder may be at its floor, and the extra would flip.
            bases[i] - claims[i].current,
            claims[i].starting,
            models.name_key(claims[i].name),
        ),
    )
    result = {c.name: b for c, b in zip(claims, bases, strict=True)}
    for i in order[:extra]:
        result[claims[i].name] += 1
    return result
