"""A pod's ConfigMap deleted while the operator's watch was away (a 410 re-list, a replica
paused for its peer): kopf keeps it in its index (a re-list sends no DELETED), and its listing
events alone do not tell a re-list from the first listing. A pod without its ConfigMap runs
no partition (`consumer.assignments.ConfigMapSource` yields an empty assignment), so a roster
that went on holding the ConfigMap left the pod's partitions unserved for good: a steady
cycle writes nothing.

`watches.Watch.relist` plays kopf's listing as its handlers see it: one event of type None per
object, none for an empty listing, and nothing at its end.
"""

from __future__ import annotations

import pytest

from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import configmaps
from tests.handlers import test_caching, test_cycles
from tests.handlers.test_caching import NAME, NS, Clock, at, owners, settle
from tests.support import fakes, watches

PARTITIONS = {"0", "1", "2", "3"}


@pytest.fixture
def kube() -> fakes.FakeKube:
    return test_cycles.make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


@pytest.fixture
def clock() -> Clock:
    return Clock()


def delete_configmap(kube: fakes.FakeKube, pod: str) -> None:
    """Someone deletes a live pod's ConfigMap (``kubectl delete configmap``)."""
    name = kube.configmap_of(NS, pod)["metadata"]["name"]
    kube._deleted("configmap", kube.objects.pop(("configmap", NS, name)))


def count_configmap_lists(kube: fakes.FakeKube, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The consumers whose ConfigMaps are listed from now on, one entry per LIST."""
    listed: list[str] = []
    real = kube.list_consumer_configmaps

    async def counted(*, namespace: str, consumer: str) -> listings.Listing:
        listed.append(consumer)
        return await real(namespace=namespace, consumer=consumer)

    monkeypatch.setattr(kube, "list_consumer_configmaps", counted)
    return listed


async def test_a_configmap_deleted_before_a_quiet_watch_lists_again_is_written_again(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock
) -> None:
    """The ConfigMap watch streamed nothing since its first listing; it is answered 410 and
    lists again, with pod b's ConfigMap only: the listing event of a name already listed is
    what tells the re-list."""
    first = watches.Replica(kube, hubs, clock=clock)
    t = await settle(first, kube, clock, start=0)
    replica = watches.Replica(kube, hubs, clock=clock)
    await replica.cycle(NS, NAME, now=at(t))
    delete_configmap(kube, "a")
    replica.watch.skip("configmap")  # its DELETED is lost with the stream
    woken = replica.watch.relist("configmap")
    assert woken == [(NS, NAME)]
    t = await settle(replica, kube, clock, start=t)
    assert set(owners(kube).values()) == {"a", "b"}
    assert set(owners(kube)) == PARTITIONS
    test_caching.assert_safe(kube)


async def test_a_daemon_resumed_after_its_configmaps_went_writes_them_again(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standby that listed everything and paused at once (its daemon stops) resumes after
    both ConfigMaps were deleted: kopf's listing of the ConfigMaps is empty, so no event at
    all comes, and the daemon starts again from kopf's index, which still holds both."""
    first = watches.Replica(kube, hubs, clock=clock)
    t = await settle(first, kube, clock, start=0)
    standby = watches.Replica(kube, hubs, clock=clock)
    await standby.cycle(NS, NAME, now=at(t))
    standby.cache.following.forget(namespace=NS, name=NAME)  # paused: the daemon stops
    standby.memories.clear()
    delete_configmap(kube, "a")
    delete_configmap(kube, "b")
    standby.watch.skip()
    for kind in ("consumer", "pod", "configmap"):  # resumed: kopf lists every kind again
        standby.watch.relist(kind)
    held = standby.watch.indexes["configmaps"][NS, configmaps.label_value(NAME)]
    assert len(held) == 2  # kopf's index still holds both
    listed = count_configmap_lists(kube, monkeypatch)
    t = await settle(standby, kube, clock, start=t)
    assert set(owners(kube).values()) == {"a", "b"}
    assert set(owners(kube)) == PARTITIONS
    test_caching.assert_safe(kube)
    assert listed == [NAME]  # once, for the roster started again
