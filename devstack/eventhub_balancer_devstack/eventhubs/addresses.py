"""Link addresses and start positions: what a client's attach asks for.

Addresses arrive as ``amqps://host:port/<hub>[/Partitions/<n>]`` (senders) or
``.../<hub>/ConsumerGroups/<cg>/Partitions/<n>`` (receivers), or ``$cbs``/``$management``;
only the path counts. A receiver's start comes as an Apache selector filter such as
``amqp.annotation.x-opt-offset > '-1'``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

from eventhub_balancer_devstack.eventhubs.amqp import types

CBS = "$cbs"
MANAGEMENT = "$management"
SELECTOR_FILTER = "apache.org:selector-filter:string"

#: The offset of the start of a partition and of its end, as the SDK writes them.
OFFSET_START = "-1"
OFFSET_LATEST = "@latest"


class InvalidAddress(ValueError):
    """The address names no entity this server knows how to serve."""


@dataclasses.dataclass(frozen=True, slots=True)
class Address:
    """A parsed link address; ``kind`` says which entity it names."""

    kind: Literal["cbs", "management", "hub", "partition", "consumer"]
    hub: str = ""
    partition: str | None = None
    consumer_group: str | None = None


def path_of(address: str) -> str:
    if "://" in address:
        rest = address.split("://", 1)[1]
        address = rest.split("/", 1)[1] if "/" in rest else ""
    return address.strip("/")


def parse(address: str | None) -> Address:
    if not address:
        raise InvalidAddress("the link has no address")
    path = path_of(address)
    parts = path.split("/")
    if path == CBS:
        return Address(kind="cbs")
    if path == MANAGEMENT or parts[-1] == MANAGEMENT:
        return Address(kind="management")
    lowered = [p.lower() for p in parts]
    if len(parts) == 1 and parts[0]:
        return Address(kind="hub", hub=parts[0])
    if len(parts) == 3 and lowered[1] == "partitions":
        return Address(kind="partition", hub=parts[0], partition=parts[2])
    if len(parts) == 5 and lowered[1] == "consumergroups" and lowered[3] == "partitions":
        return Address(kind="consumer", hub=parts[0], consumer_group=parts[2], partition=parts[4])
    raise InvalidAddress(f"the address '{path}' names no hub, partition or consumer group")


@dataclasses.dataclass(frozen=True, slots=True)
class StartPosition:
    """Where a receiver starts: ``field`` compared with ``value`` (see ``addresses``)."""

    field: Literal["offset", "sequence", "time", "latest"]
    value: int
    inclusive: bool


EARLIEST = StartPosition(field="offset", value=-1, inclusive=False)

_SELECTOR = re.compile(
    r"^\s*amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>|=)\s*'([^']*)'\s*$"
)
_FIELDS: dict[str, Literal["offset", "sequence", "time"]] = {
    "offset": "offset",
    "sequence-number": "sequence",
    "enqueued-time": "time",
}


def start_position(filters: Any) -> StartPosition:
    """Read the selector filter of a receiver's source (none: the start of the partition)."""
    if not filters:
        return EARLIEST
    if not isinstance(filters, dict):
        raise InvalidAddress("the source's filter set is not a map")
    selector = filters.get(types.Symbol(SELECTOR_FILTER))
    if selector is None:
        return EARLIEST
    expression = selector.value if isinstance(selector, types.Described) else selector
    if isinstance(expression, bytes):
        expression = expression.decode("utf-8", "replace")
    match = _SELECTOR.match(str(expression))
    if match is None:
        raise InvalidAddress(f"unsupported selector filter {expression!r}")
    name, comparison, text = match.groups()
    inclusive = comparison != ">"
    if name == "offset" and text == OFFSET_LATEST:
        return StartPosition(field="latest", value=0, inclusive=False)
    try:
        value = int(text)
    except ValueError:
        raise InvalidAddress(f"the selector filter value {text!r} is not a number") from None
    return StartPosition(field=_FIELDS[name], value=value, inclusive=inclusive)
