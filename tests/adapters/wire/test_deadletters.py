"""Dead letters on Azurite: written where the checkpoints live, idempotent, listed, read,
marked as replayed and deleted (what ``ehb deadletters`` does with them)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deadletterreplays, deadletters, deliveries

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


async def test_a_dead_letter_lands_in_the_checkpoint_container(blob_container: Any) -> None:
    events = [
        deliveries.ReceivedEvent(
            partition="0",
            sequence_number=n,
            offset=str(n),
            enqueued_time=T0,
            partition_key=None,
            properties={},
            body=b"poison",
        )
        for n in (5, 6)
    ]
    writer = deadletters.DeadLetterWriter(
        blob_container,
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
    )
    name = await writer.write(events, error="boom", attempts=3, pod="pod-a", epoch=2)
    # The next owner writes the same batch again: the same blob, replaced.
    again = await writer.write(events, error="boom", attempts=3, pod="pod-b", epoch=3)
    assert name == again == "shop.servicebus.windows.net/orders/$default/deadletter/0/5-6.json"
    listed = [b.name async for b in blob_container.list_blobs(name_starts_with="shop")]
    assert listed == [name]
    data = await (await blob_container.download_blob(name)).readall()
    body = json.loads(data)
    assert (body["pod"], body["epoch"], [e["body"] for e in body["events"]]) == (
        "pod-b",
        3,
        ["poison", "poison"],
    )


def _batch(partition: str, first: int, last: int) -> list[deliveries.ReceivedEvent]:
    return [
        deliveries.ReceivedEvent(
            partition=partition,
            sequence_number=n,
            offset=str(n),
            enqueued_time=T0,
            partition_key=None,
            properties={"n": n},
            body=f"event {n}".encode(),
        )
        for n in range(first, last + 1)
    ]


async def test_dead_letters_are_listed_read_marked_and_deleted(blob_container: Any) -> None:
    where: dict[str, Any] = {
        "fully_qualified_namespace": "shop.servicebus.windows.net",
        "eventhub_name": "orders",
        "consumer_group": "$Default",
    }
    writer = deadletters.DeadLetterWriter(blob_container, **where)
    reader = deadletterreplays.DeadLetterReader(blob_container, **where)
    for partition, first, last in (("10", 1, 1), ("2", 30, 31), ("2", 4, 6)):
        await writer.write(
            _batch(partition, first, last),
            error="ValueError: bad\nmore",
            attempts=3,
            pod="pod-a",
            epoch=2,
        )
    # A checkpoint and a stray file beside them are not dead letters.
    await blob_container.upload_blob(
        "shop.servicebus.windows.net/orders/$default/checkpoint/2", b""
    )
    await blob_container.upload_blob(
        "shop.servicebus.windows.net/orders/$default/deadletter/2/notes.txt", b""
    )

    letters = (await reader.list()).letters
    # Partitions in numeric order, then by first sequence number.
    assert [(x.short_name, x.events, x.pod, x.replayed_time) for x in letters] == [
        ("2/4-6", 3, "pod-a", None),
        ("2/30-31", 2, "pod-a", None),
        ("10/1-1", 1, "pod-a", None),
    ]
    assert [x.short_name for x in (await reader.list(partition="10")).letters] == ["10/1-1"]

    name = reader.resolve("2/4-6")
    body, _ = await reader.read(name)
    assert [e.body for e in deadletters.decode_events(body)] == [b"event 4", b"event 5", b"event 6"]

    await reader.mark_replayed(name, to="hub", now=T0)
    (marked,) = [x for x in (await reader.list(partition="2")).letters if x.name == name]
    assert (marked.replayed_time, marked.replayed_to) == (T0.isoformat(), "hub")
    # The content stays as written: the mark is metadata only.
    assert (await reader.read(name))[0] == body

    await reader.delete(name)
    assert [x.short_name for x in (await reader.list()).letters] == ["2/30-31", "10/1-1"]
    with pytest.raises(errors.NotFound, match="ehb deadletters list"):
        await reader.read(name)


async def test_a_claimed_dead_letter_written_again_by_its_pod_is_neither_marked_nor_deleted(
    blob_container: Any,
) -> None:
    """A replay claims the blob it read; the next owner writes the same batch again (the
    dead-letter write is at least once) before the replay marks or deletes it: that newer
    dead letter stays listed as not replayed, and a second claim on the old read fails."""
    where: dict[str, Any] = {
        "fully_qualified_namespace": "shop.servicebus.windows.net",
        "eventhub_name": "orders",
        "consumer_group": "$Default",
    }
    writer = deadletters.DeadLetterWriter(blob_container, **where)
    reader = deadletterreplays.DeadLetterReader(blob_container, **where)
    name = await writer.write(_batch("0", 5, 6), error="e", attempts=3, pod="pod-a", epoch=2)
    fetched = await reader.fetch(name)
    claim = await reader.claim(name, fetched, now=T0)
    assert claim is not None
    # Another run that read the blob before the claim cannot claim it.
    assert await reader.claim(name, fetched, now=T0) is None
    (letter,) = (await reader.list()).letters
    assert letter.replaying_since == T0.isoformat()

    await writer.write(_batch("0", 5, 6), error="e", attempts=3, pod="pod-b", epoch=3)
    assert not await reader.mark_replayed(name, to="hub", now=T0, etag=claim)
    assert not await reader.delete(name, etag=claim)
    (letter,) = (await reader.list()).letters
    assert (letter.pod, letter.replayed_time, letter.replaying_since) == ("pod-b", None, None)

    # Released after a failed replay, the blob reads as it did before the claim.
    fetched = await reader.fetch(name)
    claim = await reader.claim(name, fetched, now=T0)
    assert claim is not None
    await reader.release(name, fetched, etag=claim)
    (letter,) = (await reader.list()).letters
    assert (letter.replayed_time, letter.replaying_since) == (None, None)
