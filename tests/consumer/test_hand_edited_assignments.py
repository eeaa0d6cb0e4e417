"""An assignment the pod cannot use as written (a ConfigMap edited by hand, an assignment
file caught while it is written): what it cannot use is reported to the operator or kept
as not ready yet, and the runtime goes on; it never ends on a parse error.

On fake loop time.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.consumer import assignmentfiles, connections, runtime
from eventhub_balancer.contracts import configmaps, endpoints
from tests.consumer import test_runtime
from tests.support import configmapfakes, consumerfakes

pytestmark = pytest.mark.looptime

#: An account URL that ``urllib.parse.urlsplit`` refuses ("Invalid IPv6 URL").
UNPARSABLE_ACCOUNT_URL = "https://[orders.blob.core.windows.net"


async def test_an_account_url_that_does_not_parse_is_reported_and_the_runtime_goes_on(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    # The Azure backends themselves: the endpoint check they run before any client or token
    # is what met the URL. It refuses it, so nothing here reaches the network.
    backends = connections.AzureBackends(
        credentials=connections.Credentials(endpoint_policy=endpoints.EndpointPolicy()),
        owner_id="pod-a",
        batch=test_runtime.FAST,
    )
    recorder = consumerfakes.Recorder()
    async with test_runtime.running(fake_hub, fake_store, recorder, backends=backends) as (
        consumer,
        source,
    ):
        source.put(
            consumerfakes.configmap(
                1, {"0": (1, "owned")}, checkpointAccountUrl=UNPARSABLE_ACCOUNT_URL
            )
        )
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        report = source.reports["0"]
        assert report.state == "failing"
        assert report.error.startswith("spec.checkpointStore.accountUrl: host ")
        assert consumer.ready()[0] is True
        await asyncio.sleep(60)
        # Still turning, and still trying (with backoff) in case the ConfigMap is mended.
        assert consumer.heartbeat_age() <= runtime.TICK_S + 0.01
        assert consumer.latest is not None
        failure = consumer.clients.unopened(connections.Coordinates.of(consumer.latest))
        assert failure is not None
        assert failure.failures >= 3
        assert source.reports["0"].state == "failing"
    assert consumer.stopped


def _assignment_file_text() -> bytes:
    body = consumerfakes.configmap(1, {"0": (1, "owned")})
    body["metadata"]["annotations"] = {"note": "équipe commandes"}  # any non-ASCII text
    return json.dumps(body, ensure_ascii=False).encode()


@pytest.mark.parametrize(
    "unreadable",
    [
        # The writer has written half of the two bytes of "é": not UTF-8 (yet).
        pytest.param(lambda whole: whole[: whole.index("é".encode()) + 1], id="inside-a-char"),
        pytest.param(lambda whole: whole[: whole.index(b'"data"')], id="between-chars"),
        pytest.param(lambda whole: b"[" * 200_000, id="nested-past-the-decoder"),
    ],
)
async def test_an_assignment_file_that_does_not_read_yet_is_waited_for(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    unreadable: Callable[[bytes], bytes],
) -> None:
    """Whatever makes it unreadable, even a cut inside a UTF-8 character, it is not JSON yet:
    the source logs it, keeps the last assignment, and reads the file again at its next poll."""
    path = tmp_path / "assignment.json"
    whole = _assignment_file_text()
    path.write_bytes(unreadable(whole))
    updates = assignmentfiles.FileSource(path, poll_seconds=0.2).updates()
    assert isinstance(updates, AsyncGenerator)
    reader = asyncio.ensure_future(anext(updates))
    try:
        await asyncio.sleep(1)  # five polls of the unreadable file
        assert not reader.done()
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(said) == 1  # once for what the file holds, not at every poll
        assert "is not JSON (yet): keeping the last one" in said[0]
        path.write_bytes(whole)  # the writer finishes
        async with asyncio.timeout(1):
            first = await reader
        assert first.generation == 1
        assert {p: e.epoch for p, e in first.partitions.items()} == {"0": 1}
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await updates.aclose()


#: A ConfigMap's ``partitions`` as someone may leave it: the operator never writes these.
UNREADABLE_PARTITIONS = [
    pytest.param(None, "partitions is missing", id="missing"),
    pytest.param('{"0": {"epoch": 1, "state": "owned"}', "partitions is not JSON", id="not-json"),
    pytest.param('[{"0": 1}]', "partitions is not a JSON object", id="not-an-object"),
]


def _edited(
    generation: int, partitions: str | None, *, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``body`` (the operator's ConfigMap when None) as ``kubectl edit`` leaves it."""
    body = copy.deepcopy(body or configmapfakes.operators(generation, {}))
    body["data"]["generation"] = str(generation)
    if partitions is None:
        body["data"].pop("partitions", None)
    else:
        body["data"]["partitions"] = partitions
    return body


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("eventhub_balancer") and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize(("partitions", "why"), UNREADABLE_PARTITIONS)
async def test_a_configmap_whose_partitions_cannot_be_read_keeps_the_last_assignment(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
    partitions: str | None,
    why: str,
) -> None:
    """Someone's edit leaves ``partitions`` unreadable (the operator writes it back at its next
    cycle): the pod released every partition, a hand-off each for nothing, and took them up
    again once the operator had mended it. It keeps its last assignment instead, says so once,
    and applies the next one it can read."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    maps = configmapfakes.FakeConfigMaps()
    async with configmapfakes.running(maps, fake_hub, fake_store) as consumer:
        maps.write(configmapfakes.operators(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 1, "1": 1})
        await consumerfakes.eventually(lambda: consumer.applied_generation == 1)
        workers = dict(consumer.workers)
        caplog.clear()
        maps.write(_edited(1, partitions, body=maps.body))  # its annotations kept, as by hand
        await asyncio.sleep(5)
        assert consumer.owned() == {"0": 1, "1": 1}
        assert consumer.workers == workers  # the same workers: nothing released or restarted
        assert not [r for r in caplog.records if "releasing" in r.getMessage()]
        assert consumer.ready()[0] is True
        warned = _warnings(caplog)
        assert len(warned) == 1, warned
        for words in (maps.name, why, "keeping", "generation 1", "EventHubConsumer"):
            assert words in warned[0], warned[0]
        # A second edit, as unreadable, is said again (it is news), and still kept.
        maps.write(_edited(7, partitions, body=maps.body))
        await asyncio.sleep(1)
        assert consumer.owned() == {"0": 1, "1": 1}
        assert len(_warnings(caplog)) == 2
        # The operator puts it back, with a change of its own: applied at once.
        maps.write(configmapfakes.operators(8, {"0": (1, "owned"), "1": (1, "revoking")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 1}, what="1 released")
        await consumerfakes.eventually(lambda: consumer.applied_generation == 8)
        assert configmaps.parse_released(maps.annotations()) == {"1": 1}


async def test_a_first_configmap_whose_partitions_cannot_be_read_holds_none_and_says_so(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process with no assignment read before has none to keep: it holds none until the
    operator writes a readable one, and says why."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    maps = configmapfakes.FakeConfigMaps()
    maps.write(_edited(3, "not json"))
    async with configmapfakes.running(maps, fake_hub, fake_store) as consumer:
        await consumerfakes.eventually(lambda: consumer.latest is not None)
        await asyncio.sleep(1)
        assert consumer.owned() == {}
        warned = _warnings(caplog)
        assert len(warned) == 1, warned
        for words in (maps.name, "partitions is not JSON", "holding none", "EventHubConsumer"):
            assert words in warned[0], warned[0]
        maps.write(configmapfakes.operators(4, {"0": (2, "owned")}))
        await consumerfakes.eventually(lambda: consumer.owned() == {"0": 2}, what="taken up")


@pytest.mark.parametrize(("partitions", "why"), UNREADABLE_PARTITIONS)
async def test_an_assignment_file_whose_partitions_cannot_be_read_keeps_the_last_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, partitions: str | None, why: str
) -> None:
    """The file follows the ConfigMap's rule: a file whose ``partitions`` cannot be read is
    not applied (it released everything), as one that is not JSON is not."""
    path = tmp_path / "assignment.json"
    path.write_text(json.dumps(consumerfakes.configmap(1, {"0": (1, "owned")})))
    updates = assignmentfiles.FileSource(path, poll_seconds=0.2).updates()
    assert isinstance(updates, AsyncGenerator)
    try:
        async with asyncio.timeout(1):
            first = await anext(updates)
        assert {p: e.epoch for p, e in first.partitions.items()} == {"0": 1}
        caplog.clear()
        path.write_text(json.dumps(_edited(2, partitions)))
        reader = asyncio.ensure_future(anext(updates))
        await asyncio.sleep(1)
        assert not reader.done()
        warned = _warnings(caplog)
        assert len(warned) == 1, warned
        for words in (str(path), why, "keeping", "generation 1"):
            assert words in warned[0], warned[0]
        path.write_text(json.dumps(consumerfakes.configmap(3, {"0": (2, "owned")})))
        async with asyncio.timeout(1):
            third = await reader
        assert third.generation == 3
        assert {p: e.epoch for p, e in third.partitions.items()} == {"0": 2}
    finally:
        await updates.aclose()
