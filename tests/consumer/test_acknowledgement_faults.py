"""The pod's acknowledgement annotations when hands other than its own touch them, on fake
time: stripped, edited, or gone with a ConfigMap created again (`configmapfakes`)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from eventhub_balancer.contracts import configmaps
from tests.support import consumerfakes
from tests.support.configmapfakes import FakeConfigMaps, operators, running

pytestmark = pytest.mark.looptime

APPLIED = configmaps.ANNOTATION_APPLIED_GENERATION
RELEASED = configmaps.ANNOTATION_RELEASED


async def test_an_acknowledgement_stripped_by_hand_is_written_again(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned"), "1": (1, "revoking")}))
        await consumerfakes.eventually(
            lambda: maps.annotations().get(APPLIED) == "1", what="generation 1 acknowledged"
        )
        assert configmaps.parse_released(maps.annotations()) == {"1": 1}
        maps.strip(APPLIED, RELEASED)
        # The operator waits for both: Ready (AssignmentNotApplied) and the hand-off of 1.
        await consumerfakes.eventually(
            lambda: maps.annotations().get(APPLIED) == "1", within=3, what="written again"
        )
        assert configmaps.parse_released(maps.annotations()) == {"1": 1}
        assert consumer.ready()[0]


async def test_a_strip_the_watch_shows_before_the_patch_is_answered_is_written_again(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The hand comes right after the pod's patch, and the watch shows both before the
    patch's answer is taken (a loaded node: the answer's thread ran last). The answer used
    to be taken for what the server held, and covered the strip up for good."""
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "1")

        def strip_once() -> None:
            maps.before_answer = None
            maps.strip(APPLIED, RELEASED)

        maps.before_answer = strip_once
        maps.write(operators(2, {"0": (1, "owned"), "1": (1, "revoking")}))
        await consumerfakes.eventually(lambda: maps.before_answer is None, what="the strip")
        await consumerfakes.eventually(
            lambda: maps.annotations().get(APPLIED) == "2", within=3, what="written again"
        )
        assert configmaps.parse_released(maps.annotations()) == {"1": 1}
        assert consumer.ready()[0]


async def test_an_acknowledgement_edited_by_hand_is_put_back(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """A release the pod never made must not stand on its ConfigMap: the operator would end
    a hand-off on it."""
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store):
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "1")
        body = copy.deepcopy(maps.body)
        assert body is not None
        body["metadata"]["annotations"][RELEASED] = configmaps.build_released({"0": 1})
        maps.write(body)
        await consumerfakes.eventually(
            lambda: configmaps.parse_released(maps.annotations()) == {},
            within=3,
            what="the forged release taken back",
        )


async def test_a_configmap_created_again_gets_the_acknowledgement_again(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Deleted and created again with the same data (the watch missed both, or the same
    generation came back): the new object carries none of the pod's annotations."""
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store):
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "1")
        maps.write(operators(1, {"0": (1, "owned")}))  # no pod annotations on it
        assert APPLIED not in maps.annotations()
        await consumerfakes.eventually(
            lambda: maps.annotations().get(APPLIED) == "1", within=3, what="written again"
        )


async def test_our_own_acknowledgements_cost_one_patch_each(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Seeing its own patch come back through the watch is no reason to write again."""
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store):
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "1")
        assert maps.body is not None
        maps.write(
            {
                **operators(2, {"0": (1, "owned"), "1": (1, "owned")}),
                "metadata": maps.body["metadata"],
            }
        )
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "2")
        patches = len(maps.patches)
        await asyncio.sleep(30)
        assert len(maps.patches) == patches


async def test_a_revocation_that_drops_a_premature_release_is_answered_only_after_the_release(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Someone wrote ``released`` for a partition the pod still runs, and the operator's
    revocation drops it (``reconciling.writes.premature``): the pod must not put it back
    before its own release, which comes only after the final checkpoint."""
    fake_hub.append("0", 5)
    maps = FakeConfigMaps()
    handle = fake_store.handle("pod-a")
    async with running(maps, fake_hub, fake_store, handle=handle):
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: maps.annotations().get(APPLIED) == "1")
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 4)
        handle.gate = asyncio.Event()  # the next checkpoint write hangs
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: handle.updates_begun == 2, what="a write held")
        forged = copy.deepcopy(maps.body)
        assert forged is not None
        forged["metadata"]["annotations"][RELEASED] = configmaps.build_released({"0": 1})
        maps.write(forged)
        revoking = operators(2, {"0": (1, "revoking")})
        revoking["metadata"]["annotations"] = {
            **maps.annotations(),
            RELEASED: configmaps.build_released({}),
        }
        maps.write(revoking)
        await asyncio.sleep(10)
        assert all(configmaps.parse_released(a) != {"0": 1} for _, a in maps.patches)
        assert configmaps.parse_released(maps.annotations()) == {}
        handle.gate.set()
        await consumerfakes.eventually(
            lambda: configmaps.parse_released(maps.annotations()) == {"0": 1},
            what="the release written",
        )
        assert fake_store.blobs["0"].sequence_number == 9
