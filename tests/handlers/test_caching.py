"""The operator's view of the cluster (`handlers.cache`): stale reads are harmless.

Each test drives one or two operator replicas (`watches.Replica`) over the fake API, with the
watch delivered when the test says, and checks the safety invariants over the API server's
own record of every write (`ledgers`): no (partition, epoch) is given to two pods, and
``status.epochs`` never goes down. The first four tests are the failures found at the seams
of the cache this one replaced.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers.cache import rosters, serving, shelves, tracking
from tests.handlers import test_cycles
from tests.support import fakes, ledgers, watches
from tests.support.clocks import Clock

NS, NAME = test_cycles.NS, test_cycles.NAME
at = test_cycles.at


@pytest.fixture
def kube() -> fakes.FakeKube:
    return test_cycles.make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def replica(kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock) -> watches.Replica:
    return watches.Replica(kube, hubs, clock=clock)


def assert_safe(kube: fakes.FakeKube) -> None:
    ledgers.assert_safe(kube.history)


def owners(kube: fakes.FakeKube) -> dict[str, str]:
    """partition -> the pod that owns it (revoking ones excluded)."""
    return {
        p: pod
        for pod, held in kube.assignment(NS).items()
        for p, (_epoch, state) in held.items()
        if state == "owned"
    }


async def settle(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock, *, start: float, rounds: int = 8
) -> float:
    """Cycles with the watch in step and every pod acknowledging, until nothing is written."""
    t = start
    for _ in range(rounds):
        replica.watch.deliver()
        result = await replica.cycle(NS, NAME, now=at(t))
        for pod in list(kube.assignment(NS)):
            if ("pod", NS, pod) in kube.objects:
                kube.acknowledge(NS, pod)
        t += 1
        clock.now = t
        if result is not None and result.writes == 0:
            break
    return t


async def test_a_watch_lagging_past_a_minute_never_hands_an_epoch_out_twice(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """Scenario 1: the CR and ConfigMap watches lag for minutes while writes succeed. No
    older body of the index ever replaces the operator's own write, and the status patch
    carries the CR's resourceVersion: epochs never go down nor are handed out twice."""
    t = await settle(replica, kube, clock, start=0)
    for step, pod in enumerate(("c", "d", "e")):
        kube.add_pod(NS, pod, labels={"app": "c"}, since=at(t))
        for _ in range(12):  # a minute of 5 s cycles, the CR and ConfigMap watches behind
            replica.watch.deliver("pod")
            replica.watch.deliver("consumer", "configmap", count=1)
            await replica.cycle(NS, NAME, now=at(t))
            for held in list(kube.assignment(NS)):
                if ("pod", NS, held) in kube.objects:
                    kube.acknowledge(NS, held)
            t += 5
            clock.now = t
        if step == 1:
            kube.remove_pod(NS, "c")
    assert_safe(kube)
    t = await settle(replica, kube, clock, start=t)
    assert set(owners(kube).values()) == {"a", "b", "d", "e"}
    assert_safe(kube)


async def test_a_configmap_deleted_and_recreated_under_its_name_is_written_again(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """Scenario 2: the echo of a ConfigMap write and the ConfigMap's deletion (its pod was
    deleted) are both delivered before the next read; the pod comes back under its name.
    The deleted ConfigMap is never served again: the next cycles create it anew."""
    t = await settle(replica, kube, clock, start=0)
    kube.remove_pod(NS, "b")
    replica.watch.deliver()
    kube.add_pod(NS, "b", labels={"app": "c"}, since=at(t))
    replica.failures.clear()
    t = await settle(replica, kube, clock, start=t)
    assert replica.failures == []
    cm = kube.configmap_of(NS, "b")
    pod_uid = kube.objects["pod", NS, "b"]["metadata"]["uid"]
    assert pod_uid in cm["metadata"]["annotations"].values()
    assert set(owners(kube).values()) == {"a", "b"}
    assert_safe(kube)


async def test_a_deletion_the_watch_never_delivered_costs_one_fresh_read(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """The same without the DELETED event: the patch of the ConfigMap gone answers 404,
    and the consumer is read afresh instead of failing every cycle from then on."""
    t = await settle(replica, kube, clock, start=0)
    kube.remove_pod(NS, "b")
    replica.watch.skip("configmap")  # its deletion is never delivered
    kube.add_pod(NS, "b", labels={"app": "c"}, since=at(t))
    t = await settle(replica, kube, clock, start=t)
    assert len(replica.failures) <= 1
    assert set(owners(kube).values()) == {"a", "b"}
    assert_safe(kube)


async def test_a_relist_hides_only_what_is_no_newer_than_its_listing(
    replica: watches.Replica,
    kube: fakes.FakeKube,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario 3: after a re-list, the consumer's fresh listing was answered before pod c
    was created, but c's event arrived before the answer. c is newer than the listing: it
    stays. Pod b, deleted while the watch was down, is older: it goes. One LIST, of pods."""
    t = await settle(replica, kube, clock, start=0)
    kube.remove_pod(NS, "b")
    replica.watch.skip("pod", "configmap")  # b's deletion is lost with the stream
    replica.watch.relist("pod")
    assert replica.cache.watch.relists == {shelves.PODS: 1}  # what the benchmark waits for
    selector = specs.parse_spec(test_cycles.SPEC).selector
    answered = await kube.list_selected_pods(namespace=NS, selector=selector)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    replica.watch.deliver("pod")
    lists: list[str] = []

    async def late(**_: Any) -> listings.Listing:
        lists.append("pods")
        return answered

    monkeypatch.setattr(kube, "list_selected_pods", late)
    await replica.cycle(NS, NAME, now=at(t))
    assert lists == ["pods"]
    roster = replica.cache.following.roster(namespace=NS, name=NAME)
    assert roster is not None
    assert roster.holds(shelves.PODS, "c")
    assert not roster.holds(shelves.PODS, "b")
    monkeypatch.undo()
    await settle(replica, kube, clock, start=t + 1)
    assert lists == ["pods"]  # read afresh once
    assert set(owners(kube).values()) == {"a", "c"}
    assert_safe(kube)


async def test_a_pod_relabelled_away_mid_cycle_leaves_its_consumer_at_once(
    replica: watches.Replica,
    kube: fakes.FakeKube,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario 4: pod c joins while a cycle runs and is relabelled away before that cycle
    ends. The relabel event removes c from the roster whenever it comes, so c is given
    nothing, whether the cycle that saw it succeeded or failed."""
    t = await settle(replica, kube, clock, start=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    replica.watch.deliver("pod")
    real = kube.create_configmap

    async def relabel_meanwhile(**kwargs: Any) -> dict[str, Any]:
        pod = kube.objects["pod", NS, "c"]
        pod["metadata"]["labels"] = {"app": "moved"}
        kube._store("pod", NS, pod)
        replica.watch.deliver("pod")
        return await real(**kwargs)

    monkeypatch.setattr(kube, "create_configmap", relabel_meanwhile)
    await replica.cycle(NS, NAME, now=at(t))
    monkeypatch.undo()
    roster = replica.cache.following.roster(namespace=NS, name=NAME)
    assert roster is not None
    assert not roster.holds(shelves.PODS, "c")
    await settle(replica, kube, clock, start=t + 1)
    assert "c" not in set(owners(kube).values())
    assert_safe(kube)


async def test_a_write_the_watch_does_not_echo_in_time_reads_that_kind_afresh(
    replica: watches.Replica,
    kube: fakes.FakeKube,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = await settle(replica, kube, clock, start=0)
    reads = replica.cache.view.reads
    await replica.cycle(NS, NAME, now=at(t))
    assert replica.cache.view.reads == reads  # a steady cycle reads nothing
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    replica.watch.deliver("pod")
    await replica.cycle(NS, NAME, now=at(t))  # writes the status and ConfigMaps
    reads = replica.cache.view.reads
    clock.now += rosters.ECHO_SECONDS + 1  # the CR and ConfigMap watches stay silent
    with caplog.at_level(logging.WARNING, logger=tracking.__name__):
        await replica.cycle(NS, NAME, now=at(t + 6))
    assert replica.cache.view.reads - reads == 3  # the CR, its ConfigMaps and its pods, once
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "the watch of configmaps did not deliver the operator's own writes within 5 s",
        "the watch of consumer did not deliver the operator's own writes within 5 s",
    ]
    reads = replica.cache.view.reads
    await replica.cycle(NS, NAME, now=at(t + 7))
    assert replica.cache.view.reads == reads  # not again until another bound has passed
    assert_safe(kube)


async def test_a_status_write_from_a_stale_read_is_refused_and_read_afresh(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """Another writer (a second replica) moved the CR on; this replica's roster does not
    know it yet. Its status patch carries the version it read: 409, a fresh read, and the
    next cycle decides over what the other one wrote."""
    t = await settle(replica, kube, clock, start=0)
    body = kube.objects["consumer", NS, NAME]
    kube._store("consumer", NS, body)  # e.g. kopf's own annotation patch: a new version
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    replica.watch.deliver("pod")
    replica.failures.clear()
    assert await replica.cycle(NS, NAME, now=at(t)) is None
    assert isinstance(replica.failures[0], errors.Conflict)
    await settle(replica, kube, clock, start=t + 1)
    assert set(owners(kube).values()) == {"a", "b", "c"}
    assert_safe(kube)


async def test_two_replicas_active_at_once_never_hand_an_epoch_out_twice(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock
) -> None:
    """kopf's peering is no strict leader election: two replicas may both run cycles. The
    preconditions make the one that read stale lose its write, whatever its watch says."""
    one = watches.Replica(kube, hubs, clock=clock)
    two = watches.Replica(kube, hubs, clock=clock)
    t = 0.0
    for step in range(30):
        if step == 3:
            kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
        if step == 12:
            kube.remove_pod(NS, "a")
        if step == 18:
            kube.add_pod(NS, "d", labels={"app": "c"}, since=at(t))
        one.watch.deliver()
        two.watch.deliver(count=1)  # the second replica's watch lags: one change per step
        await one.cycle(NS, NAME, now=at(t))
        await two.cycle(NS, NAME, now=at(t))
        for pod in list(kube.assignment(NS)):
            if ("pod", NS, pod) in kube.objects:
                kube.acknowledge(NS, pod)
        t += 2
        clock.now = t
    assert_safe(kube)
    assert two.failures  # the lagging replica did lose writes
    t = await settle(one, kube, clock, start=t)
    assert set(owners(kube).values()) == {"b", "c", "d"}
    assert_safe(kube)


async def test_without_a_roster_every_read_goes_to_the_api(kube: fakes.FakeKube) -> None:
    cache = serving.CachedKube(kube)
    assert (await cache.get_consumer(namespace=NS, name=NAME))["metadata"]["name"] == NAME
    selector = specs.parse_spec(test_cycles.SPEC).selector
    assert {
        p["metadata"]["name"] for p in await cache.select_pods(namespace=NS, selector=selector)
    } == {"a", "b"}
    assert cache.reads == 2
    assert cache.stamp(namespace=NS, name=NAME) is None


async def test_a_secret_is_kept_until_rejected_or_old(kube: fakes.FakeKube, clock: Clock) -> None:
    cache = serving.CachedKube(kube, clock=clock)
    assert await cache.read_secret_key(namespace=NS, name="eh", key="cs")
    kube.add_secret(NS, "eh", {"cs": "Endpoint=sb://rotated/;SharedAccessKey=y"})
    assert "rotated" not in await cache.read_secret_key(namespace=NS, name="eh", key="cs")
    cache.forget_secret(namespace=NS, name="eh")
    assert "rotated" in await cache.read_secret_key(namespace=NS, name="eh", key="cs")
    kube.add_secret(NS, "eh", {"cs": "Endpoint=sb://again/;SharedAccessKey=z"})
    clock.now += serving.REFRESH_SECONDS + 1
    assert "again" in await cache.read_secret_key(namespace=NS, name="eh", key="cs")


async def test_a_pod_relabelled_away_is_said_to_no_longer_match_not_to_be_gone(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """A pod taken out of the selector by a relabel (to debug it, say) runs on: the Events
    said its partitions were taken over from a ``gone`` pod, the word the docs keep for a pod
    that no longer exists. A pod deleted is still ``gone``."""
    t = await settle(replica, kube, clock, start=0)
    held = {p for p, pod in owners(kube).items() if pod == "b"}
    assert held
    pod = kube.objects["pod", NS, "b"]
    pod["metadata"]["labels"] = {"app": "debugging"}
    kube._store("pod", NS, pod)
    t = await settle(replica, kube, clock, start=t)
    assert set(owners(kube).values()) == {"a"}
    (taken,) = [e["message"] for e in kube.events if e["reason"] == "PartitionTakenOver"]
    assert " of b (no longer matches spec.selector) for a " in taken
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(t))
    t = await settle(replica, kube, clock, start=t)
    kube.remove_pod(NS, "a")  # deleted, never released
    kube.remove_pod(NS, "b")
    await settle(replica, kube, clock, start=t)
    taken_from_a = [
        e["message"]
        for e in kube.events
        if e["reason"] == "PartitionTakenOver" and " of a " in e["message"]
    ]
    assert taken_from_a
    assert all(" of a (gone) for c " in m for m in taken_from_a)
    assert_safe(kube)
