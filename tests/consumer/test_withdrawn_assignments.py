"""A consumer pod whose ConfigMap goes while it runs: its EventHubConsumer deleted (and its
ConfigMaps with it), or the pod no longer one of its members. On fake time, against the
in-memory ConfigMap (`configmapfakes`): what the pod does, and what its log tells the user.

It logged the ConfigMap as malformed (``generation is missing``, ``partitions is missing``)
and released every partition because "the Event Hub or checkpoint coordinates changed":
neither is what happened, and nothing said that the pod now idles."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.support import consumerfakes
from tests.support.configmapfakes import FakeConfigMaps, operators, running

pytestmark = pytest.mark.looptime

#: What the pod said before, none of which is the cause.
WRONG = ("generation is missing", "partitions is missing", "coordinates changed")


def said(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("eventhub_balancer") and r.levelno >= level
    ]


async def test_a_deleted_configmap_is_said_as_such_and_the_pod_releases_and_idles(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    maps = FakeConfigMaps()
    fake_hub.append("0", 5)
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 1, "1": 1})
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 4)
        caplog.clear()
        maps.delete()
        await consumerfakes.eventually(lambda: consumer.owned() == {}, what="all released")
        assert not consumer.stopped  # the pod goes on, holding nothing
        lines = said(caplog)
        for wrong in WRONG:
            assert not [line for line in lines if wrong in line], lines
        warned = said(caplog, logging.WARNING)
        assert len(warned) == 1, warned
        assert maps.name in warned[0], warned[0]
        for words in ("EventHubConsumer was deleted", "Releasing every partition", "idles"):
            assert words in warned[0], warned[0]
        released = [line for line in lines if "releasing epoch 1" in line]
        assert len(released) == 2, lines
        assert all("ConfigMap is gone" in r for r in released), released
        # Nothing is sent where there is no ConfigMap, and the log does not say otherwise.
        assert not [line for line in said(caplog) if "acknowledged" in line], said(caplog)
        # Given a ConfigMap again (the consumer applied again), it takes its partitions up.
        maps.write(operators(2, {"0": (2, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 2}, what="taken up")


async def test_a_pod_that_starts_before_its_configmap_waits_without_a_warning(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watch's first list finds no ConfigMap (the operator writes it once it sees the pod
    Ready): the pod said the ConfigMap lacked its generation and partitions, two warnings at
    every start, of a ConfigMap that did not exist yet."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    maps = FakeConfigMaps()
    maps.delete()  # the first list: none of this pod's
    async with running(maps, fake_hub, fake_store) as consumer:
        await consumerfakes.eventually(lambda: consumer.ready()[0], what="Ready, holding none")
        assert said(caplog, logging.WARNING) == []
        waiting = [line for line in said(caplog) if maps.name in line]
        assert len(waiting) == 1, said(caplog)
        assert "waiting for the operator" in waiting[0], waiting[0]
        assert not [line for line in said(caplog) if "acknowledged" in line], said(caplog)
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 1}, what="taken up")
        await consumerfakes.eventually(
            lambda: any("acknowledged generation 1" in line for line in said(caplog)),
            what="the acknowledgement sent once there is a ConfigMap",
        )
        assert said(caplog, logging.WARNING) == []


async def test_an_emptied_configmap_is_said_for_what_it_is_and_the_pod_keeps_its_partitions(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ConfigMap whose data someone emptied (the operator never writes one so) has no
    partitions to read: the pod keeps the last assignment until the operator writes it back,
    and says so in one line, not that the coordinates changed. (It released every partition
    for that, which cost each a hand-off for nothing: `test_hand_edited_assignments`.)"""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 1})
        caplog.clear()
        assert maps.body is not None
        emptied = {**maps.body, "data": {}}
        maps.write(emptied)
        await asyncio.sleep(2)
        assert consumer.owned() == {"0": 1}
        lines = said(caplog)
        for wrong in ("generation is missing", "coordinates changed", "releasing"):
            assert not [line for line in lines if wrong in line], lines
        warned = said(caplog, logging.WARNING)
        assert len(warned) == 1, warned
        assert "partitions is missing" in warned[0], warned[0]
        assert "keeping the assignment of generation 1" in warned[0], warned[0]


async def test_a_configmap_unreadable_after_one_withdrawn_keeps_nothing_of_before(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Once its ConfigMap went, the pod holds none: an unreadable one that comes next has no
    assignment of before to keep, and says that it holds none."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 1})
        maps.delete()
        await consumerfakes.eventually(lambda: consumer.owned() == {}, what="all released")
        caplog.clear()
        unreadable = operators(2, {})
        unreadable["data"]["partitions"] = "not json"
        maps.write(unreadable)
        await asyncio.sleep(1)
        assert consumer.owned() == {}
        warned = said(caplog, logging.WARNING)
        assert len(warned) == 1, warned
        assert "holding none" in warned[0], warned[0]
