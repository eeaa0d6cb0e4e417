"""Event Hubs' limits on receivers: throttling on demand, and the 5 readers per partition.

Azure throttles a namespace that goes over its throughput units (or a busy entity) by
refusing links, and detaching open ones, with ``com.microsoft:server-busy`` and words that
say how long to wait (``... Please wait 4 seconds and try again.``). The emulator never runs
out of capacity, so a test asks for it (`Throttles`, through
``EventHubsEmulator.throttle``): for a while, receive links on a hub (or some of its
partitions) are refused as Azure refuses them, and each refusal is recorded, so that a test
can tell how hard a client pressed on a throttled service.

Azure also lets at most 5 receivers without an owner level read one partition in one
consumer group; a sixth is refused with ``amqp:resource-limit-exceeded``
(`RECEIVERS_PER_PARTITION`, enforced by ``hubs.Readers``). Receivers with an owner level are
never counted: only one of them is ever open.
"""

from __future__ import annotations

import dataclasses

#: How Event Hubs refuses (or detaches) a link while it throttles.
SERVER_BUSY = "com.microsoft:server-busy"
#: How long Event Hubs asks a throttled client to wait, unless a test says otherwise.
WAIT_SECONDS = 4

#: Receivers without an owner level on one partition of one consumer group, at most.
RECEIVERS_PER_PARTITION = 5
#: How Event Hubs refuses the receiver past that limit.
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"


def busy_words(wait_seconds: int) -> str:
    """Event Hubs' words for a throttled request (clients have quoted them), with the
    service's link to its error codes."""
    return (
        "The request was terminated because the entity is being throttled. Error code : "
        f"50002. Please wait {wait_seconds} seconds and try again. To know more visit "
        "https://aka.ms/sbResourceMgrExceptions"
    )


def limit_words() -> str:
    """Event Hubs' words for a receiver past the limit (``nil``: receivers that gave no
    identifier, as the SDK's do)."""
    listed = ", ".join(["nil"] * RECEIVERS_PER_PARTITION)
    return (
        "Exceeded the maximum number of allowed receivers per partition in a consumer group "
        f"which is {RECEIVERS_PER_PARTITION}. List of connected receivers - {listed}."
    )


@dataclasses.dataclass(frozen=True)
class Throttle:
    """One throttling window: receive links on ``hub`` (all its partitions, or those named)
    are refused until ``until_ms``."""

    hub: str
    partitions: frozenset[str] | None
    until_ms: int
    wait_seconds: int

    def covers(self, hub: str, partition: str, now_ms: int) -> bool:
        return (
            now_ms < self.until_ms
            and hub.lower() == self.hub.lower()
            and (self.partitions is None or partition in self.partitions)
        )


class Throttles:
    """The throttling windows of one namespace, and the receive links they refused."""

    def __init__(self) -> None:
        self._windows: list[Throttle] = []
        #: hub (lower case) -> when each refused attach came (clock ms), oldest first
        self.refusals: dict[str, list[int]] = {}

    def add(self, throttle: Throttle) -> None:
        if throttle.wait_seconds < 1:
            raise ValueError(f"a throttled client waits 1 s or more, not {throttle.wait_seconds}")
        self._windows.append(throttle)

    def clear(self, hub: str | None = None) -> None:
        """End every window (of ``hub``, or all of them) now."""
        self._windows = [
            w for w in self._windows if hub is not None and w.hub.lower() != hub.lower()
        ]

    def refusal(self, hub: str, partition: str, now_ms: int) -> str | None:
        """Event Hubs' words when a receive link on ``partition`` of ``hub`` is refused now
        (the refusal is recorded), or None when nothing throttles it."""
        self._windows = [w for w in self._windows if now_ms < w.until_ms]
        for window in self._windows:
            if window.covers(hub, partition, now_ms):
                self.refusals.setdefault(hub.lower(), []).append(now_ms)
                return busy_words(window.wait_seconds)
        return None
