"""The Event Hubs emulator's public face: start, stop, hubs, and connection strings.

It runs either on the caller's event loop (``async with EventHubsEmulator(...)``) or on its
own loop in a background thread (``with emu.running_in_thread():``), which the sync SDK,
kopf tests and subprocess tests need. Methods that touch the state (``create_hub``,
``add_partitions``, ``partition_info``, and the faults of `faults`) may be called from any
thread: they hop onto the emulator's loop when called from elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TypeVar

from eventhub_balancer import runners
from eventhub_balancer_devstack.eventhubs import connections, faults, hubs

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The key the SDK's development-emulator mode expects in a connection string. Its value is
#: never checked: the emulator accepts every token (see ``management``).
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
#: How long start_in_thread waits for the server socket.
THREAD_START_TIMEOUT_S = 10.0
THREAD_STOP_TIMEOUT_S = 10.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def connection_string(host: str, port: int, hub: str | None = None) -> str:
    """The emulator's connection string for the SDK, with its own key; with ``hub``, scoped to
    it (``EntityPath``)."""
    value = (
        f"Endpoint=sb://{host}:{port};SharedAccessKeyName={KEY_NAME};"
        f"SharedAccessKey={KEY};UseDevelopmentEmulator=true"
    )
    return value if hub is None else f"{value};EntityPath={hub}"


class EventHubsEmulator(faults.Faults):
    """An AMQP 1.0 server on ``host`` that the azure-eventhub SDK takes for Event Hubs.

    ``consumer_groups`` are the groups every hub has (others: ``create_consumer_group``;
    receivers on an unknown group fail with not-found, as on Azure). ``retention_events``
    keeps at most that many events per partition (None: all). ``namespace`` only names the
    emulator in logs and the container id; the SDK derives its namespace from host:port.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        hubs: Mapping[str, int] | None = None,
        consumer_groups: Iterable[str] = ("$Default",),
        retention_events: int | None = None,
        namespace: str | None = None,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.namespace_name = namespace or "emulator"
        self._namespace = _new_namespace(consumer_groups, retention_events)
        for name, count in (hubs or {}).items():
            self._namespace.create_hub(name, count, now_ms=_now_ms())
        self._connections: set[connections.Connection] = set()
        #: connections accepted since the start (a client that reuses one opens no more)
        self._accepted = 0
        #: every connection, new ones included, hangs (`blackhole`)
        self._blackholed = False
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: runners.BackgroundLoop | None = None
        self.port = port

    # --- lifecycle on the caller's loop ---------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the emulator is running already")
        self._loop = asyncio.get_running_loop()
        container = f"eventhubs-emulator-{self.namespace_name}"

        def accept() -> connections.Connection:
            self._accepted += 1
            connection = connections.Connection(
                namespace=self._namespace,
                registry=self._connections,
                clock=_now_ms,
                container_id=container,
            )
            if self._blackholed:
                connection.hang()
            return connection

        self._server = await self._loop.create_server(
            accept,
            host=self.host,
            port=self._requested_port,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("Event Hubs emulator listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for connection in list(self._connections):
            connection.abort()
        await server.wait_closed()
        # Let the aborted transports run connection_lost before the loop may close.
        await asyncio.sleep(0)

    async def __aenter__(self) -> EventHubsEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- lifecycle in a thread of its own ------------------------------------------------

    def start_in_thread(self) -> None:
        """Run on a new event loop in a daemon thread; returns once the port is bound."""
        if self._background is not None:
            raise RuntimeError("the emulator is running already")
        background = runners.BackgroundLoop(
            name="eventhubs-emulator", timeout=THREAD_STOP_TIMEOUT_S
        ).start(timeout=THREAD_START_TIMEOUT_S)
        try:
            background.enter(lambda: self, timeout=THREAD_START_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(TimeoutError):
                background.stop()
            raise
        self._background = background

    def stop_in_thread(self) -> None:
        background, self._background = self._background, None
        if background is None:
            return
        try:
            background.stop()
        except TimeoutError as e:
            raise RuntimeError("the emulator's thread did not stop in time") from e

    @contextlib.contextmanager
    def running_in_thread(self) -> Iterator[EventHubsEmulator]:
        """``with EventHubsEmulator(...).running_in_thread() as emu:``"""
        self.start_in_thread()
        try:
            yield self
        finally:
            self.stop_in_thread()

    # --- connection strings ---------------------------------------------------------------

    def connection_string(self, hub: str | None = None) -> str:
        """A connection string for the SDK; with ``hub``, scoped to it (``EntityPath``)."""
        return connection_string(self.host, self.port, hub)

    @property
    def fully_qualified_namespace(self) -> str:
        """What the SDK reports as ``fully_qualified_namespace`` (host:port)."""
        return f"{self.host}:{self.port}"

    # --- state, from any thread -----------------------------------------------------------

    def _call(self, function: Callable[[], _T]) -> _T:
        """Run ``function`` on the emulator's loop thread and return its result."""
        loop = self._loop
        if loop is None or self._server is None or not loop.is_running():
            return function()
        try:
            if asyncio.get_running_loop() is loop:
                return function()
        except RuntimeError:
            pass  # no loop in this thread
        if self._background is not None:
            return self._background.call(function, timeout=THREAD_START_TIMEOUT_S)
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as e:
                future.set_exception(e)

        loop.call_soon_threadsafe(run)
        return future.result(timeout=THREAD_START_TIMEOUT_S)

    def create_hub(self, name: str, partitions: int) -> None:
        """Add a hub with ``partitions`` partitions and the default consumer groups."""
        self._call(lambda: self._namespace.create_hub(name, partitions, now_ms=_now_ms()))

    def add_partitions(self, hub: str, partition_count: int) -> None:
        """Grow a running hub to ``partition_count`` (as premium/dedicated tiers allow)."""
        self._call(lambda: self._namespace.hub(hub).grow(partition_count))

    def create_consumer_group(self, hub: str, name: str) -> None:
        self._call(lambda: self._namespace.hub(hub).add_consumer_group(name))

    def hub_names(self) -> list[str]:
        return self._call(lambda: sorted(self._namespace.hubs))

    def partition_ids(self, hub: str) -> list[str]:
        return self._call(lambda: self._namespace.hub(hub).partition_ids)

    def partition_info(self, hub: str, partition: str) -> hubs.PartitionInfo:
        """A snapshot of one partition (sequence numbers, offsets, retained events)."""
        return self._call(lambda: self._namespace.hub(hub).partition(partition).info())

    def event_positions(self, hub: str, partition: str) -> list[hubs.EventPosition]:
        """Sequence number, offset and enqueued time of every retained event (for tests)."""
        return self._call(lambda: self._namespace.hub(hub).partition(partition).positions())

    def receiver_count(self, hub: str, consumer_group: str, partition: str) -> int:
        """Open receivers on a partition in a consumer group (to wait for a client)."""
        return self._call(lambda: len(self._namespace.hub(hub).readers(consumer_group, partition)))

    def connection_count(self) -> int:
        return self._call(lambda: len(self._connections))

    def connections_accepted(self) -> int:
        """Connections accepted since the start, closed ones included."""
        return self._call(lambda: self._accepted)

    def request_links_attached(self, kind: str) -> int:
        """``$cbs`` (``kind`` "cbs") or ``$management`` ("management") request links attached
        since the start, closed ones included."""
        return self._call(lambda: self._namespace.request_links.get(kind, 0))


def _new_namespace(consumer_groups: Iterable[str], retention_events: int | None) -> hubs.Namespace:
    return hubs.Namespace(consumer_groups=consumer_groups, retention_events=retention_events)
