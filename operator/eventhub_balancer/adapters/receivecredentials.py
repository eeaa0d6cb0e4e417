"""One token credential for every receive link of a pod on workload identity.

A receive client built without a connection string or a credential (`receiving.make_client`)
builds a ``DefaultAzureCredential`` of its own, which nobody closes: each asks the identity
endpoint for a token of its own, and each leaves an aiohttp session open until it is
collected (said at ERROR, "Unclosed client session"). A pod opens a link for every take-up,
every hand-off back and every reopen, so it asked Microsoft Entra ID for a token per link
(hundreds an hour for a pod handed partitions all day, where the limits are per identity)
and logged an error for each. `shared` gives the address one credential for the life of a
backend: its token is cached and renewed by the credential, and it is closed once, at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

from eventhub_balancer.adapters import receiving

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def shared(address: receiving.EventHubAddress) -> AsyncIterator[receiving.EventHubAddress]:
    """``address`` with one ``DefaultAzureCredential`` (closed after the block) when it names
    neither a connection string nor a credential; else ``address`` as it is."""
    if address.connection_string or address.credential is not None:
        yield address
        return
    from azure.identity.aio import DefaultAzureCredential  # heavy: only when used

    credential = DefaultAzureCredential()
    try:
        yield dataclasses.replace(address, credential=credential)
    finally:
        try:
            await credential.close()
        except Exception as e:  # a close that fails leaves nothing the pod can act on
            logger.debug("closing the Event Hubs credential failed: %r", e)
