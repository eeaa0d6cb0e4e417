"""Attaching a link: which kind of link an address asks for, and how a refusal looks.

The one place that knows the addresses Event Hubs accepts and the errors it answers with; kept
apart from the connection's frame handling (`connections`) and from what the links do once
attached (`eventlinks`, `requestlinks`).
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.eventhubs import (
    addresses,
    eventlinks,
    hubs,
    links,
    requestlinks,
    throttling,
)
from eventhub_balancer_devstack.eventhubs.amqp import frames, types
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf

RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
EPOCH = "com.microsoft:epoch"
#: How Event Hubs refuses a start past a partition's last event (`hubs.PositionPastEnd`).
ARGUMENT_ERROR = "com.microsoft:argument-error"
#: How Event Hubs refuses a sender or receiver link on a partition id its hub does not have
#: (`_invalid`): users of Azure's Python SDK have quoted this condition with the service's
#: words for a partition sender, and those words name senders and receivers alike.
ARGUMENT_OUT_OF_RANGE = "com.microsoft:argument-out-of-range"
#: How Event Hubs refuses a receiver on a hub whose status is Disabled: Azure's .NET client
#: has read this condition since late 2023 as a lasting "not found" that needs someone to act,
#: no longer as a passing fault it retried. Its words here are the emulator's own.
ENTITY_DISABLED = "com.microsoft:entity-disabled"

_SENDER_SETTLED = 1


def attach(connection: links.Carrier, frame: frames.Frame, session: links.Session) -> None:
    """Open the link an attach asks for, or refuse it the way Event Hubs would."""
    fields = frame.fields
    name = str(frames.field(fields, 0, ""))
    handle = int(frames.field(fields, 1, 0))
    role = bool(frames.field(fields, 2, False))
    if handle in session.links:
        raise links.ProtocolViolation("amqp:session:handle-in-use", f"handle {handle} is in use")
    source = frames.field(fields, 5)
    target = frames.field(fields, 6)
    snd_settle_mode = int(frames.field(fields, 3, 2))
    rcv_settle_mode = int(frames.field(fields, 4, 0))
    base = {"connection": connection, "session": session, "handle": handle, "name": name}
    if role == perf.ROLE_RECEIVER:
        # The client receives: we are the sender.
        address = _address_of(source)
        # The sender's attach decides its settle mode. Event Hubs never redelivers, so
        # sending settled changes nothing for the client but spares it a disposition
        # frame per event (half of its receive cost); replies honour the request.
        settled = True
        _attach_outgoing(
            connection, frame, session, base, address, settled, snd_settle_mode, rcv_settle_mode
        )
    else:
        address = _address_of(target)
        _attach_incoming(
            connection, frame, session, base, address, snd_settle_mode, rcv_settle_mode
        )


def _reply_attach(
    connection: links.Carrier,
    frame: frames.Frame,
    session: links.Session,
    *,
    role: bool,
    snd_settle_mode: int,
    rcv_settle_mode: int,
    properties: dict[Any, Any] | None = None,
    offered: list[str] | None = None,
) -> None:
    fields = frame.fields
    connection.write(
        perf.attach(
            channel=session.channel,
            name=str(frames.field(fields, 0, "")),
            handle=int(frames.field(fields, 1, 0)),
            role=role,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            source=_echo(frames.field(fields, 5), perf.SOURCE),
            target=_echo(frames.field(fields, 6), perf.TARGET),
            initial_delivery_count=0 if role == perf.ROLE_SENDER else None,
            max_message_size=links.MAX_MESSAGE_SIZE,
            offered_capabilities=offered,
            properties=properties,
        )
    )


def _refuse(
    connection: links.Carrier,
    frame: frames.Frame,
    session: links.Session,
    role: bool,
    condition: str,
    text: str,
) -> None:
    """Attach, then detach at once with an error: how a broker refuses a link. As Event Hubs
    does (and AMQP 1.0 asks of a refusal, 2.6.3), the attach carries no source and no target:
    the SDK sees a link that never opened, then the detach's error."""
    handle = int(frames.field(frame.fields, 1, 0))
    connection.write(
        perf.attach(
            channel=session.channel,
            name=str(frames.field(frame.fields, 0, "")),
            handle=handle,
            role=role,
            snd_settle_mode=2,
            rcv_settle_mode=0,
            source=None,
            target=None,
            initial_delivery_count=None,
            max_message_size=None,
        )
    )
    refused = links.Link(connection=connection, session=session, handle=handle, name="refused")
    refused.detached = True
    session.links[handle] = refused
    connection.write(
        perf.detach(
            channel=session.channel,
            handle=handle,
            closed=True,
            err=perf.error(condition, text),
        )
    )


def _attach_outgoing(
    connection: links.Carrier,
    frame: frames.Frame,
    session: links.Session,
    base: dict[str, Any],
    address: str | None,
    settled: bool,
    snd_settle_mode: int,
    rcv_settle_mode: int,
) -> None:
    role = perf.ROLE_SENDER
    try:
        parsed = addresses.parse(address)
    except addresses.InvalidAddress as e:
        _refuse(connection, frame, session, role, "amqp:not-found", str(e))
        return
    if parsed.kind in ("cbs", "management"):
        link: links.Link = requestlinks.ReplyLink(address=parsed.kind, settled=settled, **base)
        _reply_attach(
            connection,
            frame,
            session,
            role=role,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
        )
        session.links[link.handle] = link
        return
    if parsed.kind != "consumer" or parsed.partition is None:
        _refuse(
            connection,
            frame,
            session,
            role,
            "amqp:not-allowed",
            f"receive from '{parsed.hub}/ConsumerGroups/<group>/Partitions/<id>'",
        )
        return
    try:
        hub = connection.namespace.hub(parsed.hub)
        partition = hub.partition(parsed.partition)
        readers = hub.readers(parsed.consumer_group or "", parsed.partition)
        source = frames.field(frame.fields, 5)
        filters = frames.field(_described_fields(source), 7)
        position = addresses.start_position(filters)
        partition.check_start(position.field, position.value)
    except hubs.EntityNotFound as e:
        _refuse(connection, frame, session, role, "amqp:not-found", str(e))
        return
    except hubs.PartitionNotFound:
        _refuse(connection, frame, session, role, ARGUMENT_OUT_OF_RANGE, _invalid(hub, parsed))
        return
    except addresses.InvalidAddress as e:
        _refuse(connection, frame, session, role, "amqp:invalid-field", str(e))
        return
    except hubs.PositionPastEnd as e:
        _refuse(connection, frame, session, role, ARGUMENT_ERROR, _tracked(str(e), hub, parsed))
        return
    if hub.disabled:
        words = f"the messaging entity '{hub.name}' is disabled in this emulator"
        _refuse(connection, frame, session, role, ENTITY_DISABLED, _tracked(words, hub, parsed))
        return
    busy = connection.namespace.throttles.refusal(hub.name, partition.id, connection.clock())
    if busy is not None:
        _refuse(
            connection, frame, session, role, throttling.SERVER_BUSY, _tracked(busy, hub, parsed)
        )
        return
    properties = _map(frames.field(frame.fields, 13))
    owner_level = properties.get(EPOCH)
    desired = frames.field(frame.fields, 12) or []
    desired = [str(d) for d in (desired if isinstance(desired, list) else [desired])]
    link = eventlinks.ConsumerLink(
        partition=partition,
        readers=readers,
        next_sequence=_first_sequence(partition, position),
        runtime_metrics=RUNTIME_METRIC in desired,
        settled=settled,
        **base,
    )
    try:
        stolen = readers.claim(link, None if owner_level is None else int(owner_level))
    except hubs.OwnerLevelConflict as e:
        link.close()
        _refuse(connection, frame, session, role, "amqp:link:stolen", str(e))
        return
    except hubs.ReceiverLimitExceeded as e:
        link.close()
        limit = _tracked(str(e), hub, parsed)
        _refuse(connection, frame, session, role, throttling.RESOURCE_LIMIT, limit)
        return
    for other in stolen:
        assert isinstance(other, eventlinks.ConsumerLink)
        other.steal(
            f"receiver '{link.name}' with a higher owner level ({owner_level}) opened on "
            f"partition {partition.id} of '{hub.name}'"
        )
    _reply_attach(
        connection,
        frame,
        session,
        role=role,
        snd_settle_mode=_SENDER_SETTLED,
        rcv_settle_mode=rcv_settle_mode,
        properties=None if owner_level is None else {types.Symbol(EPOCH): owner_level},
        offered=[d for d in desired if d == RUNTIME_METRIC],
    )
    session.links[link.handle] = link


def _attach_incoming(
    connection: links.Carrier,
    frame: frames.Frame,
    session: links.Session,
    base: dict[str, Any],
    address: str | None,
    snd_settle_mode: int,
    rcv_settle_mode: int,
) -> None:
    role = perf.ROLE_RECEIVER
    try:
        parsed = addresses.parse(address)
        link: links.IncomingLink
        if parsed.kind in ("cbs", "management"):
            link = requestlinks.RequestLink(kind=parsed.kind, **base)
            counts = connection.namespace.request_links
            counts[parsed.kind] = counts.get(parsed.kind, 0) + 1
        elif parsed.kind == "hub":
            link = eventlinks.ProducerLink(
                hub=connection.namespace.hub(parsed.hub), partition=None, **base
            )
        elif parsed.kind == "partition":
            hub = connection.namespace.hub(parsed.hub)
            link = eventlinks.ProducerLink(
                hub=hub, partition=hub.partition(parsed.partition or ""), **base
            )
        else:
            raise addresses.InvalidAddress(f"cannot send to a consumer group ({address})")
    except (addresses.InvalidAddress, hubs.EntityNotFound) as e:
        _refuse(connection, frame, session, role, "amqp:not-found", str(e))
        return
    except hubs.PartitionNotFound:
        words = _invalid(connection.namespace.hub(parsed.hub), parsed)
        _refuse(connection, frame, session, role, ARGUMENT_OUT_OF_RANGE, words)
        return
    link.delivery_count = int(frames.field(frame.fields, 9, 0))
    _reply_attach(
        connection,
        frame,
        session,
        role=role,
        snd_settle_mode=snd_settle_mode,
        rcv_settle_mode=rcv_settle_mode,
    )
    session.links[link.handle] = link
    connection.send_flow(session, link=link)


def _tracked(description: str, hub: hubs.Hub, address: addresses.Address) -> str:
    """A refusal's words followed by the tracking tail Event Hubs appends (clients must cut
    it off, not show it)."""
    return (
        f"{description} TrackingId:emulator, SystemTracker:emulator:eventhub:{hub.name}~32766"
        f"|{address.consumer_group}, Timestamp:emulator"
    )


def _invalid(hub: hubs.Hub, address: addresses.Address) -> str:
    """What Event Hubs says, in its own words, to a link on a partition id its hub lacks (a
    hub deleted and created again with fewer partitions): the partition is invalid for a
    sender or receiver, the valid ids are 0 up to the last, and the parameter is named on a
    second line, before the tracking tail."""
    return _tracked(
        "The specified partition is invalid for an EventHub partition sender or receiver. "
        f"It should be between 0 and {len(hub.partitions) - 1}.\r\nParameter name: PartitionId",
        hub,
        address,
    )


def _described_fields(value: Any) -> list[Any]:
    if isinstance(value, types.Described) and isinstance(value.value, list):
        return value.value
    return []


def _address_of(terminus: Any) -> str | None:
    address = frames.field(_described_fields(terminus), 0)
    if isinstance(address, bytes):
        return address.decode("utf-8", "replace")
    return None if address is None else str(address)


def _echo(terminus: Any, code: int) -> Any:
    """The terminus as the client sent it (the SDK detaches when one is missing)."""
    if isinstance(terminus, types.Described):
        return terminus
    return types.Described(types.ULong(code), [None])


def _map(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return {}


def _first_sequence(partition: hubs.Partition, position: addresses.StartPosition) -> int:
    if position.field == "latest":
        return partition.next_sequence_number
    if position.field == "sequence":
        return position.value if position.inclusive else position.value + 1
    if position.field == "time":
        return partition.sequence_after_time(position.value, inclusive=position.inclusive)
    if position.value < 0:
        return partition.begin_sequence_number
    return partition.sequence_after_offset(position.value, inclusive=position.inclusive)
