"""`metrics.Metrics`: the partitions pods report in trouble reach Prometheus through a cycle."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, partitionreports, startpositions
from eventhub_balancer.handlers import backlogs, cycles, memories, metrics
from eventhub_balancer.reconciling import statuses
from tests.handlers import test_cycles, test_lost_checkpoints
from tests.handlers.test_cycles import NAME, NS, at, make_kube
from tests.support import fakes


def value(text: str, state: str) -> float:
    """The gauge's value for ``state`` in the exposition ``text``; exactly one sample."""
    prefix = f'ehb_partitions_troubled{{consumer="orders",namespace="shop",state="{state}"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line.removeprefix(prefix))


async def test_a_parked_partition_is_counted_shown_and_forgotten_with_its_consumer() -> None:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry = metrics.Metrics()
    memory = memories.Memory()

    async def cycle(now: float) -> cycles.Result:
        return await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)

    await cycle(0)
    assert kube.assignment(NS)["a"] == {"0": (1, "owned"), "1": (1, "owned")}
    text = registry.exposition().decode()
    assert [value(text, s) for s in partitionreports.REPORT_STATES] == [0, 0, 0, 0]

    # What the pod's runtime writes when it parks partition 1.
    cm = kube.configmap_of(NS, "a")
    report = partitionreports.PartitionReport(
        partition="1", epoch=1, state="parked", attempts=10, error="ValueError: poison"
    )
    cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_PARTITION_REPORTS] = (
        partitionreports.build({"1": report})
    )
    before = len(kube.calls)
    await cycle(5)

    text = registry.exposition().decode()
    assert value(text, "parked") == 1
    assert value(text, "failing") == 0
    condition = kube.condition(NS, NAME, "PartitionsFailing")
    assert (condition["status"], condition["reason"]) == ("True", "PartitionsParked")
    assert kube.status(NS, NAME)["failing"][0]["partition"] == "1"
    assert [(e["reason"], e["type"]) for e in kube.events[-1:]] == [("PartitionParked", "Warning")]
    # Shown, not moved: the status and the Event, no ConfigMap write.
    assert [kind for _, kind, _ in kube.calls[before:]] == ["status", "event"]
    assert kube.assignment(NS)["a"] == {"0": (1, "owned"), "1": (1, "owned")}

    registry.forget(namespace=NS, consumer=NAME)
    assert "ehb_partitions_troubled{" not in registry.exposition().decode()


def test_a_paused_consumer_is_exported_so_alerts_can_skip_it() -> None:
    exported = metrics.Metrics()

    def paused_value(paused: bool) -> str:
        exported.record(
            namespace=NS,
            consumer=NAME,
            values=statuses.Figures(
                per_pod={},
                partition_count=4,
                members=2,
                balanced=True,
                handoffs_in_flight=0,
                eventhub_reachable=True,
                moves=(),
                handoffs=(),
                paused=paused,
            ),
        )
        text = exported.exposition().decode()
        prefix = 'ehb_paused{consumer="orders",namespace="shop"} '
        (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
        return line.removeprefix(prefix)

    assert paused_value(True) == "1.0"
    assert paused_value(False) == "0.0"
    exported.forget(namespace=NS, consumer=NAME)
    assert "ehb_paused{" not in exported.exposition().decode()


async def test_the_backlog_is_read_beside_the_store_probe_whatever_the_weighting() -> None:
    """With weighting "count" the planner never needs the hub's end; the recommendation for
    autoscalers still comes from the backlog, read once a minute with the store's probe (not
    the first one: every consumer's first cycle, all at once after an operator start)."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.last_sequences = {p: 4_999 for p in hubs.ids}  # 5,000 events behind on each
    registry = metrics.Metrics()
    memory = memories.Memory()
    prefix = 'ehb_recommended_replicas{consumer="orders",namespace="shop"} '

    def recommended() -> float:
        text = registry.exposition().decode()
        (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
        return float(line.removeprefix(prefix))

    for now in (0, 5, 65):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
        if now == 5:
            assert recommended() == 2  # no backlog known yet: the members
    # A backlog of 5,000 per partition asks for a pod per partition, not the 2 members.
    assert recommended() == len(hubs.ids)
    # docs/operations.md: once a backlog was read, Event Hubs failing keeps that figure, not
    # the member count (an autoscaler would scale in during an outage).
    hubs.failure = errors.EventHubUnreachable("the namespace does not answer")
    for now in (130, 200):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    assert recommended() == len(hubs.ids)


async def test_events_the_hub_no_longer_holds_are_no_backlog() -> None:
    """A checkpoint of "nothing processed" (an ``earliest`` seed, or none) on a partition
    whose old events retention removed: only the events the hub still holds wait. Counting
    from sequence number 0 asked for every partition's pod for ten events, and for ever
    once a partition's events had all expired (its pod receives nothing, so never
    checkpoints)."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.store.blobs = {p: (1, -1) for p in hubs.ids}  # nothing processed on any partition
    hubs.last_sequences = {"0": 4_999, "1": 4_999, "2": 4_999, "3": -1}
    # Partition 0 holds its last 10 events; 1 and 2 hold none any more; 3 never had one.
    hubs.first_sequences = {"0": 4_990, "1": 5_000, "2": 5_000}
    registry = metrics.Metrics()
    memory = memories.Memory()
    for now in (0, 5, 65):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    sample = registry.registry.get_sample_value(
        "ehb_recommended_replicas", {"namespace": NS, "consumer": NAME}
    )
    assert sample == 1


async def test_a_store_outage_holds_the_figure_when_weighting_by_lag() -> None:
    """docs/operations.md: while the checkpoint store cannot be read, the figure is the last
    one read. Weighting by lag plans on from the last checkpoints it read, but the hub's end
    grows past those: taken for a backlog, it asked an autoscaler for every partition's pod
    in the outage (each new pod a hand-off whose final checkpoint cannot be written)."""
    kube = make_kube()
    kube.add_consumer(NS, NAME, {**test_cycles.SPEC, "balancing": {"weighting": "lag"}})
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.last_sequences = dict.fromkeys(hubs.ids, 99)
    registry = metrics.Metrics()
    memory = memories.Memory()

    def recommended() -> float | None:
        return registry.registry.get_sample_value(
            "ehb_recommended_replicas", {"namespace": NS, "consumer": NAME}
        )

    now = 0.0
    for _ in range(4):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
        for pod in ("a", "b"):
            kube.acknowledge(NS, pod)
        hubs.store.blobs = {p: (1, 99) for p in hubs.ids}  # the pods keep up
        now += 10
    assert recommended() == 1
    hubs.store.failure = errors.CheckpointStoreUnreachable("the storage account does not answer")
    for i in range(1, 13):
        hubs.last_sequences = dict.fromkeys(hubs.ids, 99 + i * 1000)
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
        assert recommended() == 1, f"{now}: the figure moved in the store's outage"
        now += 10
    # The store answers again: the backlog it shows is the figure once it is read.
    hubs.store.failure = None
    reads = len(hubs.store.reads)
    while len(hubs.store.reads) == reads and now < 1000:
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
        now += 10
    assert recommended() == len(hubs.ids)


def asking_hubs(monkeypatch: pytest.MonkeyPatch) -> tuple[fakes.FakeHubs, list[list[str]]]:
    """Fake hubs, and the partitions of every read of their ends, in order."""
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    asked: list[list[str]] = []
    original = hubs.last_sequence_numbers

    async def last_sequence_numbers(**kw: Any) -> dict[str, startpositions.PartitionBounds]:
        asked.append(kw["partitions"])
        return await original(**kw)

    monkeypatch.setattr(hubs, "last_sequence_numbers", last_sequence_numbers)
    return hubs, asked


async def test_a_cycle_that_gives_partitions_out_does_not_read_the_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hub's end costs a call per partition: read beside a later probe in a quiet cycle,
    never by a cycle that moves partitions."""
    kube = make_kube()
    hubs, asked = asking_hubs(monkeypatch)
    memory = memories.Memory()
    for now in (0, 5, 65, 70):
        await test_cycles.cycle(kube, hubs, memory, now=now)
        if now == 0:
            kube.remove_pod(NS, "a")
        if now == 65:
            assert len(asked) == 1  # the quiet probe at 65
    assert set(kube.assignment(NS)["b"]) == {"0", "1", "2", "3"}  # a's went to b at 5
    assert len(hubs.store.reads) == 3  # the blobs read at 0, for the move at 5, and at 65...
    assert len(asked) == 1  # ...and the hub's end only beside the probe at 65


def test_partition_counts_touch_only_the_pods_whose_count_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = metrics.Metrics()
    pods = {f"p-{i}": 2 for i in range(50)}
    registry.set_partitions(namespace=NS, consumer=NAME, per_pod=pods)
    touched: list[str] = []
    labels = registry.partitions.labels

    def counted(*values: str) -> Any:
        touched.append(values[-1])
        return labels(*values)

    monkeypatch.setattr(registry.partitions, "labels", counted)
    moved = {**pods, "p-1": 3, "p-2": 1, "new": 1}
    del moved["p-3"]
    registry.set_partitions(namespace=NS, consumer=NAME, per_pod=moved)
    assert sorted(touched) == ["new", "p-1", "p-2"]
    text = registry.exposition().decode()
    owned = {
        line.split('pod="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("ehb_partitions{")
    }
    assert owned == {pod: float(count) for pod, count in moved.items()}


async def test_backlog_probes_share_the_operators_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hub's ends cost a request (and a connection) per partition, so the probes of every
    consumer draw on one budget (`backlogs.Budget`): a probe that finds it spent is skipped
    and tried again at the consumer's next probe, once the budget has refilled."""
    kube = make_kube()
    hubs, asked = asking_hubs(monkeypatch)
    clock = [0.0]
    budget = backlogs.Budget(per_second=0.01, clock=lambda: clock[0])  # a 0.1-partition bucket
    budget.take(1, tenant=NS)  # another consumer's probe (of the namespace) spent it
    memory = memories.Memory()
    for now in (0, 65, 130, 195):
        clock[0] = now
        await cycles.run_cycle(
            kube=kube,
            hubs=hubs,
            namespace=NS,
            name=NAME,
            memory=memory,
            now=at(now),
            backlog=budget,
        )
        if now == 65:
            assert asked == []  # due, but the budget is spent
    # Refilled (a hub larger than the bucket reads once it is full): read at the probe after.
    assert asked == [list(hubs.ids)]
    assert budget.skipped >= 1


def test_a_budget_refills_at_its_rate_and_lets_a_large_hub_read_when_full() -> None:
    clock = [0.0]
    budget = backlogs.Budget(per_second=2.0, clock=lambda: clock[0])  # 20 in the bucket
    assert budget.take(15)
    assert not budget.take(8)  # 5 left
    clock[0] = 1.5  # +3
    assert budget.take(8)
    assert not budget.take(1)
    clock[0] = 100.0  # full again: 20
    assert budget.take(1024)  # larger than the bucket: it reads, and the bucket owes
    clock[0] = 600.0
    assert not budget.take(1)  # 20 - 1024 + 1000 < 1
    clock[0] = 700.0
    assert budget.take(1)  # refilled, to the bucket's 20 at most


def test_the_operator_says_which_release_and_python_it_runs() -> None:
    import platform

    import eventhub_balancer

    text = metrics.Metrics().exposition().decode()
    assert (
        f'ehb_build_info{{python="{platform.python_version()}",'
        f'version="{eventhub_balancer.__version__}"}} 1.0'
    ) in text.splitlines()


def ready_series(registry: metrics.Metrics) -> list[str]:
    return [
        line
        for line in registry.exposition().decode().splitlines()
        if line.startswith("ehb_ready{")
    ]


async def test_ready_is_exported_under_its_reason_one_series_a_consumer() -> None:
    """``ehb_ready`` follows the Ready condition, reason and all, whatever path decided it (a
    plan, an invalid spec), and goes with its consumer."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry = metrics.Metrics()
    memory = memories.Memory()

    async def cycle(now: float) -> None:
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)

    await cycle(0)
    assert ready_series(registry) == [
        'ehb_ready{consumer="orders",namespace="shop",reason="AllPartitionsOwned"} 1.0'
    ]
    await cycle(5)  # steady: the same series
    assert len(ready_series(registry)) == 1
    kube.set_spec(NS, NAME, {"eventHub": {"name": "orders"}})  # invalid: no credentials
    await cycle(10)
    assert ready_series(registry) == [
        'ehb_ready{consumer="orders",namespace="shop",reason="InvalidSpec"} 0.0'
    ]
    registry.forget(namespace=NS, consumer=NAME)
    assert ready_series(registry) == []


def store_series(registry: metrics.Metrics) -> dict[str, str]:
    """ehb_checkpoint_store_reachable of shop/orders: reason -> value."""
    prefix = 'ehb_checkpoint_store_reachable{consumer="orders",namespace="shop",reason="'
    found = {}
    for line in registry.exposition().decode().splitlines():
        if line.startswith(prefix):
            reason, value = line.removeprefix(prefix).split('"} ')
            found[reason] = value
    return found


async def test_deleted_checkpoint_blobs_reach_prometheus_while_the_pods_stay_ready() -> None:
    """CheckpointsLost (like ForeignProcessorRunning) leaves Ready True: without the store's
    own gauge, every series the operator exports looks healthy and no alert can fire."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry = metrics.Metrics()
    memory = await test_lost_checkpoints.steady(kube, hubs)
    await test_cycles.cycle(kube, hubs, memory, now=65, registry=registry)
    assert store_series(registry) == {"CheckpointsListed": "1.0"}
    hubs.store.blobs.clear()  # the container deleted and created again, empty
    for now in range(130, 400, 30):  # the probe finds them gone; the later cycles stand
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    assert kube.condition(NS, NAME, "Ready")["status"] == "True"
    assert store_series(registry) == {"CheckpointsLost": "0.0"}
    for partition in "0123":  # the owners checkpoint again
        hubs.store.fence(partition, 1, sequence_number=50)
    for now in range(400, 470, 30):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    assert store_series(registry) == {"CheckpointsListed": "1.0"}  # one series, not two
    # An operator restarted while they are lost says so from the status it reads.
    hubs.store.blobs.clear()
    await test_cycles.cycle(kube, hubs, memory, now=530, registry=registry)
    restarted = metrics.Metrics()
    await test_cycles.cycle(kube, hubs, memories.Memory(), now=540, registry=restarted)
    assert store_series(restarted) == {"CheckpointsLost": "0.0"}
    restarted.forget(namespace=NS, consumer=NAME)
    assert store_series(restarted) == {}
