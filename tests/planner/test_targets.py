"""Quotas: floor/ceil for equal weights, largest remainder for weights, extras to the holders."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eventhub_balancer.balancing import models, targets


def claim(name: str, *, weight: float = 1.0, current: int = 0) -> targets.Claim:
    return targets.Claim(name=models.MemberName(name), weight=weight, current=current)


def test_equal_weights_give_floor_or_ceil_and_extras_go_to_the_biggest_holders() -> None:
    quotas = targets.quotas(
        total=10, claims=[claim("a"), claim("b", current=5), claim("c", current=5), claim("d")]
    )
    assert quotas == {"a": 2, "b": 3, "c": 3, "d": 2}


def test_equal_holdings_give_extras_by_name() -> None:
    assert targets.quotas(total=5, claims=[claim("b"), claim("a"), claim("c")]) == {
        "a": 2,
        "b": 2,
        "c": 1,
    }


def test_weights_give_largest_remainders_the_extras() -> None:
    # Shares 10 * (1, 1, 3) / 5 = 2, 2, 6 exactly; 11 units: 2.2, 2.2, 6.6 -> c gets the extra.
    claims = [claim("a"), claim("b"), claim("c", weight=3)]
    assert targets.quotas(total=10, claims=claims) == {"a": 2, "b": 2, "c": 6}
    assert targets.quotas(total=11, claims=claims) == {"a": 2, "b": 2, "c": 7}


def test_no_claims_give_no_quotas() -> None:
    assert targets.quotas(total=7, claims=[]) == {}


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 500),
    st.lists(
        st.tuples(st.sampled_from([0.25, 0.5, 1.0, 1.5, 3.0, 7.0]), st.integers(0, 50)),
        min_size=1,
        max_size=12,
    ),
)
def test_quotas_sum_to_the_total_and_stay_within_one_of_the_exact_share(
    total: int, stakes: list[tuple[float, int]]
) -> None:
    claims = [claim(f"m{i}", weight=w, current=c) for i, (w, c) in enumerate(stakes)]
    quotas = targets.quotas(total=total, claims=claims)
    assert sum(quotas.values()) == total
    whole = sum(w for w, _ in stakes)
    for c in claims:
        assert abs(quotas[c.name] - total * c.weight / whole) < 1


def test_with_weights_an_extra_stays_with_whoever_already_holds_it() -> None:
    # Shares 1.5 and 4.5: equal remainders. a got the extra on a fresh start (by name);
    # b holds more but only its floor, so the extra must not flip to b on the next cycle.
    claims = [claim("a", current=2), claim("b", weight=3, current=4)]
    assert targets.quotas(total=6, claims=claims) == {"a": 2, "b": 4}
