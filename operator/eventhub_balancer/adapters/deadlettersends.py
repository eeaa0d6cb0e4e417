"""A dead letter's events sent back into their Event Hub (``ehb deadletters replay --to-hub``).

Each event goes out with its body, properties and partition key, plus `REPLAY_PROPERTY`
naming the dead letter it came from. Event Hubs has no idempotent send: each call adds the
events again, which is why a replay claims its blob first (`deadletterreplays`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, Final

from azure.eventhub import EventData

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, eventhubs
from eventhub_balancer.adapters.deadletters import first_line
from eventhub_balancer.contracts import conditions

#: Sending one dead letter's events back into the hub (a few batches at most).
SEND_TIMEOUT_S: Final = 60.0
#: The application property a replayed event carries: the dead letter it came from, so that
#: consumers (and people reading the hub) can tell a replay from the original.
REPLAY_PROPERTY: Final = "ehb-replay-of"


def event_data(event: deliveries.ReceivedEvent, *, replay_of: str) -> EventData:
    """The event to send again: same body and properties, plus where the replay came from."""
    data = EventData(event.body)
    properties: dict[str | bytes, Any] = {k: v for k, v in event.properties.items()}
    properties[REPLAY_PROPERTY] = replay_of
    data.properties = properties
    return data


def send_groups(
    events: Sequence[deliveries.ReceivedEvent],
) -> list[tuple[dict[str, str], list[deliveries.ReceivedEvent]]]:
    """Runs of events that go into one batch, in order: by partition key when an event had
    one (Event Hubs hashes it to the same partition again), else to the partition it came
    from, so that a replay keeps the batch's order within its partition."""
    groups = []
    for (key, partition), run in itertools.groupby(
        events, key=lambda e: (e.partition_key, e.partition)
    ):
        target = {"partition_key": key} if key is not None else {"partition_id": partition}
        groups.append((target, list(run)))
    return groups


async def replay_to_hub(
    coordinates: eventhubs.Coordinates,
    events: Sequence[deliveries.ReceivedEvent],
    *,
    replay_of: str,
    limit_seconds: float = SEND_TIMEOUT_S,
) -> int:
    """Send the events back into their hub; returns how many were sent.

    Each event goes out once per call: a failure part-way may have sent some (Event Hubs
    has no idempotent send), and the caller leaves the dead letter unmarked so that the
    user sees it was not replayed whole.
    """
    where = f"Event Hub {coordinates.eventhub_name!r} in {coordinates.fully_qualified_namespace}"
    sent = 0
    try:
        async with asyncio.timeout(limit_seconds), eventhubs.producer(coordinates) as producer:
            for target, run in send_groups(events):
                batch = await producer.create_batch(**target)  # type: ignore[arg-type]
                for event in run:
                    data = event_data(event, replay_of=replay_of)
                    try:
                        batch.add(data)
                    except ValueError:  # the batch is full: send it, start the next
                        if len(batch) == 0:
                            raise errors.ConfigurationError(
                                f"{where}: event {event.sequence_number} of {replay_of} is larger "
                                "than the hub accepts in one batch; replay it through a handler"
                            ) from None
                        await producer.send_batch(batch)
                        sent += len(batch)
                        batch = await producer.create_batch(**target)  # type: ignore[arg-type]
                        batch.add(data)
                if len(batch):
                    await producer.send_batch(batch)
                    sent += len(batch)
    except errors.EventHubBalancerError:
        raise
    except TimeoutError as e:
        raise errors.EventHubUnreachable(
            f"{where}: the replay of {replay_of} took longer than {limit_seconds:g} s "
            f"({sent} of {conditions.amount(len(events), 'event')} sent)"
        ) from e
    except Exception as e:
        text = str(e).lower()
        if "unauthorized" in text or type(e).__name__ == "AuthenticationError":
            raise errors.EventHubAuthenticationFailed(
                f"{where}: the credentials were rejected; a replay sends, so the connection "
                "string needs Send rights (or the identity the Azure Event Hubs Data Sender role)"
            ) from e
        raise errors.EventHubUnreachable(
            f"{where}: the replay of {replay_of} failed after {sent} of "
            f"{conditions.amount(len(events), 'event')} "
            f"({type(e).__name__}: {first_line(str(e))[:300]})"
        ) from e
    return sent
