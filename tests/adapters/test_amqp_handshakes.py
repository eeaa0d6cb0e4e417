"""A receive link opens at the pace its handshake's frames arrive, and within a bound.

azure-eventhub's ``EventHubConsumer._open`` polls its AMQP handler's readiness and sleeps
50 ms between checks, each of which reads at most one frame; a handshake is about ten
frames, so every take-up of a partition waited about 0.5 s for answers that had arrived.
`amqphandshakes.read_handshake_back_to_back` makes each check read the frames that are there.
Here on fake loop time (looptime): a fake consumer with the SDK's ``_open`` loop, the real
SDK consumer's handler (no connection made), and the receiver's bound on an open that never
completes.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from azure.eventhub.aio import EventHubConsumerClient
from azure.eventhub.aio._client_base_async import ClientBaseAsync, ConsumerProducerMixin
from azure.eventhub.aio._transport._pyamqp_transport_async import PyamqpTransportAsync

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    amqphandshakes,
    checkpointresets,
    deliveries,
    eventhubs,
    hubclients,
    receiving,
)

pytestmark = pytest.mark.looptime

#: The SDK's sleep between readiness checks (``ConsumerProducerMixin._open``).
SDK_POLL_S = 0.05
#: Frames of one handshake, and how far apart they arrive.
FRAMES = 10
FRAME_GAP_S = 0.002


class Handshake:
    """An AMQP handler whose readiness check reads one frame, as pyamqp's does: the frames
    arrive ``gap`` apart, and the handler is ready at the ``frames``-th. ``closed``: the peer
    closed the socket, so each check returns at once, never ready."""

    def __init__(self, *, frames: int = FRAMES, gap: float = FRAME_GAP_S, closed: bool = False):
        self.frames = frames
        self.gap = gap
        self.closed = closed
        self.read = 0
        self.checks = 0

    async def client_ready_async(self) -> bool:
        self.checks += 1
        if self.closed:
            return False
        await asyncio.sleep(self.gap)
        self.read += 1
        return self.read >= self.frames


class SdkShapedConsumer:
    """``EventHubConsumer``'s opening as azure-eventhub 5.15 writes it: create the handler,
    then check readiness and sleep 50 ms until ready (`test_the_sdk_opens_as_the_fake_does`
    holds the SDK to this shape)."""

    def __init__(self, handshake: Handshake) -> None:
        self.handshake = handshake
        self._handler: Any = None
        self.sleeps = 0

    def _create_handler(self, auth: Any) -> None:
        self._handler = self.handshake

    async def _open(self) -> None:
        self._create_handler(auth=None)
        while not await self._handler.client_ready_async():
            self.sleeps += 1
            await asyncio.sleep(SDK_POLL_S)


async def test_the_handshake_is_read_as_its_frames_arrive() -> None:
    consumer = SdkShapedConsumer(Handshake())
    amqphandshakes.read_handshake_back_to_back(consumer)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await consumer._open()
    assert consumer.sleeps == 0
    assert consumer.handshake.read == FRAMES
    assert loop.time() - started == pytest.approx(FRAMES * FRAME_GAP_S)


async def test_without_it_the_sdk_sleeps_between_frames() -> None:
    """What the adapter removes: the same handshake at the SDK's own pace."""
    consumer = SdkShapedConsumer(Handshake())
    loop = asyncio.get_running_loop()
    started = loop.time()
    await consumer._open()
    assert consumer.sleeps == FRAMES - 1
    assert loop.time() - started == pytest.approx(FRAMES * FRAME_GAP_S + (FRAMES - 1) * SDK_POLL_S)


async def test_a_closed_peer_does_not_become_a_busy_loop() -> None:
    """Each check returns at once when the peer closed the socket: the checks come in runs
    of at most `HANDSHAKE_READS`, each followed by the SDK's sleep."""
    consumer = SdkShapedConsumer(Handshake(closed=True))
    amqphandshakes.read_handshake_back_to_back(consumer)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            await consumer._open()
    polls = consumer.sleeps
    assert polls == pytest.approx(1.0 / SDK_POLL_S, abs=1)
    assert consumer.handshake.checks <= (polls + 1) * amqphandshakes.HANDSHAKE_READS


async def test_a_consumer_without_the_private_names_is_left_alone() -> None:
    class Other:
        pass

    other = Other()
    amqphandshakes.read_handshake_back_to_back(other)
    assert vars(other) == {}


async def test_the_real_consumers_handler_reads_back_to_back() -> None:
    """The SDK's own consumer and handler (no connection is made): the handler its
    ``_create_handler`` builds gets the back-to-back readiness check."""
    client = EventHubConsumerClient.from_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
        "$Default",
        eventhub_name="orders",
    )
    try:
        consumer: Any = client._create_consumer(
            "$Default",
            "0",
            "-1",
            None,  # type: ignore[arg-type]  # never called: nothing is received
            owner_level=1,
        )
        amqphandshakes.read_handshake_back_to_back(consumer)
        auth = await client._create_auth_async(auth_uri=client._auth_uri)
        consumer._create_handler(auth)
        ready = consumer._handler.client_ready_async
        assert ready.__qualname__.startswith("_reading_back_to_back")
        # The same hook gives it the close of an opening cut short (`test_amqp_closes`).
        assert type(consumer._handler.close_async).__name__ == "_ClosingForGood"
    finally:
        await client.close()


async def test_the_real_clients_management_clients_read_back_to_back() -> None:
    """A management request creates its own AMQP client through the client's transport: the
    one `amqphandshakes.quick_management` wraps builds them with the back-to-back check, for
    this client alone and once however often it is asked."""
    client = EventHubConsumerClient.from_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
        "$Default",
        eventhub_name="orders",
    )
    other = EventHubConsumerClient.from_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
        "$Default",
        eventhub_name="orders",
    )
    try:
        amqphandshakes.quick_management(client)
        wrapped = client._amqp_transport
        amqphandshakes.quick_management(client)
        assert client._amqp_transport is wrapped
        auth = await client._create_auth_async()
        made: Any = client._amqp_transport.create_mgmt_client(
            client._address, mgmt_auth=auth, config=client._config
        )
        assert made.client_ready_async.__qualname__.startswith("_reading_back_to_back")
        assert type(made.close_async).__name__ == "_ClosingForGood"
        # The rest of the transport is the SDK's own, and other clients keep theirs as is.
        assert wrapped.MAX_MESSAGE_LENGTH_BYTES == other._amqp_transport.MAX_MESSAGE_LENGTH_BYTES
        assert other._amqp_transport is PyamqpTransportAsync
    finally:
        await client.close()
        await other.close()


def test_the_operators_hub_clients_make_quick_management_calls() -> None:
    where = eventhubs.Coordinates(
        fully_qualified_namespace="127.0.0.1:1",
        eventhub_name="orders",
        connection_string=(
            "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;"
            "UseDevelopmentEmulator=true"
        ),
    )
    client, _credential = hubclients._open(where)
    assert type(client._amqp_transport).__name__ == "_QuickManagement"
    # A kept client: the kept connection's wrapper (`mgmtconnections`) around the quick one.
    kept, _credential = hubclients._open(where, keep_connection=True)
    assert type(kept._amqp_transport).__name__ == "_KeptManagement"
    assert type(kept._amqp_transport._transport).__name__ == "_QuickManagement"
    assert type(kept._conn_manager_async).__name__ == "KeptConnection"


def test_the_sdk_makes_management_calls_as_the_wrapper_expects() -> None:
    """Each management request creates its client through ``self._amqp_transport`` and polls
    its readiness with a sleep."""
    source = inspect.getsource(ClientBaseAsync._management_request_async)
    assert "self._amqp_transport.create_mgmt_client(" in source
    assert "while not await mgmt_client.client_ready_async():" in source
    assert "await asyncio.sleep(0.05)" in source


def test_the_sdk_opens_as_the_fake_does() -> None:
    """The SDK's ``_open`` creates its handler with ``_create_handler`` and then polls the
    handler's readiness with a sleep: what `SdkShapedConsumer` copies."""
    source = inspect.getsource(ConsumerProducerMixin._open)
    assert "self._create_handler(auth)" in source
    assert "while not await self._handler.client_ready_async():" in source
    assert "await asyncio.sleep(0.05" in source


class NeverOpens:
    """An SDK client whose consumers' links never finish their handshake."""

    def __init__(self) -> None:
        self.opened = 0

    def _create_consumer(self, *args: Any, **kwargs: Any) -> NeverOpens:
        return self

    async def _open(self) -> None:
        self.opened += 1
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None


async def test_a_link_that_never_opens_ends_as_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = NeverOpens()
    monkeypatch.setattr(receiving, "make_client", lambda address: client)
    receiver = receiving.PartitionReceiver(
        address=receiving.EventHubAddress("local.servicebus.windows.net", "orders"),
        partition="0",
        epoch=1,
        position=deliveries.ReceivePosition.after(5),
    )
    receiver.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        # Each wait is empty until the receiver gives up: the first wait outlasts them all.
        with pytest.raises(errors.EventHubUnreachable, match="6 times in a row"):
            await receiver.next_batch(max_size=10, max_wait=3600.0)
    finally:
        await receiver.close()
    assert client.opened == receiving.REOPEN_ATTEMPTS
    backoffs = sum(
        min(receiving.REOPEN_BACKOFF_S * 2**i, receiving.REOPEN_BACKOFF_MAX_S)
        for i in range(receiving.REOPEN_ATTEMPTS - 1)
    )
    opens = receiving.REOPEN_ATTEMPTS * receiving.LINK_OPEN_TIMEOUT_S
    assert loop.time() - started == pytest.approx(opens + backoffs)


async def test_the_admins_hub_client_makes_quick_management_calls() -> None:
    """`ehb checkpoints reset` and ``import`` read every partition's bounds on one client: at
    the SDK's pace 1.9 s for 32 partitions on the emulator, 0.15 s with quick calls."""
    address = receiving.EventHubAddress(
        "127.0.0.1:1",
        "orders",
        connection_string=(
            "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;"
            "UseDevelopmentEmulator=true"
        ),
    )
    async with checkpointresets.hub_client(address) as client:
        assert type(client._amqp_transport).__name__ == "_QuickManagement"
