"""Each partition's rate from the hub's ends at two reads (`observations.Traffic`): weighting
"lag" leaves that many seconds of its own traffic out of each partition's lag."""

from __future__ import annotations

from eventhub_balancer.contracts import startpositions
from eventhub_balancer.reconciling import observations

HUB = ("shop.servicebus.windows.net", "orders")


def ends(**last: int) -> dict[str, startpositions.PartitionBounds]:
    return {
        p.removeprefix("p"): startpositions.PartitionBounds(
            beginning_sequence_number=0, last_sequence_number=n, last_offset=str(n), empty=False
        )
        for p, n in last.items()
    }


def test_rates_are_measured_from_a_read_rate_seconds_to_twice_that_old() -> None:
    kept = observations.Traffic()
    seen = []
    for wall, end in ((0, 0), (5, 5_000), (10, 10_000), (15, 18_000), (20, 21_000), (25, 25_000)):
        read = ends(p0=end, p1=end // 10)
        seen.append(kept.rates(read, key=HUB, wall=wall))
        kept = kept.after(read, key=HUB, wall=wall)
    assert seen == [
        {},  # nothing to measure from
        {"0": 1000.0, "1": 100.0},  # from the first read
        {"0": 1000.0, "1": 100.0},  # from the first read; 10 s old, it is replaced
        {"0": 1200.0, "1": 120.0},  # from the first read still, kept as the older one
        {"0": 1050.0, "1": 105.0},  # and still; the read at 10 s is 10 s old, it is replaced
        {"0": 1000.0, "1": 100.0},  # from the read at 10 s: the burst evened out
    ]
    assert observations.RATE_SECONDS == 10


def test_no_rate_from_another_hub_an_end_that_went_back_or_a_new_partition() -> None:
    kept = observations.Traffic().after(ends(p0=1000, p1=1000), key=HUB, wall=0)
    assert kept.rates(ends(p0=2000), key=("other", "orders"), wall=5) == {}
    assert kept.rates(ends(p0=2000, p1=10, p2=50), key=HUB, wall=5) == {"0": 200.0}
    assert kept.rates(ends(p0=1500), key=HUB, wall=0.5) == {}  # a producer's send, no rate
    # Another hub's ends start over; so does a clock that went back.
    assert kept.after(ends(p0=5), key=("other", "orders"), wall=5).older is None
    again = kept.after(ends(p0=5000), key=HUB, wall=-30)
    assert again.older is None
    assert again.newer == (-30, {"0": 5000})
