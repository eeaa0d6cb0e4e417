"""Requests on ``$cbs`` and ``$management``: token puts and hub/partition properties.

The SDK sends a request message on a link whose target is ``$cbs`` or ``$management`` and
waits for the reply, matched by ``correlation-id`` = the request's ``message-id``, on the
same connection's link whose source has that address. Tokens are accepted as they are: the
emulator does not check signatures (the SDK's development-emulator mode still sends them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eventhub_balancer_devstack.eventhubs import hubs
from eventhub_balancer_devstack.eventhubs.amqp import decoding, encoding, types

_PROPERTIES = 0x73
_APPLICATION_PROPERTIES = 0x74
_AMQP_VALUE = 0x77
#: The properties section has 13 fields; the SDK builds a namedtuple from all of them.
_PROPERTY_FIELDS = 13
_MESSAGE_ID = 0
_REPLY_TO = 4

#: The status the service gives an accepted token (the SDK takes any 2xx).
TOKEN_ACCEPTED = 202


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """A decoded management or CBS request."""

    message_id: Any
    reply_to: str | None
    application_properties: dict[str, Any]
    body: Any


def parse_request(data: bytes) -> Request:
    message_id: Any = None
    reply_to = None
    application_properties: dict[str, Any] = {}
    body: Any = None
    pos = 0
    while pos < len(data):
        section, pos = decoding.decode(data, pos)
        if not isinstance(section, types.Described):
            raise decoding.DecodeError("message section is not a described value")
        code = section.descriptor
        if code == _PROPERTIES and isinstance(section.value, list):
            values = section.value + [None] * _PROPERTY_FIELDS
            message_id = values[_MESSAGE_ID]
            reply_to = None if values[_REPLY_TO] is None else str(values[_REPLY_TO])
        elif code == _APPLICATION_PROPERTIES and isinstance(section.value, dict):
            application_properties = {str(k): v for k, v in section.value.items()}
        elif code in (0x75, _AMQP_VALUE):
            body = section.value
    return Request(message_id, reply_to, application_properties, body)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def reply(request: Request, *, status: int, description: str, body: Any = None) -> bytes:
    """Encode the reply message to ``request``."""
    properties = [None] * _PROPERTY_FIELDS
    properties[5] = request.message_id  # correlation-id
    out = bytearray()
    encoding.write(out, types.Described(types.ULong(_PROPERTIES), properties))
    encoding.write(
        out,
        types.Described(
            types.ULong(_APPLICATION_PROPERTIES),
            {"status-code": types.Int(status), "status-description": description},
        ),
    )
    if body is not None:
        encoding.write(out, types.Described(types.ULong(_AMQP_VALUE), body))
    return bytes(out)


def answer_cbs(request: Request) -> bytes:
    operation = _text(request.application_properties.get("operation"))
    if operation != "put-token":
        return reply(request, status=400, description=f"unsupported CBS operation {operation!r}")
    return reply(request, status=TOKEN_ACCEPTED, description="Accepted")


def answer_management(request: Request, *, namespace: hubs.Namespace, now_ms: int) -> bytes:
    properties = request.application_properties
    operation = _text(properties.get("operation"))
    entity_type = _text(properties.get("type"))
    name = _text(properties.get("name"))
    if operation != "READ":
        return reply(request, status=400, description=f"unsupported operation {operation!r}")
    try:
        hub = namespace.hub(name)
        if entity_type == "com.microsoft:eventhub":
            return reply(request, status=200, description="OK", body=_hub_body(hub))
        if entity_type == "com.microsoft:partition":
            partition = hub.partition(_text(properties.get("partition")))
            return reply(request, status=200, description="OK", body=_partition_body(partition))
    except hubs.EntityNotFound as e:
        return reply(request, status=404, description=str(e))
    except hubs.PartitionNotFound as e:
        return reply(request, status=400, description=str(e))
    return reply(request, status=400, description=f"unsupported entity type {entity_type!r}")


def _hub_body(hub: hubs.Hub) -> dict[str, Any]:
    return {
        "name": hub.name,
        "created_at": types.Timestamp(hub.created_ms),
        "partition_count": types.Int(len(hub.partitions)),
        "partition_ids": hub.partition_ids,
        "type": "com.microsoft:eventhub",
    }


def _partition_body(partition: hubs.Partition) -> dict[str, Any]:
    info = partition.info()
    return {
        "name": info.hub,
        "type": "com.microsoft:partition",
        "partition": info.partition,
        "begin_sequence_number": info.begin_sequence_number,
        "last_enqueued_sequence_number": info.last_enqueued_sequence_number,
        "last_enqueued_offset": str(info.last_enqueued_offset),
        "last_enqueued_time_utc": types.Timestamp(info.last_enqueued_ms),
        "is_partition_empty": info.is_empty,
    }
