"""Self-healing: no mistake of the cache strands a partition or gives it to two owners.

Each test replays one failure found at the seams of the cache (issue 38's six), on the fake
API server (`fakes.FakeKube`) with the watch delivered when the test says
(`watches.Replica`), and checks the outcome over the API server's own record of writes
(`ledgers`) as well as the assignment the pods read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eventhub_balancer.adapters import listings
from eventhub_balancer.handlers import memories
from eventhub_balancer.handlers.cache import shelves
from tests.handlers import test_caching, test_cycles, test_daemons
from tests.support import fakes, ledgers, watches

NS, NAME = test_cycles.NS, test_cycles.NAME
at = test_cycles.at
Clock = test_caching.Clock
settle = test_caching.settle
owners = test_caching.owners


@pytest.fixture
def kube() -> fakes.FakeKube:
    return test_cycles.make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


@pytest.fixture
def clock() -> Clock:
    return Clock()


#: Daemons over the fakes on fake time (the fixture of `test_daemons`).
running = test_daemons.running


@pytest.fixture
def replica(kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock) -> watches.Replica:
    return watches.Replica(kube, hubs, clock=clock)


def existing(kube: fakes.FakeKube) -> set[str]:
    return {name for (kind, ns, name) in kube.objects if kind == "pod" and ns == NS}


def assigned(kube: fakes.FakeKube) -> set[str]:
    """The pods the ConfigMaps give a partition, in any state."""
    return {pod for pod, held in kube.assignment(NS).items() if held}


async def test_a_pod_deleted_while_its_pods_are_read_afresh_does_not_come_back(
    replica: watches.Replica,
    kube: fakes.FakeKube,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Failure 1: the pods' LIST is answered with b in it; b's deletion reaches the watch
    while that answer is on its way. The deletion is remembered until the answer is in, so
    the older listing does not bring b back, and b's partitions go to a pod that exists."""
    t = await settle(replica, kube, clock, start=0)
    replica.cache.following.refresh(namespace=NS, name=NAME)  # e.g. after a 409
    real = kube.list_selected_pods

    async def deleted_meanwhile(**kwargs: Any) -> listings.Listing:
        answered = await real(**kwargs)
        kube.remove_pod(NS, "b")
        replica.watch.deliver()
        return answered

    monkeypatch.setattr(kube, "list_selected_pods", deleted_meanwhile)
    await replica.cycle(NS, NAME, now=at(t))
    monkeypatch.undo()
    for _ in range(5):
        t = await settle(replica, kube, clock, start=t + 600)
    roster = replica.cache.following.roster(namespace=NS, name=NAME)
    assert roster is not None
    assert not roster.holds(shelves.PODS, "b")
    assert assigned(kube) <= existing(kube)
    assert set(owners(kube).values()) == {"a"}
    ledgers.assert_safe(kube.history)


def epochs_of(kube: fakes.FakeKube, pod: str) -> dict[str, int]:
    return {p: epoch for p, (epoch, _state) in kube.assignment(NS).get(pod, {}).items()}


async def test_a_replica_whose_pod_watch_lags_leaves_a_pod_it_does_not_know_alone(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock
) -> None:
    """Failure 2: replica one gives pod c partitions; replica two's pod watch has not shown
    c yet, while its watches of the CR and the ConfigMaps are in step. A recorded owner it
    does not know is not taken for gone: it reads the pods afresh, finds c, and neither
    takes c's partitions nor deletes c's ConfigMap."""
    one = watches.Replica(kube, hubs, clock=clock)
    two = watches.Replica(kube, hubs, clock=clock)
    t = await settle(one, kube, clock, start=0)
    two.watch.deliver()
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    t = await settle(one, kube, clock, start=t)
    held = epochs_of(kube, "c")
    assert held
    map_name = kube.configmap_of(NS, "c")["metadata"]["name"]
    two.watch.deliver("consumer", "configmap")  # its pod watch lags: c is not delivered
    for _ in range(3):
        await two.cycle(NS, NAME, now=at(t))
        two.watch.deliver("consumer", "configmap")
        t += 1
        clock.now = t
    assert ("delete", "configmap", map_name) not in kube.calls
    assert epochs_of(kube, "c") == held
    ledgers.assert_safe(kube.history)


async def test_a_replica_whose_cr_watch_lags_writes_nothing_from_its_stale_record(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock
) -> None:
    """Failure 3: replica one hands a partition to pod c; replica two's CR watch still shows
    the record from before, its pod and ConfigMap watches are in step. Two's decision is
    taken from a stale record: its status write is refused (409), and nothing of that
    decision reaches a ConfigMap before it: c keeps its partition, and no false
    AssignmentTampered is posted."""
    one = watches.Replica(kube, hubs, clock=clock)
    two = watches.Replica(kube, hubs, clock=clock)
    t = await settle(one, kube, clock, start=0)
    two.watch.deliver()
    await two.cycle(NS, NAME, now=at(t))
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    t = await settle(one, kube, clock, start=t)
    held = epochs_of(kube, "c")
    assert held
    events = len(kube.events)
    two.watch.deliver("pod", "configmap")  # its CR watch lags: the old record
    writes = len(kube.calls)
    await two.cycle(NS, NAME, now=at(t))
    assert [call for call in kube.calls[writes:] if call[1] != "status"] == []
    assert epochs_of(kube, "c") == held
    assert [e["reason"] for e in kube.events[events:]] == []
    ledgers.assert_safe(kube.history)


@pytest.mark.looptime
async def test_an_acknowledgement_in_a_writes_answer_wakes_the_next_cycle(
    running: Callable[..., test_daemons.Daemon],
) -> None:
    """Failure 4: pod b acknowledges a revocation; before the watch shows it, the operator
    writes b's ConfigMap again (d joined), and that write's answer carries the
    acknowledgement. The watch's own event of it is then older than what the roster holds,
    and changes nothing: the answer itself wakes the cycle that gives the partition out, not
    the hand-off timeout."""
    daemon = running("a", "b")
    daemon.hubs.ids = tuple(str(p) for p in range(8))
    await daemon.until(1)
    daemon.deliver()
    daemon.kube.add_pod(NS, "c", labels={"app": "c"}, since=test_daemons.clock())
    daemon.deliver()
    await daemon.until(2)
    asked = [p for p, (_e, state) in daemon.owned("b").items() if state == "revoking"]
    assert len(asked) == 1
    daemon.kube.acknowledge(NS, "b")
    daemon.kube.add_pod(NS, "d", labels={"app": "c"}, since=test_daemons.clock())
    daemon.deliver("pod")  # the acknowledgement is not delivered yet
    await daemon.until(3)
    daemon.deliver()
    await daemon.until(5)
    assert daemon.owned("c").get(asked[0], (0, ""))[1] == "owned"


async def test_a_short_partition_listing_forgets_no_epoch(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    """Failure 5: with no pod left, every partition is unowned at its epoch. One listing
    from Event Hubs lacks partition 3 (a fault: a hub's partition count never shrinks); its
    epoch stays in the status, so when 3 is listed again its next owner gets a new epoch,
    not the one its last owner had."""
    memory = memories.Memory()
    await test_cycles.cycle(kube, hubs, memory, now=0)
    assert kube.status(NS, NAME)["epochs"]["3"] == 1
    kube.remove_pod(NS, "a")
    kube.remove_pod(NS, "b")
    await test_cycles.cycle(kube, hubs, memory, now=1)
    hubs.ids = ("0", "1", "2")
    await test_cycles.cycle(kube, hubs, memory, now=2)
    assert kube.status(NS, NAME)["epochs"]["3"] == 1
    hubs.ids = ("0", "1", "2", "3")
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(3))
    await test_cycles.cycle(kube, hubs, memory, now=3)
    assert kube.assignment(NS)["c"]["3"] == (2, "owned")
    ledgers.assert_safe(kube.history)


@pytest.mark.looptime
async def test_a_pod_deleted_behind_a_late_watch_leaves_within_the_relisting_bound(
    running: Callable[..., test_daemons.Daemon],
) -> None:
    """Failure 6: every watch stream is 65 s late (here: not delivered at all) when pod b is
    deleted. Nothing the operator writes tells it, and nothing else happens; the pods listed
    afresh every `relisting.RELIST_SECONDS` show b gone, and b's partitions move to a
    within 20 s."""
    daemon = running("a", "b")
    await daemon.until(1)
    daemon.deliver()
    await daemon.until(3)
    assert daemon.owned("b")
    daemon.kube.remove_pod(NS, "b")  # the watch delivers nothing from here on
    deleted = test_daemons.loop_time()
    listed = daemon.operator.cache.relisting.listings
    await daemon.until(deleted + 20)
    assert set(daemon.owned("a")) == {"0", "1", "2", "3"}
    assert all(state == "owned" for _e, state in daemon.owned("a").values())
    # Its cost, as documented: one LIST of the namespace's pods per `RELIST_SECONDS`.
    assert daemon.operator.cache.relisting.listings - listed == 2


async def test_a_pod_that_does_not_apply_its_partitions_is_confirmed_by_a_listing(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """No ghost owner: pod c is deleted while its ConfigMap stays for a moment (the garbage
    collector is behind) and the pod watch has not shown the deletion. A pod given partitions
    that does not say it applied them within `readbacks.ACK_CONFIRM_SECONDS` is confirmed by
    listing the pods afresh: c is found gone, and what was released for it goes to a pod
    that exists."""
    t = await settle(replica, kube, clock, start=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    replica.watch.deliver()
    await replica.cycle(NS, NAME, now=at(t))  # revokes a share for c
    for pod in ("a", "b"):
        kube.acknowledge(NS, pod)
    replica.watch.deliver()
    kube._deleted("pod", kube.objects.pop(("pod", NS, "c")))  # its ConfigMap stays
    for step in range(1, 6):
        replica.watch.deliver("consumer", "configmap")  # the pod watch lags
        await replica.cycle(NS, NAME, now=at(t + step))
    assert not epochs_of(kube, "c")
    assert assigned(kube) <= existing(kube)
    ledgers.assert_safe(kube.history)


async def test_a_pod_whose_configmap_goes_is_confirmed_before_its_configmap_is_written_again(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """Pod b is deleted and the garbage collector takes its ConfigMap (b owns it): the
    ConfigMap watch delivers that at once, the pod watch lags. The ConfigMap's deletion is the
    first sign: the pods are listed afresh before anything is written, b is found gone, and
    its partitions go to a in that very cycle, without b's ConfigMap being written again nor
    waiting for the relisting (`readbacks.unconfirmed`, `observations.Departures.confirmed`)."""
    t = await settle(replica, kube, clock, start=0)
    assert set(owners(kube).values()) == {"a", "b"}
    map_name = kube.configmap_of(NS, "b")["metadata"]["name"]
    kube.calls.clear()
    kube.remove_pod(NS, "b")
    replica.watch.deliver("consumer", "configmap")  # the pod watch lags: b is still there
    await replica.cycle(NS, NAME, now=at(t))
    assert set(owners(kube)) == {"0", "1", "2", "3"}
    assert set(owners(kube).values()) == {"a"}
    assert ("create", "configmap", map_name) not in kube.calls
    assert existing(kube) >= assigned(kube)
    ledgers.assert_safe(kube.history)
