"""`statuses.recommended_replicas`: what an autoscaler should run, from the backlog.

Pure: numbers in, a number out; and the gauge that carries it keeps the last figure read
from a backlog while cycles read none.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventhub_balancer.balancing import models
from eventhub_balancer.handlers import metrics as prometheus
from eventhub_balancer.reconciling import readbacks, statuses

P = models.PartitionId
M = models.MemberName


@pytest.mark.parametrize(
    ("partitions", "backlog", "members", "expected"),
    [
        (32, 0, 5, 1),  # nothing waiting: one pod is enough
        (32, 1, 5, 1),
        (32, 1000, 5, 1),  # exactly what one replica carries
        (32, 1001, 5, 2),
        (32, 9_500, 1, 10),
        (4, 1_000_000, 4, 4),  # never more pods than partitions
        (32, None, 5, 5),  # backlog unknown: keep the pods there are
        (4, None, 9, 4),
        (4, None, 0, 1),  # at least one while partitions exist
        (0, 5000, 3, 0),  # no partitions (never listed): nothing to consume
    ],
)
def test_recommended_replicas(
    partitions: int, backlog: int | None, members: int, expected: int
) -> None:
    assert (
        statuses.recommended_replicas(partitions=partitions, backlog=backlog, members=members)
        == expected
    )


def test_the_lag_per_replica_sets_the_step() -> None:
    assert (
        statuses.recommended_replicas(partitions=32, backlog=250, members=1, lag_per_replica=100)
        == 3
    )
    with pytest.raises(ValueError, match="lag_per_replica"):
        statuses.recommended_replicas(partitions=1, backlog=1, members=1, lag_per_replica=0)


@given(
    partitions=st.integers(0, 4096),
    backlog=st.none() | st.integers(0, 10**12),
    members=st.integers(0, 5000),
    lag_per_replica=st.integers(1, 10**6),
)
def test_always_between_one_and_the_partition_count(
    partitions: int, backlog: int | None, members: int, lag_per_replica: int
) -> None:
    n = statuses.recommended_replicas(
        partitions=partitions, backlog=backlog, members=members, lag_per_replica=lag_per_replica
    )
    assert (1 <= n <= partitions) if partitions else n == 0
    if backlog is not None and backlog > 0 and n < partitions:
        assert n * lag_per_replica >= backlog  # enough replicas for the backlog


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_more_backlog_never_recommends_fewer(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert statuses.recommended_replicas(
        partitions=64, backlog=low, members=3
    ) <= statuses.recommended_replicas(partitions=64, backlog=high, members=3)


def _build(lag: dict[str, int] | None, *, members: int = 2) -> statuses.Figures:
    ids = tuple(P(str(i)) for i in range(8))
    pods = [M(f"pod-{i}") for i in range(members)]
    assignment = {p: models.Ownership(owner=pods[i % members], epoch=1) for i, p in enumerate(ids)}
    plan = models.Plan(assignment=assignment, moves=(), balanced=True, targets={m: 4 for m in pods})
    before = readbacks.ReadBack(assignment=assignment, released={}, floors={}, problems={})
    return statuses.build_figures(
        plan=plan,
        before=before,
        wall=0.0,
        partitions=ids,
        hub_ok=True,
        lag=None if lag is None else {P(p): n for p, n in lag.items()},
    )


def test_a_cycles_figures_carry_the_backlog_and_the_recommendation() -> None:
    read = _build({"0": 2500, "1": 1200, "2": 0})
    assert (read.backlog, read.recommended_replicas) == (3700, 4)
    # A cycle that read no lag (weighting "count", or the hub unreachable) knows no backlog.
    for unknown in (None, {}):
        unread = _build(unknown, members=3)
        assert (unread.backlog, unread.recommended_replicas) == (None, 3)


def _gauge(m: prometheus.Metrics) -> float | None:
    return m.registry.get_sample_value(
        "ehb_recommended_replicas", {"namespace": "shop", "consumer": "orders"}
    )


def test_the_gauge_keeps_the_last_figure_read_from_a_backlog() -> None:
    m = prometheus.Metrics()
    unread = _build(None, members=3)
    m.record(namespace="shop", consumer="orders", values=unread)
    assert _gauge(m) == 3  # nothing read yet: hold the pods there are
    m.record(namespace="shop", consumer="orders", values=_build({"0": 5000}))
    assert _gauge(m) == 5
    m.record(namespace="shop", consumer="orders", values=dataclasses.replace(unread))
    assert _gauge(m) == 5  # a cycle without a backlog does not swing it back
    m.record(namespace="shop", consumer="orders", values=_build({"0": 0}))
    assert _gauge(m) == 1
    assert b"ehb_recommended_replicas" in m.exposition()
    m.forget(namespace="shop", consumer="orders")
    assert _gauge(m) is None
