"""`conflicts.PeerIndex` finds what a pass over every peer finds.

A decision looks its peers up by location and by one label each selector requires, instead
of matching every older consumer of its namespace against its pods: whatever the peers,
their selectors and the pods' labels, `conflicts.find` and `conflicts.holder` must answer as
that pass did (`scan`, the rule as it was written before the index).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.reconciling import conflicts

BASE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NAMESPACES = ("a", "b")
KEYS = ("app", "tier")
VALUES = ("x", "y")
LOCATIONS = (("hub", "one"), ("hub", "two"), None)

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)
requirements = st.builds(
    labelselectors.LabelRequirement,
    key=st.sampled_from(KEYS),
    operator=st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")),
    values=st.lists(st.sampled_from(VALUES), min_size=1, max_size=2).map(tuple),
)
selectors = st.one_of(
    st.none(),
    st.builds(
        labelselectors.Selector,
        match_labels=labels,
        match_expressions=st.lists(requirements, max_size=2).map(tuple),
    ),
)


@st.composite
def peers(draw: st.DrawFn) -> list[conflicts.Peer]:
    count = draw(st.integers(min_value=1, max_value=8))
    found = []
    for i in range(count):
        found.append(
            conflicts.Peer(
                namespace=draw(st.sampled_from(NAMESPACES)),
                name=f"c{draw(st.integers(min_value=0, max_value=3))}",
                uid=f"uid-{i}",
                created=BASE + datetime.timedelta(seconds=draw(st.integers(0, 3))),
                selector=draw(selectors),
                location=draw(st.sampled_from(LOCATIONS)),
                deleting=draw(st.booleans()),
                standing=draw(st.sampled_from((conflicts.WORKING, conflicts.UNDECIDED))),
            )
        )
    return found


def scan(
    me: conflicts.Peer, peers: Sequence[conflicts.Peer], pod_labels: Sequence[Mapping[str, str]]
) -> conflicts.Overlap | None:
    """`find` as a pass over every peer, as it was before the index (no bindings)."""
    earlier = [
        p
        for p in peers
        if me.location is not None
        and not p.deleting
        and p.namespace != me.namespace
        and p.location == me.location
        and p.title < me.title
    ]
    if earlier:
        held = min(earlier, key=lambda p: p.title)
        return conflicts.Overlap(
            others=(held,),
            why="names the same Event Hub, consumer group and checkpoint location",
            reason=conflicts.REASON_SHARED,
            hosts=conflicts.hosts(me.location) if me.location is not None else (),
        )
    found: conflicts.Peer | None = None
    why = ""
    for other in peers:
        if other.deleting or other.namespace != me.namespace or other.name == me.name:
            continue
        if other.order >= me.order or (found is not None and other.order >= found.order):
            continue
        if other.location is not None and other.location == me.location:
            found = other
            why = "reads the same Event Hub and consumer group into the same checkpoint location"
            continue
        if other.selector is None:
            continue
        if any(other.selector.matches(ls) for ls in pod_labels):
            found, why = other, "selects the same pods"
    tied = found is not None and found.created == me.created
    return conflicts.Overlap(others=(found,), why=why, tied=tied) if found is not None else None


@settings(max_examples=400, deadline=None)
@given(everyone=peers(), which=st.integers(min_value=0), pods=st.lists(labels, max_size=3))
def test_the_index_finds_what_a_pass_over_every_peer_finds(
    everyone: list[conflicts.Peer], which: int, pods: list[dict[str, str]]
) -> None:
    me = everyone[which % len(everyone)]
    index = conflicts.PeerIndex(everyone)
    assert conflicts.find(me, index, pod_labels=pods) == scan(me, everyone, pods)
    assert conflicts.find(me, everyone, pod_labels=pods) == scan(me, everyone, pods)


def test_the_index_is_a_tuple_of_the_peers() -> None:
    """Every reader of the peers (equality, identity, iteration) sees the tuple it was."""
    one = conflicts.Peer(namespace="a", name="c", uid="u")
    index = conflicts.PeerIndex([one])
    assert index == (one,)
    assert list(index) == [one]
    assert conflicts.holder(one, index) is None
