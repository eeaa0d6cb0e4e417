"""`cycles.run_cycle` over the in-memory ports: what it reads, what it writes, in which order."""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, storeaddresses
from eventhub_balancer.handlers import cycles, memories, metrics, writing
from eventhub_balancer.reconciling import deadlines, writes
from tests.support import fakes

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
NS, NAME = "shop", "orders"
SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "c"}},
}


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


@pytest.fixture
def kube() -> fakes.FakeKube:
    return make_kube()


def make_kube() -> fakes.FakeKube:
    """The EventHubConsumer, its Secrets, two matching pods and one that does not match."""
    kube = fakes.FakeKube()
    kube.add_consumer(NS, NAME, SPEC)
    kube.add_secret(
        NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(NS, "blob", {"cs": "UseDevelopmentStorage=true"})
    for name in ("a", "b"):
        kube.add_pod(NS, name, labels={"app": "c"}, since=T0)
    kube.add_pod(NS, "other", labels={"app": "other"}, since=T0)
    return kube


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


async def cycle(
    kube: fakes.FakeKube,
    hubs: fakes.FakeHubs,
    memory: memories.Memory,
    *,
    now: float,
    registry: metrics.Metrics | None = None,
    annotate_pods: bool = False,
) -> cycles.Result:
    return await cycles.run_cycle(
        kube=kube,
        hubs=hubs,
        namespace=NS,
        name=NAME,
        memory=memory,
        now=at(now),
        metrics=registry,
        annotate_pods=annotate_pods,
    )


async def c_joined(kube: fakes.FakeKube, hubs: fakes.FakeHubs) -> memories.Memory:
    """a: 0, 1 and b: 2, 3 at epoch 1; then c joins, and b's 3 is revoked for it."""
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)
    return memory


async def test_writes_go_out_in_the_crash_safe_order_and_a_steady_state_writes_nothing(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    result = await cycle(kube, hubs, memory, now=0, annotate_pods=True)
    kinds = [(verb, kind) for verb, kind, _ in kube.calls]
    assert kinds == [
        ("patch", "status"),  # the epochs and the record, before any ConfigMap uses them
        ("create", "configmap"),  # the ConfigMaps that gain, together with...
        ("create", "configmap"),
        ("create", "event"),  # ...the moves' Events, now that the record holds them
        ("create", "event"),
        ("annotate", "pod"),  # then, together, the pods' annotations
        ("annotate", "pod"),
    ]
    assert result.writes == len(kube.calls) == 7
    assert kube.assignment(NS) == {
        "a": {"0": (1, "owned"), "1": (1, "owned")},
        "b": {"2": (1, "owned"), "3": (1, "owned")},
    }
    assert kube.condition(NS, NAME, "Ready")["reason"] == "AllPartitionsOwned"
    assert len(hubs.store.reads) == 1  # the first decision gave partitions out
    again = await cycle(kube, hubs, memory, now=5, annotate_pods=True)
    assert again.writes == 0
    assert len(kube.calls) == 7


async def test_a_cycle_that_gives_out_and_revokes_asks_for_the_releases_with_the_gains(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # Pods that turn Ready one after another: c's share is revoked and released, then d turns
    # Ready as c's partition is given out. The release d waits for is asked in the same round
    # trip that gives c its partition, not in one after it.
    memory = await c_joined(kube, hubs)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "revoking")}
    kube.acknowledge(NS, "b")
    kube.add_pod(NS, "d", labels={"app": "c"}, since=at(2))
    del kube.calls[:]
    await cycle(kube, hubs, memory, now=2)
    assert kube.assignment(NS) == {
        "a": {"0": (1, "owned"), "1": (1, "revoking")},
        "b": {"2": (1, "owned")},
        "c": {"3": (2, "owned")},
        "d": {},
    }
    cm = {pod: configmaps.configmap_name(consumer=NAME, pod=pod) for pod in "abcd"}
    # One step after the status: nothing here takes away what a pod still runs.
    first_event = next(i for i, (_, kind, _) in enumerate(kube.calls) if kind == "event")
    assert kube.calls[0] == ("patch", "status", NAME)  # the epochs and the record
    assert set(kube.calls[1:first_event]) == {
        ("patch", "configmap", cm["c"]),  # c gains 3
        ("patch", "configmap", cm["a"]),  # a is asked to release 1, for d
        ("patch", "configmap", cm["b"]),  # b drops 3, which it released
        ("create", "configmap", cm["d"]),  # d's empty ConfigMap
    }
    assert all(kind == "event" for _, kind, _ in kube.calls[first_event:])


async def test_a_partition_taken_from_a_pod_that_may_run_it_goes_after_the_gains(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # b is NotReady beyond its grace without releasing 3: c gains 3 first, and only then is
    # 3 taken from b, so that nobody is left without it if the cycle stops in between.
    memory = await c_joined(kube, hubs)
    assert kube.assignment(NS)["b"]["3"] == (1, "revoking")
    kube.set_ready(NS, "b", ready=False, since=at(2))
    del kube.calls[:]
    await cycle(kube, hubs, memory, now=600)
    after = kube.assignment(NS)
    assert after["c"]["3"][1] == "owned"
    assert "3" not in after["b"]
    cm = {pod: configmaps.configmap_name(consumer=NAME, pod=pod) for pod in "abc"}
    maps = [(verb, name) for verb, kind, name in kube.calls if kind == "configmap"]
    assert maps.index(("patch", cm["b"])) > maps.index(("patch", cm["c"]))
    first_event = next(i for i, (_, kind, _) in enumerate(kube.calls) if kind == "event")
    assert ("patch", "configmap", cm["b"]) not in kube.calls[:first_event]


async def test_a_revocation_that_drops_a_released_partition_goes_with_the_gains() -> None:
    # b released 7 and is asked for 6 in the write that drops 7: b runs neither, so that write
    # starts d's hand-off in the gains' round trip, not after it.
    kube = make_kube()
    hubs = fakes.FakeHubs([str(p) for p in range(8)], store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)
    assert kube.assignment(NS)["b"]["7"] == (1, "revoking")
    kube.acknowledge(NS, "b")
    kube.add_pod(NS, "d", labels={"app": "c"}, since=at(2))
    del kube.calls[:]
    await cycle(kube, hubs, memory, now=2)
    after = kube.assignment(NS)
    assert "7" not in after["b"]
    assert after["b"]["6"] == (1, "revoking")
    assert after["c"]["7"] == (2, "owned")
    cm = {pod: configmaps.configmap_name(consumer=NAME, pod=pod) for pod in "abcd"}
    first_event = next(i for i, (_, kind, _) in enumerate(kube.calls) if kind == "event")
    assert kube.calls[0] == ("patch", "status", NAME)
    assert ("patch", "configmap", cm["b"]) in kube.calls[1:first_event]
    assert ("patch", "configmap", cm["c"]) in kube.calls[1:first_event]


async def test_within_a_step_the_revocations_are_sent_before_the_gains() -> None:
    # The API server answers one request after another: what starts a hand-off goes first,
    # whatever the pods' names.
    sent: list[str] = []

    class Recording:
        async def create_configmap(self, *, namespace: str, body: Any) -> dict[str, Any]:
            sent.append(body["metadata"]["name"])
            return {}

        async def replace_configmap_data(self, *, name: str, **_: Any) -> dict[str, Any]:
            sent.append(name)
            return {}

    def write(name: str, *, gains: bool = False, revokes: bool = False) -> writes.MapWrite:
        return writes.MapWrite(
            name=name,
            pod=name,
            pod_uid="u",
            create=gains,
            resource_version="1",
            uid="" if gains else "cm-uid",
            gains=gains,
            revokes=revokes,
            body={"metadata": {"name": name}, "data": {}} if gains else {"data": {}},
            generation=None if gains else "3",
        )

    planned = writes.Writes(
        maps=(
            write("a-gains", gains=True),
            write("b-gains", gains=True),
            write("z-revokes", revokes=True),
        )
    )
    await writing.apply_writes(
        kube=Recording(),  # type: ignore[arg-type]
        namespace=NS,
        planned=planned,
    )
    assert sent == ["z-revokes", "a-gains", "b-gains"]


async def test_a_revocation_goes_with_the_gains_only_once_the_record_holds_it(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # A crash after the first ConfigMap step leaves the revocation written and recorded: the
    # next cycle, by a restarted operator, finds the release it asked for and hands over once.
    memory = await c_joined(kube, hubs)
    kube.acknowledge(NS, "b")
    kube.add_pod(NS, "d", labels={"app": "c"}, since=at(2))
    # d's empty ConfigMap goes out with the revocation, and fails: the operator stops there.
    kube.fail("create_configmap", errors.ApiUnavailable("the API server went away"))
    with pytest.raises(errors.ApiUnavailable):
        await cycle(kube, hubs, memory, now=2)
    recorded = {e["partition"]: (e["pod"], e["state"]) for e in kube.status(NS, NAME)["assignment"]}
    assert recorded["1"] == ("a", "revoking")
    assert kube.assignment(NS)["a"] == {"0": (1, "owned"), "1": (1, "revoking")}
    kube.acknowledge(NS, "a")
    await cycle(kube, hubs, memories.Memory(), now=3)
    assert kube.assignment(NS)["d"] == {"1": (2, "owned")}
    assert kube.status(NS, NAME)["epochs"] == {"0": 1, "1": 2, "2": 1, "3": 2}


async def test_pods_are_not_annotated_unless_switched_on(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    await cycle(kube, hubs, memories.Memory(), now=0)
    assert ("annotate", "pod") not in [(verb, kind) for verb, kind, _ in kube.calls]


async def test_a_crash_after_the_epochs_never_hands_an_epoch_out_twice(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    kube.fail("create_configmap", errors.ApiUnavailable("the API server went away"))
    with pytest.raises(errors.ApiUnavailable):
        await cycle(kube, hubs, memories.Memory(), now=0)
    status = kube.status(NS, NAME)
    # The first write, before any ConfigMap: the status, with the epochs and the record.
    assert {"epochs", "assignment"} <= set(status)
    assert status["epochs"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert {(e["partition"], e["pod"], e["epoch"]) for e in status["assignment"]} == {
        ("0", "a", 1),
        ("1", "a", 1),
        ("2", "b", 1),
        ("3", "b", 1),
    }
    assert kube.assignment(NS) == {"b": {"2": (1, "owned"), "3": (1, "owned")}}
    await cycle(kube, hubs, memories.Memory(), now=5)  # a restarted operator
    # The record went out with the epochs: the restarted operator writes the ConfigMaps it
    # describes, to the same owners at the same epochs; no epoch is handed to anyone else.
    assert kube.assignment(NS) == {
        "a": {"0": (1, "owned"), "1": (1, "owned")},
        "b": {"2": (1, "owned"), "3": (1, "owned")},
    }
    assert kube.status(NS, NAME)["epochs"] == {"0": 1, "1": 1, "2": 1, "3": 1}


async def test_a_revocation_recorded_but_not_written_is_written_by_the_next_cycle(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # A cycle that only revokes writes its status (the record of the revocations), then its
    # ConfigMaps: a failure may leave the record written and a ConfigMap not.
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    kube.fail("patch_configmap", errors.ApiUnavailable("the API server went away"))
    with pytest.raises(errors.ApiUnavailable):
        await cycle(kube, hubs, memory, now=2)
    recorded = {e["partition"]: e["state"] for e in kube.status(NS, NAME)["assignment"]}
    assert [p for p, state in recorded.items() if state == "revoking"] == ["3"]
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "owned")}
    # A restarted operator trusts the record: it writes the revocation, and once it is
    # acknowledged gives the partition to c at one new epoch.
    await cycle(kube, hubs, memories.Memory(), now=3)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "revoking")}
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memories.Memory(), now=4)
    assert kube.assignment(NS)["c"] == {"3": (2, "owned")}
    assert kube.status(NS, NAME)["epochs"] == {"0": 1, "1": 1, "2": 1, "3": 2}


async def test_a_revocation_the_api_server_throttled_is_written_again_without_a_tamper_warning(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # An API server throttling the operator accepts the status of a cycle that revokes and
    # refuses its ConfigMap patch (429). The next cycle finds b's ConfigMap as the operator
    # last wrote it, behind its own record: a write not made yet, nobody's edit.
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    kube.fail("patch_configmap", errors.ApiUnavailable("429 Too Many Requests"), times=2)
    for now in (2, 3):
        with pytest.raises(errors.ApiUnavailable):
            await cycle(kube, hubs, memory, now=now)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "owned")}
    await cycle(kube, hubs, memory, now=4)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "revoking")}
    reasons = [e["reason"] for e in kube.events]
    assert "AssignmentTampered" not in reasons
    assert "ConfigMapRepaired" not in reasons
    assert reasons.count("PartitionRevoked") == 1


async def test_a_kube_api_failure_fails_the_cycle_before_any_write(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    kube.fail("list_configmaps", errors.ApiUnavailable("timeout"))
    with pytest.raises(errors.ApiUnavailable):
        await cycle(kube, hubs, memories.Memory(), now=0)
    assert kube.calls == []


async def test_a_missing_secret_is_shown_and_the_pods_are_still_balanced(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    del kube.objects["secret", NS, "eh"]
    kube.remove_pod(NS, "a")  # its ConfigMap goes with it
    result = await cycle(kube, hubs, memory, now=5)
    reachable = kube.condition(NS, NAME, "EventHubReachable")
    assert (reachable["status"], reachable["reason"]) == ("False", "SecretNotFound")
    assert "over the last known partition list" in reachable["message"]
    assert [(m.kind, m.reason, m.epoch) for m in result.decision.moves] == [
        ("takeover", "gone", 2),
        ("takeover", "gone", 2),
    ]
    assert set(kube.assignment(NS)["b"]) == {"0", "1", "2", "3"}
    assert {e["reason"] for e in kube.events} >= {"SecretNotFound", "PartitionTakenOver"}
    assert memory.hub.backoff.retry_at == at(5).timestamp() + 5.0  # the interval, then doubling


async def test_an_unreachable_store_is_shown_and_backed_off(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    hubs.store.failure = errors.CheckpointStoreUnreachable("connection refused")
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    store = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (store["status"], store["reason"]) == ("False", "CheckpointStoreUnreachable")
    assert kube.assignment(NS)["a"] == {"0": (1, "owned"), "1": (1, "owned")}
    assert [e["reason"] for e in kube.events].count("CheckpointStoreUnreachable") == 1
    hubs.store.failure = None
    await cycle(kube, hubs, memory, now=4)  # within the backoff: not asked
    assert len(hubs.store.reads) == 1
    await cycle(kube, hubs, memory, now=5)
    assert len(hubs.store.reads) == 2
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["status"] == "True"


async def test_the_checkpoint_epochs_are_read_only_when_partitions_move(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    hubs.store.fence("3", 9)  # a lost operator's epoch, fenced by some pod
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    assert kube.assignment(NS)["b"]["3"] == (10, "owned")
    await cycle(kube, hubs, memory, now=5)
    await cycle(kube, hubs, memory, now=10)
    assert len(hubs.store.reads) == 1  # steady: not needed, the probe is not due
    hubs.store.fence("0", 5)  # "a" fenced partition 0 again, beyond what status says
    kube.remove_pod(NS, "a")
    await cycle(kube, hubs, memory, now=15)
    assert len(hubs.store.reads) == 2  # a partition gets a new owner: its blob is a floor
    assert kube.assignment(NS)["b"]["0"] == (6, "owned")


async def test_a_handoff_lists_the_blobs_ahead_while_the_old_owner_releases(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    assert len(hubs.store.reads) == 1  # the first assignment's floors
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)  # revokes 3 from b...
    assert len(hubs.store.reads) == 2  # ...and lists the blobs beside its writes
    hubs.store.fence("3", 1, sequence_number=40)  # b's final checkpoint, at its own epoch
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=2)  # gives 3 to c on the listing made ahead
    assert len(hubs.store.reads) == 2
    assert kube.assignment(NS)["c"] == {"3": (2, "owned")}
    assert memory.store.ahead is None  # taken once


@pytest.mark.looptime
async def test_the_listing_made_ahead_goes_out_beside_the_writes(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The status takes a second to write and the blobs a second to list: the cycle that
    # revokes takes one second, not two, and the release that follows it finds the listing.
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    write, listing = kube.patch_consumer_status, hubs.checkpoints

    async def slow_write(**kwargs: Any) -> Any:
        await asyncio.sleep(1)
        return await write(**kwargs)

    async def slow_listing(address: storeaddresses.StoreAddress) -> Any:
        await asyncio.sleep(1)
        return await listing(address)

    monkeypatch.setattr(kube, "patch_consumer_status", slow_write)
    monkeypatch.setattr(hubs, "checkpoints", slow_listing)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await cycle(kube, hubs, memory, now=1)  # revokes 3 from b, and lists ahead
    assert loop.time() - began == pytest.approx(1.0)
    assert kube.assignment(NS)["b"]["3"] == (1, "revoking")
    assert memory.store.ahead is not None


async def test_a_cycle_between_that_needs_no_blobs_leaves_the_listing_made_ahead(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = await c_joined(kube, hubs)
    kube.set_ready(NS, "a", ready=True, since=at(1.5))  # another pod's event, no move
    quiet = await cycle(kube, hubs, memory, now=1.5)
    assert quiet.decision.moves == ()
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=2)
    assert len(hubs.store.reads) == 2  # the first assignment's, and the one made ahead
    assert kube.assignment(NS)["c"] == {"3": (2, "owned")}


async def test_each_cycle_that_revokes_lists_the_blobs_itself(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # A listing made ahead is never passed on as a younger one's.
    memory = await c_joined(kube, hubs)
    assert memory.store.ahead is not None
    first = memory.store.ahead
    kube.terminate(NS, "a", at=at(1))  # its wait is over at 3: a's partitions are revoked
    await cycle(kube, hubs, memory, now=3)
    assert len(hubs.store.reads) == 3
    assert memory.store.ahead is not None
    assert memory.store.ahead is not first
    assert memory.store.ahead.at == at(3).timestamp()


async def test_a_terminating_pods_release_finds_the_blobs_listed_ahead(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # No revocation: the pod releases on its SIGTERM. The cycle that sees the deletion lists
    # the blobs for the one the release wakes, and a cycle between lists nothing more.
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)  # a: 0, 1; b: 2, 3
    assert len(hubs.store.reads) == 1
    kube.terminate(NS, "b", at=at(5))
    waiting = await cycle(kube, hubs, memory, now=5)
    assert waiting.decision.awaits_release
    assert len(hubs.store.reads) == 2
    kube.set_ready(NS, "a", ready=True, since=at(5.1))  # another pod's event, no move
    await cycle(kube, hubs, memory, now=5.1)
    assert len(hubs.store.reads) == 2  # the listing made ahead stands
    kube.release_all(NS, "b")
    given = await cycle(kube, hubs, memory, now=5.2)
    assert len(hubs.store.reads) == 2  # given out on the listing made ahead
    assert kube.assignment(NS)["a"] == {
        "0": (1, "owned"),
        "1": (1, "owned"),
        "2": (2, "owned"),
        "3": (2, "owned"),
    }
    assert not given.decision.awaits_release


async def test_a_cycle_that_only_waits_for_releases_lists_again_once_the_listing_is_old(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = await c_joined(kube, hubs)  # b's 3 revoked at 1, listed ahead
    assert len(hubs.store.reads) == 2
    later = 1 + deadlines.AHEAD_SECONDS + 1
    kube.set_ready(NS, "a", ready=True, since=at(later))
    await cycle(kube, hubs, memory, now=later)
    assert len(hubs.store.reads) == 3
    assert memory.store.ahead is not None
    assert memory.store.ahead.at == at(later).timestamp()


async def test_a_listing_made_ahead_too_long_ago_is_not_taken(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = await c_joined(kube, hubs)
    hubs.store.fence("3", 7)  # written by someone else after that listing
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=2 + deadlines.AHEAD_SECONDS)
    assert len(hubs.store.reads) == 3  # listed again: the floor is the blob's 7
    assert kube.assignment(NS)["c"] == {"3": (8, "owned")}


async def test_a_listing_made_ahead_for_another_store_is_not_taken(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = await c_joined(kube, hubs)
    moved = copy.deepcopy(SPEC)
    moved["checkpointStore"]["containerName"] = "checkpoints-2"
    kube.set_spec(NS, NAME, moved)
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=2)
    assert len(hubs.store.reads) > 2  # the new container is listed for itself


async def test_a_failed_listing_ahead_is_shown_and_never_fails_the_cycle(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    hubs.store.failure = errors.TransientError("the storage account went away")
    result = await cycle(kube, hubs, memory, now=1)
    assert result.writes > 0  # the revocation went out
    assert kube.assignment(NS)["b"]["3"] == (1, "revoking")
    assert memory.store.ahead is None
    assert memory.store.fault is not None  # paced and shown as any failed read


async def test_a_terminating_pods_own_release_hands_its_partitions_on_without_a_revocation(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)  # a: 0, 1; b: 2, 3
    kube.terminate(NS, "b", at=at(5))
    quiet = await cycle(kube, hubs, memory, now=5.1)
    # Nothing revoked: the pod releases everything on its SIGTERM. The cycle comes back when
    # the wait ends, in case it does not.
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "owned")}
    assert quiet.decision.next_in == pytest.approx(1.9)
    kube.release_all(NS, "b")
    await cycle(kube, hubs, memory, now=5.2)
    assert kube.assignment(NS)["a"] == {
        "0": (1, "owned"),
        "1": (1, "owned"),
        "2": (2, "owned"),
        "3": (2, "owned"),
    }
    assert all(state != "revoking" for _, state in kube.assignment(NS)["b"].values())


async def test_a_terminating_pod_that_does_not_let_go_is_revoked_after_a_moment(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.terminate(NS, "b", at=at(5))  # a preStop hook holds its SIGTERM back
    await cycle(kube, hubs, memory, now=5.1)
    await cycle(kube, hubs, memory, now=7)
    assert kube.assignment(NS)["b"] == {"2": (1, "revoking"), "3": (1, "revoking")}
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=7.1)
    assert {p: e for p, e in kube.assignment(NS)["a"].items() if p in "23"} == {
        "2": (2, "owned"),
        "3": (2, "owned"),
    }


async def test_an_invalid_spec_writes_only_the_condition(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    kube.set_spec(NS, NAME, {**SPEC, "checkpointStore": {"containerName": "X"}})
    result = await cycle(kube, hubs, memories.Memory(), now=0)
    assert result.decision.spec_error is not None
    assert hubs.listings == []
    assert kube.assignment(NS) == {}
    assert kube.condition(NS, NAME, "Ready")["reason"] == "InvalidSpec"
    assert kube.status(NS, NAME)["observedGeneration"] == 2


async def test_the_metrics_follow_the_cycle(kube: fakes.FakeKube, hubs: fakes.FakeHubs) -> None:
    registry = metrics.Metrics()
    await cycle(kube, hubs, memories.Memory(), now=0, registry=registry)
    text = registry.exposition().decode()
    assert 'ehb_partition_count{consumer="orders",namespace="shop"} 4.0' in text
    assert 'ehb_partitions{consumer="orders",namespace="shop",pod="a"} 2.0' in text
    assert 'ehb_api_writes_total{consumer="orders",kind="configmap",namespace="shop"} 2.0' in text
    assert 'ehb_moves_total{consumer="orders",kind="assign",namespace="shop",reason="new"} 4.0' in (
        text
    )


async def test_a_store_outage_under_lag_weighting_moves_nothing(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    kube.add_consumer(NS, NAME, {**SPEC, "balancing": {"weighting": "lag"}})
    for p in ("0", "1", "2", "3"):
        hubs.store.fence(p, 0, sequence_number=0)
    hubs.last_sequences = {"0": 2_999, "1": 0, "2": 0, "3": 0}
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    before = kube.assignment(NS)
    assert len(before["a"]) == 1 or len(before["b"]) == 1  # the backlog has a pod to itself
    hubs.store.failure = errors.CheckpointStoreUnreachable("connection refused")
    for now in (5, 10, 20, 40):
        result = await cycle(kube, hubs, memory, now=now)
        assert result.decision.moves == ()
    assert kube.assignment(NS) == before


async def test_a_configmap_acknowledged_mid_write_is_written_without_a_retry(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)  # a: 0, 1; b: 2, 3 at epoch 1
    kube.add_pod(NS, "c", labels={"app": "c"}, since=T0)
    await cycle(kube, hubs, memory, now=1)  # c joins: one partition is revoked for it
    kube.acknowledge(NS, "a")
    kube.acknowledge(NS, "b")
    real = kube.replace_configmap_data
    raced: list[str] = []

    async def acknowledged_meanwhile(**kwargs: Any) -> dict[str, Any]:
        # The pod wrote its acknowledgement again between the read and this write: its
        # annotations and the resourceVersion moved, the data did not.
        cm = kube.objects["configmap", NS, kwargs["name"]]
        cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_APPLIED_GENERATION] = cm[
            "data"
        ]["generation"]
        kube._store("configmap", NS, cm)
        raced.append(kwargs["name"])
        return await real(**kwargs)

    kube.replace_configmap_data = acknowledged_meanwhile  # type: ignore[method-assign]
    calls = len(kube.calls)
    await cycle(kube, hubs, memory, now=2)
    assert raced
    # The data's generation is the precondition, not the resourceVersion: no conflict, and
    # each ConfigMap is written once.
    patches = [c for c in kube.calls[calls:] if c[:2] == ("patch", "configmap")]
    assert len(patches) == len({c[2] for c in patches})
    moved = {p for p, e in kube.status(NS, NAME)["epochs"].items() if e == 2}
    assert len(moved) == 1
    owned = kube.assignment(NS)
    assert set(owned["c"]) == moved
    assert {e for e, _ in owned["c"].values()} == {2}
    reasons = [e["reason"] for e in kube.events]
    assert reasons.count("PartitionHandedOff") == 1
    assert "AssignmentTampered" not in reasons


async def test_a_patch_beyond_the_data_acknowledged_mid_write_stops_the_decision(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    # A patch that also changes annotations (it drops releases written ahead of the revocation
    # it carries) is conditional on the resourceVersion: an acknowledgement written meanwhile
    # makes it conflict, and the conflict stops the decision (it is not patched again over
    # annotations it did not read: that would drop the pod's new release). The next decision
    # reads the pod's annotations afresh.
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    cm = kube.configmap_of(NS, "b")
    generation = cm["data"]["generation"]
    write = writes.MapWrite(
        name=cm["metadata"]["name"],
        pod="b",
        pod_uid=cm["metadata"]["annotations"][configmaps.ANNOTATION_POD_UID],
        create=False,
        body={
            "data": {configmaps.KEY_GENERATION: str(int(generation) + 1)},
            "metadata": {"annotations": {configmaps.ANNOTATION_RELEASED: None}},
        },
        resource_version=cm["metadata"]["resourceVersion"],
        uid=cm["metadata"]["uid"],
        gains=False,
        generation=generation,
    )
    assert not write.data_only
    kube.acknowledge(NS, "b")  # the resourceVersion moves, the data does not
    calls = len(kube.calls)
    with pytest.raises(errors.Conflict):
        await writing.patch_configmap(kube, namespace=NS, write=write)
    assert [c[:2] for c in kube.calls[calls:]] == [("patch", "configmap")]
    assert kube.configmap_of(NS, "b")["data"]["generation"] == generation


async def test_a_configmap_another_writer_changed_fails_the_cycle_after_the_epochs(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=T0)
    await cycle(kube, hubs, memory, now=1)
    kube.acknowledge(NS, "a")
    kube.acknowledge(NS, "b")
    real = kube.replace_configmap_data
    bumped: list[str] = []

    async def raced(**kwargs: Any) -> dict[str, Any]:
        # A second operator rewrote this ConfigMap's data (its generation) meanwhile.
        if not bumped:
            cm = kube.objects["configmap", NS, kwargs["name"]]
            cm["data"]["generation"] = str(int(cm["data"]["generation"]) + 1)
            kube._store("configmap", NS, cm)
            bumped.append(kwargs["name"])
        return await real(**kwargs)

    kube.replace_configmap_data = raced  # type: ignore[method-assign]
    with pytest.raises(errors.Conflict):
        await cycle(kube, hubs, memory, now=2)
    kube.replace_configmap_data = real  # type: ignore[method-assign]
    moved = {p for p, e in kube.status(NS, NAME)["epochs"].items() if e == 2}
    assert len(moved) == 1
    await cycle(kube, hubs, memory, now=3)  # the next cycle carries the record out
    owned = kube.assignment(NS)
    assert set(owned["c"]) == moved
    assert {e for e, _ in owned["c"].values()} == {2}  # not taken over once more at epoch 3
    assert kube.status(NS, NAME)["epochs"] == {p: 2 if p in moved else 1 for p in "0123"}
    reasons = [e["reason"] for e in kube.events]
    assert reasons.count("PartitionHandedOff") == 1  # posted once, by the cycle that failed


@pytest.mark.parametrize("data_only", [False, True])
async def test_a_configmap_recreated_under_its_name_is_never_patched_from_the_old_read(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, data_only: bool
) -> None:
    """A stale read of pod b's ConfigMap; b is recreated (a StatefulSet) and its new
    ConfigMap carries the same data generation. The patch derived from the old one conflicts
    and is not retried on the new object: another incarnation's epochs are never overwritten."""
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    cm = kube.configmap_of(NS, "b")
    write = writes.MapWrite(
        name=cm["metadata"]["name"],
        pod="b",
        pod_uid=cm["metadata"]["annotations"][configmaps.ANNOTATION_POD_UID],
        create=False,
        body={"data": {configmaps.KEY_GENERATION: str(int(cm["data"]["generation"]) + 1)}},
        resource_version=cm["metadata"]["resourceVersion"],
        uid=cm["metadata"]["uid"],
        gains=False,
        # With the data generation read, the patch is conditional on it and on the uid.
        generation=cm["data"]["generation"] if data_only else None,
    )
    assert write.data_only is data_only
    kube.remove_pod(NS, "b")
    kube.add_pod(NS, "b", labels={"app": "c"}, since=T0)
    recreated = copy.deepcopy(cm)
    recreated["metadata"].pop("uid")
    kube._store("configmap", NS, recreated)  # same name and generation, another object
    with pytest.raises(errors.Conflict):
        await writing.patch_configmap(kube, namespace=NS, write=write)
    assert kube.configmap_of(NS, "b")["data"] == recreated["data"]


async def test_each_cycle_says_at_debug_when_it_woke_and_how_long_it_decided_and_wrote(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=cycles.__name__)
    before = datetime.datetime.now(datetime.UTC)
    memory = memories.Memory()
    first = await cycle(kube, hubs, memory, now=0)
    await cycle(kube, hubs, memory, now=5)
    lines: list[tuple[Any, ...]] = [
        tuple(r.args) for r in caplog.records if r.msg == cycles.CYCLE_TIMES and r.args
    ]
    assert [line[:2] for line in lines] == [(NS, NAME), (NS, NAME)]
    _, _, woke, decide_ms, wrote, write_ms = lines[0]
    assert before <= datetime.datetime.fromisoformat(woke) <= datetime.datetime.now(datetime.UTC)
    assert decide_ms >= 0
    assert write_ms >= 0
    assert wrote == first.writes == 5
    assert lines[1][4] == 0  # the steady cycle wrote nothing


async def test_partitions_the_hub_stops_listing_are_warned_of_once_not_every_cycle(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, caplog: pytest.LogCaptureFixture
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.acknowledge(NS, pod)
    await cycle(kube, hubs, memory, now=5)
    caplog.set_level(logging.WARNING, logger="eventhub_balancer")

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "not listed by Event Hubs" in r.message]

    hubs.ids = ("0", "1", "2")  # the hub lists one partition less, and stays so
    for t in range(10, 110, 10):
        await cycle(kube, hubs, memory, now=t)
    assert kube.assignment(NS)["b"]["3"][1] == "owned"  # kept, as documented
    assert warned() == [
        f"{NS}/{NAME}: partitions ['3'] are assigned but not listed by Event Hubs; keeping them"
    ]
    hubs.ids = ("0", "1")  # another set: said again
    await cycle(kube, hubs, memory, now=120)
    assert len(warned()) == 2
