"""Copying the SDK's received events into the project's own frozen types.

The consumer runtime never sees an SDK type (``adapters.receiving``): each delivery is
copied into a :class:`deliveries.ReceivedEvent` (its body as bytes, its property names as
text), and the runtime metrics Event Hubs attaches to a delivery into a
:class:`deliveries.LastEnqueued`. Kept apart from the link's driving, which is about
failures and reopens, not about what an event holds.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from azure.eventhub import EventData
from azure.eventhub import _utils as sdk_utils

from eventhub_balancer.adapters import deliveries


def _body_bytes(event: EventData) -> bytes:
    body: Any = event.body
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, list | tuple) or hasattr(body, "__next__"):
        parts = list(body)
        if all(isinstance(p, bytes | bytearray | memoryview) for p in parts):
            return b"".join(bytes(p) for p in parts)
        body = parts
    # AMQP value/sequence bodies (rare with Event Hubs): keep them readable as JSON.
    return json.dumps(body, default=str).encode()


#: Stands in for a missing enqueued time (never seen from Event Hubs; typed as always set).
EPOCH_START = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def to_event(partition: str, event: EventData) -> deliveries.ReceivedEvent:
    """Copy an SDK event into our own frozen type."""
    key = event.partition_key
    properties = event.properties
    return deliveries.ReceivedEvent(
        partition=partition,
        sequence_number=int(event.sequence_number or 0),
        offset=event.offset or "",
        enqueued_time=event.enqueued_time or EPOCH_START,
        partition_key=None if key is None else _text(key),
        properties={_text(k): v for k, v in properties.items()} if properties else {},
        body=_body_bytes(event),
    )


def last_enqueued_of(event: EventData) -> deliveries.LastEnqueued | None:
    """The runtime metrics the service attached to a delivery, when it did."""
    props = sdk_utils.get_last_enqueued_event_properties(event)
    if not props or props.get("sequence_number") is None:
        return None
    return deliveries.LastEnqueued(
        sequence_number=int(props["sequence_number"]),
        offset=props.get("offset"),
        enqueued_time=props.get("enqueued_time"),
        retrieved_time=props.get("retrieval_time"),
    )
