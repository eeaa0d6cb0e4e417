"""What a test does to the emulator's links and entities, as Event Hubs and the network do:
throttle, detach, hang or drop receive links and connections, delete a consumer group,
disable a hub. `emulator.EventHubsEmulator` takes these from `Faults`; each may be called
from any thread (it runs on the emulator's loop: `_call`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from eventhub_balancer_devstack.eventhubs import connections, eventlinks, hubs, throttling

_T = TypeVar("_T")


class Faults:
    """The emulator's fault injection; the emulator provides its state and `_call`."""

    _namespace: hubs.Namespace
    _connections: set[connections.Connection]
    _blackholed: bool

    def _call(self, function: Callable[[], _T]) -> _T:
        raise NotImplementedError  # the emulator's own

    def delete_consumer_group(
        self, hub: str, name: str, *, detach_condition: str | None = None
    ) -> int:
        """Remove a consumer group: each receive link attached to it afterwards is refused
        with ``amqp:not-found``, as Event Hubs refuses one on a group that does not exist.
        What Event Hubs does to the group's open links when it is deleted is not known here:
        they are left open, or detached with ``detach_condition`` (as `detach` does) in the
        same step. Returns how many open links it detached."""

        def delete() -> int:
            readers = self._namespace.hub(hub).consumer_groups.pop(name)
            if detach_condition is None:
                return 0
            return _detach(
                [link for group in readers.values() for link in group.open()], detach_condition
            )

        return self._call(delete)

    def disable_hub(self, hub: str, disabled: bool = True) -> None:
        """Set ``hub``'s status to Disabled (or back to Active): each receive link attached
        meanwhile is refused with ``com.microsoft:entity-disabled``. Open links are left as
        they are: what Event Hubs does to them is not known here (`detach` ends them)."""

        def switch() -> None:
            self._namespace.hub(hub).disabled = disabled

        self._call(switch)

    def throttle(
        self,
        hub: str,
        *,
        seconds: float,
        partitions: Iterable[str] | None = None,
        wait_seconds: int = throttling.WAIT_SECONDS,
    ) -> int:
        """Throttle receivers on ``hub`` (or on ``partitions`` of it) for ``seconds``, as
        Event Hubs does a namespace over its capacity: each open receiver is detached at once
        with ``com.microsoft:server-busy`` and the service's words (``Please wait
        {wait_seconds} seconds and try again``), and each receive link attached meanwhile is
        refused the same way (`throttled_attaches` records when). Returns how many open
        receivers it detached."""
        chosen = None if partitions is None else frozenset(partitions)

        def start() -> int:
            target = self._namespace.hub(hub)
            window = throttling.Throttle(
                hub=target.name,
                partitions=chosen,
                until_ms=_now_ms() + int(seconds * 1000),
                wait_seconds=wait_seconds,
            )
            self._namespace.throttles.add(window)
            words = throttling.busy_words(wait_seconds)
            return _detach(self._receivers(hub, chosen), throttling.SERVER_BUSY, words)

        return self._call(start)

    def detach(
        self,
        hub: str,
        *,
        partitions: Iterable[str] | None = None,
        condition: str = "amqp:link:detach-forced",
    ) -> int:
        """Detach every open receiver on ``hub`` (or on ``partitions`` of it) with
        ``condition``, as Event Hubs does on its own (a service upgrade, a partition moved
        between its nodes): unlike `throttle`, a reattach is accepted at once. Returns how
        many receivers it detached."""

        def start() -> int:
            return _detach(self._receivers(hub, partitions), condition)

        return self._call(start)

    def _receivers(
        self, hub: str, partitions: Iterable[str] | None
    ) -> list[eventlinks.ConsumerLink]:
        """The open receive links on ``hub`` (or on ``partitions`` of it); on the loop."""
        chosen = None if partitions is None else frozenset(partitions)
        found: list[eventlinks.ConsumerLink] = []
        for group in self._namespace.hub(hub).consumer_groups.values():
            for partition, readers in group.items():
                if chosen is None or partition in chosen:
                    for link in readers.open():
                        assert isinstance(link, eventlinks.ConsumerLink)
                        found.append(link)
        return found

    def clear_throttles(self, hub: str | None = None) -> None:
        """End throttling now (of ``hub``, or everywhere)."""
        self._call(lambda: self._namespace.throttles.clear(hub))

    def throttled_attaches(self, hub: str) -> list[float]:
        """When (``time.time()`` seconds) each receive link refused by throttling on
        ``hub`` came, oldest first."""
        refused = self._call(lambda: list(self._namespace.throttles.refusals.get(hub.lower(), [])))
        return [ms / 1000 for ms in refused]

    def hang(self, hub: str, *, partitions: Iterable[str] | None = None) -> int:
        """Make every connection that receives from ``hub`` (or from ``partitions`` of it)
        hang, as a NAT gateway or firewall that lost the flow: its socket stays open, and
        nothing either side sends arrives any more, heartbeats included. Connections opened
        afterwards work. Returns how many connections hang."""

        def start() -> int:
            hung: set[connections.Connection] = set()
            for link in self._receivers(hub, partitions):
                assert isinstance(link.connection, connections.Connection)
                hung.add(link.connection)
            for connection in hung:
                connection.hang()
            return len(hung)

        return self._call(start)

    def blackhole(self, on: bool = True) -> int:
        """Stop answering anyone, as Event Hubs behind a network path that drops everything:
        every open connection hangs (`hang`), and every connection opened meanwhile is
        accepted but never answered, not even the protocol header (a SYN answered by a load
        balancer whose back end is gone). ``blackhole(False)`` ends it for connections opened
        afterwards; the hung ones stay hung. Returns how many open connections it hung."""

        def switch() -> int:
            self._blackholed = on
            if not on:
                return 0
            hung = [c for c in self._connections if not c.hung]
            for connection in hung:
                connection.hang()
            return len(hung)

        return self._call(switch)

    def disconnect_all(self) -> int:
        """Drop every client connection abruptly (chaos); returns how many were dropped."""

        def drop() -> int:
            dropped = list(self._connections)
            for connection in dropped:
                connection.abort()
            return len(dropped)

        return self._call(drop)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _detach(links: Iterable[Hashable], condition: str, words: str = "") -> int:
    """Detach each open receive link with ``condition`` (on the loop); how many."""
    count = 0
    for link in links:
        assert isinstance(link, eventlinks.ConsumerLink)
        link.connection.detach_with_error(
            link, condition=condition, description=words or "the link was detached (test)"
        )
        count += 1
    return count
