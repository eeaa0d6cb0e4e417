"""An assignment the pod cannot use as written (a ConfigMap edited by hand, an assignment
file caught while it is written): what it cannot use is reported to the operator or kept
as not ready yet, and the runtime goes on; it never ends on a parse error.

On fake loop time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import pytest

from eventhub_balancer.consumer import assignments, connections, runtime
from eventhub_balancer.contracts import endpoints
from tests.consumer import test_runtime
from tests.support import consumerfakes

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
    updates = assignments.FileSource(path, poll_seconds=0.2).updates()
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
