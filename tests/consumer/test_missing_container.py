"""A checkpoint container deleted under a running pod, as the pod's runtime meets it: every
partition fails with the same error, said in one ERROR line for all of them (as a missing
consumer group is), each partition reported failing with it; processing starts again once the
container is back.

Over the in-memory fakes, on fake loop time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from tests.consumer import test_runtime
from tests.consumer.test_missing_entities import PARTITIONS, loud
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

GONE = errors.CheckpointContainerNotFound(
    "checkpoint container 'checkpoints' does not exist (HTTP 404 ContainerNotFound "
    "(ResourceNotFoundError)): create it, or fix checkpointStore.containerName"
)


class ContainerlessStore(consumerfakes.FakeStoreHandle):
    """A store whose container is gone while ``gone`` is set."""

    gone = True

    async def fence(self, partition: str, epoch: int, *, start: Any) -> Any:
        if self.gone:
            self.fence_times.append(consumerfakes.loop_time())
            raise GONE
        return await super().fence(partition, epoch, start=start)


async def test_a_missing_container_is_one_error_line_for_every_partition(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    for partition in PARTITIONS:
        fake_hub.append(partition, 2)
    store = ContainerlessStore(fake_store, "pod-a")
    recorder = consumerfakes.Recorder()
    async with test_runtime.running(fake_hub, store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        await consumerfakes.eventually(
            lambda: len(source.reports) == len(PARTITIONS), what="every partition reported"
        )
        assert {r.state for r in source.reports.values()} == {"failing"}
        assert {r.error for r in source.reports.values()} == {str(GONE)}
        await asyncio.sleep(200)
        said = loud(caplog)
        assert [r.levelname for r in said] == ["ERROR"]
        assert said[0].getMessage().startswith(str(GONE))

        store.gone = False  # created again
        await consumerfakes.eventually(
            lambda: len(recorder.done) == 2 * len(PARTITIONS), within=32, what="processing"
        )
