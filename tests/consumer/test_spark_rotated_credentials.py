"""A key rotated under a running Spark-mode pod (`triggers.SparkTriggers` as its processor):
the same swap as in plain mode (`tests.consumer.test_rotated_credentials`), with the batches
gathered into triggers, one a second: the partitions' batches wait up to 1 s in the trigger
queue, their workers waiting for the trigger, when the file is rewritten. Over the same
fakes, on fake loop time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.consumer import connections, triggers
from tests.consumer import test_rotated_credentials as plain
from tests.consumer.test_triggers import FakeSession, Handler, SteppedExecutor
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

PARTITIONS = plain.PARTITIONS


def spark_triggers(handler: Handler) -> triggers.SparkTriggers:
    """Spark mode's processor over a fake session, its triggers one a second."""

    async def session() -> Any:
        return FakeSession()

    return triggers.SparkTriggers(
        handler,
        session=session,
        consumer="orders",
        pod="pod-a",
        settings=triggers.TriggerSettings(interval=1.0),
        executor=SteppedExecutor(),  # at once: a thread would make the loop's time real
    )


def rows(handler: Handler) -> list[tuple[str, int]]:
    return sorted(r for _, trigger in handler.triggers for r in trigger)


async def rotate_under_load(
    services: plain.Services,
    credentials: connections.Credentials,
    rewrite: Callable[[], object],
    regenerate: Callable[[], object],
) -> tuple[Handler, plain.Rotation[triggers.SparkTriggers]]:
    """As the plain-mode test (`plain.rotate_under_load`), with Spark's triggers."""
    handler = Handler()
    rotation = await plain.rotate_under_load(
        services, credentials, spark_triggers(handler), rewrite, regenerate
    )
    return handler, rotation


def assert_nothing_moved(
    services: plain.Services, handler: Handler, rotation: plain.Rotation[triggers.SparkTriggers]
) -> None:
    before, after = rotation.before, rotation.after
    assert set(before) == set(PARTITIONS)
    assert after == before  # the same worker objects
    assert all(w.path[:3] == ["fencing", "running", "releasing"] for w in after.values())
    assert services.fences == list(PARTITIONS)  # the first fences only
    assert services.opened == [("one", "one")]
    assert rows(handler) == [(p, n) for p in PARTITIONS for n in range(100)]  # none twice
    assert {p: c.sequence_number for p, c in services.store.blobs.items()} == {"0": 99, "1": 99}


async def test_a_new_storage_key_swaps_the_checkpoint_client_under_a_spark_pod(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = plain.Services(fake_hub, fake_store)
    services.blob_keys.accepted = {"one", "two"}
    _, blob_file, credentials = plain.secret_files(tmp_path)

    def regenerate() -> None:
        services.blob_keys.accepted = {"two"}

    handler, rotation = await rotate_under_load(
        services, credentials, lambda: blob_file.write_text(plain.blob_string("two")), regenerate
    )
    assert_nothing_moved(services, handler, rotation)
    assert services.renewed == [("one", "two")]
    assert not rotation.source.reports


async def test_a_new_eventhub_key_reopens_a_spark_pods_links_at_the_same_epoch(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = plain.Services(fake_hub, fake_store)
    services.eventhub_keys.accepted = {"one", "two"}
    eventhub_file, _, credentials = plain.secret_files(tmp_path)
    handler, rotation = await rotate_under_load(
        services,
        credentials,
        lambda: eventhub_file.write_text(plain.eventhub_string("two")),
        lambda: services.regenerate_eventhub_key("one", "two"),
    )
    assert_nothing_moved(services, handler, rotation)
    assert services.renewed == [("two", "one")]
    assert not rotation.source.reports
    links = [r for r in fake_hub.receivers if isinstance(r, plain.RefusingReceiver)]
    assert sorted((r.partition, r.key, r.epoch) for r in links) == [
        ("0", "one", 1),
        ("0", "two", 1),
        ("1", "one", 1),
        ("1", "two", 1),
    ]


async def test_a_spark_pod_failing_on_a_regenerated_eventhub_key_recovers_with_the_file(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = plain.Services(fake_hub, fake_store)
    eventhub_file, _, credentials = plain.secret_files(tmp_path)
    handler = Handler()
    async with plain.pod(services, credentials, spark_triggers(handler)) as (_, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        for partition in PARTITIONS:
            fake_hub.append(partition, 3)
        await consumerfakes.eventually(lambda: len(rows(handler)) == 6, what="processing")
        services.regenerate_eventhub_key("one", "two")
        for partition in PARTITIONS:
            fake_hub.append(partition, 2)
        await consumerfakes.eventually(
            lambda: set(source.reports) == set(PARTITIONS), what="every partition reported"
        )
        eventhub_file.write_text(plain.eventhub_string("two") + "\n")
        await consumerfakes.eventually(
            lambda: len(rows(handler)) == 10, within=10, what="processing with the new key"
        )
        await consumerfakes.eventually(lambda: not source.reports, what="the reports cleared")
    assert services.opened == [("one", "one")]
    assert rows(handler) == [(p, n) for p in PARTITIONS for n in range(5)]


async def test_a_spark_pod_whose_swap_fails_opens_new_clients_and_handles_nothing_twice(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = plain.Services(fake_hub, fake_store)
    services.blob_keys.accepted = {"one", "two"}
    services.refuse_swaps = True
    _, blob_file, credentials = plain.secret_files(tmp_path)
    handler = Handler()
    async with plain.pod(services, credentials, spark_triggers(handler)) as (consumer, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        feeder = asyncio.create_task(plain.feed(services, 50))
        await asyncio.sleep(3)
        blob_file.write_text(plain.blob_string("two"))
        await consumerfakes.eventually(
            lambda: len(services.opened) == 2 and set(consumer.owned()) == set(PARTITIONS),
            within=10,
            what="new clients opened and the partitions running again",
        )
        services.blob_keys.accepted = {"two"}
        await feeder
        await asyncio.sleep(5)
        assert not source.reports
    assert services.opened == [("one", "one"), ("one", "two")]
    assert rows(handler) == [(p, n) for p in PARTITIONS for n in range(50)]
    assert {p: c.sequence_number for p, c in services.store.blobs.items()} == {"0": 49, "1": 49}
