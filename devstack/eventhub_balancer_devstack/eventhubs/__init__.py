"""A local Azure Event Hubs: an AMQP 1.0 server the unmodified azure-eventhub SDK talks to.

Tests, benchmarks and the embedded demo need Event Hubs without Azure. The SDK connects to
it with ``UseDevelopmentEmulator=true`` in the connection string (plain TCP to host:port);
see docs/local-stack.md for what it supports and ``emulator`` for the API.
"""

from eventhub_balancer_devstack.eventhubs.emulator import EventHubsEmulator

__all__ = ["EventHubsEmulator"]
