"""A consumer container restarted in place (OOMKilled, a crash, a liveness restart, the
runtime's own exit 70): the same pod and ConfigMap, a new process that remembers nothing.
On fake time, against the in-memory ConfigMap (`configmapfakes`): what the new process reads,
resumes and acknowledges, and what it must leave standing of its predecessor's answer."""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.consumer import runtime
from eventhub_balancer.contracts import configmaps
from tests.support import consumerfakes
from tests.support.configmapfakes import FakeConfigMaps, operators, running

pytestmark = pytest.mark.looptime

APPLIED = configmaps.ANNOTATION_APPLIED_GENERATION
RELEASED = configmaps.ANNOTATION_RELEASED


async def killed(consumer: runtime.Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL: the process ends where it stands, releasing and acknowledging nothing."""

    async def nothing() -> None:
        return None

    monkeypatch.setattr(consumer, "_drain", nothing)
    for task in list(consumer._tasks.values()):
        task.cancel()
    consumer.request_shutdown()
    await asyncio.sleep(1)


def released(maps: FakeConfigMaps) -> dict[str, int]:
    return configmaps.parse_released(maps.annotations())


async def test_a_container_killed_mid_release_acknowledges_it_at_once_and_resumes_the_rest(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed while partition 1's final checkpoint was on the wire: the new process has
    nothing of 1 to finish (the next owner starts from the last durable checkpoint) and
    takes 0 up again at the same epoch, right after its checkpoint."""
    maps = FakeConfigMaps()
    fake_hub.append("0", 15)
    fake_hub.append("1", 15)
    old_handle = fake_store.handle("pod-a")
    async with running(maps, fake_hub, fake_store, handle=old_handle) as old:
        maps.write(operators(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "1")
        await consumerfakes.eventually(
            lambda: all(fake_store.blobs[p].sequence_number == 14 for p in "01")
        )
        old_handle.gate = asyncio.Event()  # every checkpoint write hangs from now on
        fake_hub.append("0", 5)
        fake_hub.append("1", 5)
        await consumerfakes.eventually(lambda: old_handle.updates_begun == 6)
        maps.write(operators(2, {"0": (1, "owned"), "1": (1, "revoking")}))
        await consumerfakes.eventually(lambda: old.workers["1"].releasing)
        await killed(old, monkeypatch)
        assert released(maps) == {}
        old_handle.gate = None
    assert fake_store.blobs["0"].sequence_number == 14  # the write in flight never landed

    maps.restarted()
    started = consumerfakes.loop_time()
    async with running(maps, fake_hub, fake_store) as new:
        await consumerfakes.eventually(
            lambda: released(maps) == {"1": 1} and maps.annotations().get(APPLIED) == "2",
            within=2,
            what="the release of 1 and generation 2 acknowledged by the new process",
        )
        assert consumerfakes.loop_time() - started < 1
        assert new.owned() == {"0": 1}
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 19)
        processor = new.processor
        assert isinstance(processor, consumerfakes.Recorder)
        assert processor.done == [("0", n) for n in range(15, 20)]  # from the checkpoint on
    assert fake_store.blobs["1"].sequence_number == 14


async def test_sigterm_before_the_assignment_is_read_keeps_the_release_standing(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The previous container released 1 and died before the operator read the release; the
    pod is deleted while its new container starts. That process read nothing and released
    nothing: its goodbye must not erase the release, or the hand-off of 1 waits out
    ``handoffTimeoutSeconds``."""
    maps = FakeConfigMaps()
    body = operators(2, {"0": (1, "owned"), "1": (1, "revoking")})
    body["metadata"]["annotations"].update(
        {APPLIED: "2", RELEASED: configmaps.build_released({"1": 1})}
    )
    maps.body = body  # as the previous container left it; the new watch has not answered yet
    async with running(maps, fake_hub, fake_store) as consumer:
        await asyncio.sleep(0.2)
        assert consumer.latest is None
    assert released(maps) == {"1": 1}
    assert maps.annotations().get(APPLIED) == "2"
