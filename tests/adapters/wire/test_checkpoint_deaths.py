"""The deaths a checkpoint blob counts (``ehbdeaths``) on Azurite: written beside the
checkpoint by its owner, kept through the fence of the next owner (unleased and leased) and
through the owner's checkpoint writes, dropped once a checkpoint passes the batch; a blob
without it, or with one that does not parse, counts nothing and is never refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointtakeovers
from eventhub_balancer.contracts import checkpointblobs
from tests.adapters.wire.test_checkpoints_store import metadata, store

DEATHS = checkpointblobs.Deaths(first=10, attempts=3)


async def test_the_deaths_round_trip_through_fences_and_checkpoints_and_go_past_the_batch(
    blob_container: Any,
) -> None:
    a, b = store(blob_container, "pod-a"), store(blob_container, "pod-b")
    await a.fence("0", 1)
    await a.update("0", offset="90", sequence_number=9)
    written = await a.record_deaths("0", DEATHS)
    assert (written.deaths, written.sequence_number) == (DEATHS, 9)
    assert (await metadata(blob_container, "0"))["ehbdeaths"] == "10:3"
    # The same owner's checkpoint write that does not pass the batch keeps it (a release).
    assert (await a.update("0", offset="90", sequence_number=9)).deaths == DEATHS
    assert (await a.keep("0")) is not None

    taken = await b.fence("0", 2)  # the next owner reads it as it fences, and keeps it
    assert (taken.deaths, taken.epoch) == (DEATHS, 2)
    assert (await metadata(blob_container, "0"))["ehbdeaths"] == "10:3"
    with pytest.raises(errors.OwnershipLost):
        await a.record_deaths("0", checkpointblobs.Deaths(first=10, attempts=9))
    counted = await b.record_deaths("0", checkpointblobs.Deaths(first=10, attempts=4))
    assert (await b.read("0")) == counted

    passed = await b.update("0", offset="190", sequence_number=19)
    assert passed.deaths is None
    assert "ehbdeaths" not in await metadata(blob_container, "0")
    assert (await b.read("0")).deaths is None  # type: ignore[union-attr]


async def test_a_leased_takeover_keeps_the_deaths(blob_container: Any) -> None:
    a, b = store(blob_container, "pod-a"), store(blob_container, "pod-b")
    await a.fence("0", 1)
    await a.update("0", offset="90", sequence_number=9)
    await a.record_deaths("0", DEATHS)
    read = await b.read("0")
    assert read is not None
    taken = await checkpointtakeovers.take_over(
        b._blobs, "0", 2, read, b._budget("fence", "0"), release_within=5
    )
    assert taken is not None
    assert (taken.epoch, taken.deaths) == (2, DEATHS)
    assert (await metadata(blob_container, "0"))["ehbdeaths"] == "10:3"


@pytest.mark.parametrize("raw", ["", "10", "x:3", "10:0", "-1:2", "10:3:1"])
async def test_a_malformed_count_is_ignored_with_a_warning_and_never_blocks_the_partition(
    blob_container: Any, raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = "shop.servicebus.windows.net/orders/$default/checkpoint/0"
    await blob_container.get_blob_client(name).upload_blob(
        b"", metadata={"offset": "90", "sequencenumber": "9", "ehbdeaths": raw}
    )
    caplog.set_level(logging.WARNING)
    taken = await store(blob_container, "pod-a").fence("0", 1)
    assert (taken.sequence_number, taken.epoch, taken.deaths) == (9, 1, None)
    assert f"metadata.ehbdeaths of {name} ignored" in caplog.text
    assert "ehbdeaths" not in await metadata(blob_container, "0")


async def test_an_sdk_written_blob_counts_no_deaths(blob_container: Any) -> None:
    name = "shop.servicebus.windows.net/orders/$default/checkpoint/0"
    await blob_container.get_blob_client(name).upload_blob(
        b"", metadata={"offset": "90", "sequencenumber": "9"}
    )
    taken = await store(blob_container, "pod-a").fence("0", 1)
    assert (taken.sequence_number, taken.deaths) == (9, None)
    assert "ehbdeaths" not in await metadata(blob_container, "0")
