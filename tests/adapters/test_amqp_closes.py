"""An AMQP client given up closes the connection it opened, however far its opening got.

azure-eventhub 5.15's aio AMQP client returns from ``close_async`` at once when its session
never began, leaving its connection's socket open for the life of the process
(`adapters.amqpcloses`). Here the SDK's own client, with a connection whose socket records
its abort in place of a real one (the wire tests in
``tests/adapters/wire/test_blackholed_eventhubs.py`` count the sockets the emulator sees
closed), on fake loop time (looptime). That every client the SDK builds for the product
gets this close is held where its handshake hooks are (`test_amqp_handshakes`).
"""

from __future__ import annotations

import asyncio

import pytest
from azure.eventhub._pyamqp.aio import AMQPClientAsync

from eventhub_balancer.adapters import amqpcloses

pytestmark = pytest.mark.looptime


class Socket:
    """An asyncio transport that records its abort."""

    def __init__(self) -> None:
        self.aborted = 0

    def abort(self) -> None:
        self.aborted += 1


class Writer:
    def __init__(self, socket: Socket) -> None:
        self.transport = socket


class Transport:
    """``_pyamqp``'s aio transport: ``writer`` is None once its own close has run."""

    def __init__(self, socket: Socket) -> None:
        self.writer: Writer | None = Writer(socket)


class Connection:
    """A ``_pyamqp`` aio connection opened, its handshake unanswered (``close`` is never
    reached by the SDK client's close without a session)."""

    def __init__(self) -> None:
        self.socket = Socket()
        self._transport = Transport(self.socket)


def cut_short() -> tuple[AMQPClientAsync, Connection]:
    """The SDK's client as an opening cut short before its session leaves it: its connection
    made and open, no session."""
    client = AMQPClientAsync("127.0.0.1")
    connection = Connection()
    client._connection = connection
    return client, connection


async def test_the_sdk_leaves_the_connection_of_an_opening_cut_short_open() -> None:
    """The flaw, held to the SDK's shape: without the mend its close returns without a word
    and the socket stays open."""
    client, connection = cut_short()
    await client.close_async()
    assert client._connection is connection
    assert connection.socket.aborted == 0


async def test_the_connection_of_an_opening_cut_short_is_aborted() -> None:
    client, connection = cut_short()
    amqpcloses.close_for_good(client)
    amqpcloses.close_for_good(client)  # once, however often asked
    await client.close_async()
    assert connection.socket.aborted == 1


async def test_a_close_cut_short_by_its_time_out_aborts_the_socket() -> None:
    class Hanging:
        """A client whose close waits for an answer that never comes."""

        def __init__(self) -> None:
            self._connection = Connection()
            self._external_connection = False

        async def close_async(self) -> None:
            await asyncio.Event().wait()

    client = Hanging()
    amqpcloses.close_for_good(client)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.close_async(), timeout=5.0)
    assert client._connection.socket.aborted == 1


async def test_a_lent_connection_is_left_to_its_owner() -> None:
    client, connection = cut_short()
    client._external_connection = True
    amqpcloses.close_for_good(client)
    await client.close_async()
    assert connection.socket.aborted == 0


async def test_a_connection_the_sdk_closed_is_not_touched() -> None:
    client, connection = cut_short()
    connection._transport.writer = None  # its own close let go of the socket
    amqpcloses.close_for_good(client)
    await client.close_async()
    assert connection.socket.aborted == 0


async def test_objects_without_the_private_names_are_left_alone() -> None:
    class Other:
        pass

    other = Other()
    amqpcloses.close_for_good(other)
    assert vars(other) == {}
    assert not amqpcloses.abort_socket(Other())
