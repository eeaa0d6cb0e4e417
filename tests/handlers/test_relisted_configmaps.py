"""A pod's ConfigMap deleted while the operator's watch was away (a 410 re-list, a replica
paused for its peer): kopf keeps it in its index (a re-list sends no DELETED), and its listing
events alone do not tell a re-list from the first listing. A pod without its ConfigMap runs
no partition (`consumer.assignments.ConfigMapSource` yields an empty assignment), so a roster
that went on holding the ConfigMap left the pod's partitions unserved for good: a steady
cycle writes nothing.

`watches.Watch.relist` plays kopf's listing as its handlers see it: one event of type None per
object, none for an empty listing, and nothing at its end. So an operator that stays active
through a re-list that lists no ConfigMap at all is told nothing: the managed ConfigMaps of
each namespace are listed afresh every `relisting.CONFIGMAP_RELIST_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers.cache import relisting, shelves
from tests.handlers import test_caching, test_cycles, test_daemons
from tests.handlers.test_caching import NAME, NS, Clock, at, owners, settle
from tests.support import fakes, watches

PARTITIONS = {"0", "1", "2", "3"}

running = test_daemons.running


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


@pytest.mark.looptime
async def test_configmaps_all_deleted_during_a_watch_gap_are_written_again_within_a_minute(
    running: Callable[..., test_daemons.Daemon],
) -> None:
    """The operator stays active; while its ConfigMap watch is away, both pods' ConfigMaps
    are deleted, and the watch is answered 410 and lists again: nothing to list, so no event at
    all, and kopf's index still holds both. The daemon runs on (its interval is 100 s) and
    nothing it writes or reads tells: the ConfigMaps listed afresh do, within
    `relisting.CONFIGMAP_RELIST_SECONDS` and a cycle."""
    daemon = running("a", "b")
    await daemon.until(1)
    daemon.deliver()
    await daemon.until(5)
    assert set(owners(daemon.kube)) == PARTITIONS
    for pod in ("a", "b"):
        delete_configmap(daemon.kube, pod)
    daemon.watch.skip("configmap")  # the DELETED events are lost with the stream
    daemon.watch.relist("configmap")  # an empty listing: no event
    deleted = test_daemons.loop_time()
    listed = daemon.operator.cache.relisting.listings
    await daemon.until(deleted + relisting.CONFIGMAP_RELIST_SECONDS + 2)
    assert set(owners(daemon.kube).values()) == {"a", "b"}
    assert set(owners(daemon.kube)) == PARTITIONS
    test_caching.assert_safe(daemon.kube)
    # Its cost: beside the pods' LIST every 10 s, one LIST of the namespace's ConfigMaps.
    assert daemon.operator.cache.relisting.configmap_listings == 1
    assert daemon.operator.cache.relisting.listings - listed == 6 + 1


class GatedKube(fakes.FakeKube):
    """The in-memory API; the relisting's LIST of ConfigMaps answers what the API server had
    when it was asked, once the test lets it go (``gate``), after ``meanwhile`` ran."""

    def __init__(self) -> None:
        super().__init__()
        for key, body in test_cycles.make_kube().objects.items():
            self.objects[key] = body
        self.meanwhile: Callable[[], Awaitable[None]] | None = None

    async def list_managed_configmaps(self, *, namespace: str) -> listings.Listing:
        listing = await super().list_managed_configmaps(namespace=namespace)
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return listing


async def relist_configmaps_across(
    replica: watches.Replica, meanwhile: Callable[[], Awaitable[None]]
) -> list[tuple[str, str]]:
    """Relisting turns up to the one that lists the ConfigMaps, ``meanwhile`` run while its
    LIST is on its way; the consumers woken."""
    kube = replica.watch.kube
    assert isinstance(kube, GatedKube)
    woken: list[tuple[str, str]] = []
    for _ in range(round(relisting.CONFIGMAP_RELIST_SECONDS / relisting.RELIST_SECONDS)):
        kube.meanwhile = meanwhile
        woken += await replica.cache.relisting.relist()
    assert kube.meanwhile is None, "no turn listed the ConfigMaps"
    return woken


def held_configmaps(replica: watches.Replica) -> set[str]:
    roster = replica.cache.following.roster(namespace=NS, name=NAME)
    assert roster is not None
    return {b["metadata"]["name"] for b in roster.items(shelves.CONFIGMAPS)}


@pytest.mark.parametrize("by", ["someone", "operator", "operator-watched"])
async def test_a_configmap_deleted_while_its_listing_is_in_flight_stays_deleted(
    hubs: fakes.FakeHubs, clock: Clock, by: str
) -> None:
    """The relisting's LIST of ConfigMaps is answered with b's ConfigMap; before the answer
    arrives, it is deleted, by someone else (the watch shows its DELETED) or by the operator
    itself (its version unknown; "operator-watched": and the watch delivers that deletion, after
    which the uid is no longer remembered): the older answer must not bring it back."""
    kube = GatedKube()
    replica = watches.Replica(kube, hubs, clock=clock)
    t = await settle(replica, kube, clock, start=0)
    gone = kube.configmap_of(NS, "b")["metadata"]

    async def delete() -> None:
        if by == "someone":
            delete_configmap(kube, "b")
            replica.watch.deliver("configmap")
        else:
            await replica.cache.view.delete_configmap(
                namespace=NS, name=gone["name"], uid=gone["uid"]
            )
            if by == "operator-watched":
                replica.watch.deliver("configmap")
                roster = replica.cache.following.roster(namespace=NS, name=NAME)
                assert roster is not None
                assert gone["name"] not in roster.shelves[shelves.CONFIGMAPS].deleted_uids

    assert gone["name"] in held_configmaps(replica)
    await relist_configmaps_across(replica, delete)
    assert gone["name"] not in held_configmaps(replica)
    assert replica.cache.relisting.configmap_listings == 1
    # And the next cycle writes b's ConfigMap again.
    await settle(replica, kube, clock, start=t)
    assert set(owners(kube).values()) == {"a", "b"}
    test_caching.assert_safe(kube)
