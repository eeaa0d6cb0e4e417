"""An assignment the pod cannot use as written (a ConfigMap edited by hand): what it cannot
use is reported to the operator, and the runtime goes on; it never ends on a parse error.

On fake loop time.
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.consumer import connections, runtime
from eventhub_balancer.contracts import endpoints
from tests.consumer import test_runtime
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

#: An account URL that ``urllib.parse.urlsplit`` refuses ("Invalid IPv6 URL").
UNPARSABLE_ACCOUNT_URL = "https://[orders.blob.core.windows.net"


async def test_an_account_url_that_does_not_parse_is_reported_and_the_runtime_goes_on(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    # The Azure backends themselves: the endpoint check they run before any client or token
    # is what met the URL. It refuses it, so nothing here reaches the network.
    backends = connections.AzureBackends(
        credentials=connections.Credentials(endpoint_policy=endpoints.EndpointPolicy()),
        owner_id="pod-a",
        batch=test_runtime.FAST,
    )
    recorder = consumerfakes.Recorder()
    async with test_runtime.running(fake_hub, fake_store, recorder, backends=backends) as (
        consumer,
        source,
    ):
        source.put(
            consumerfakes.configmap(
                1, {"0": (1, "owned")}, checkpointAccountUrl=UNPARSABLE_ACCOUNT_URL
            )
        )
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        report = source.reports["0"]
        assert report.state == "failing"
        assert report.error.startswith("spec.checkpointStore.accountUrl: host ")
        assert consumer.ready()[0] is True
        await asyncio.sleep(60)
        # Still turning, and still trying (with backoff) in case the ConfigMap is mended.
        assert consumer.heartbeat_age() <= runtime.TICK_S + 0.01
        assert consumer.latest is not None
        failure = consumer.clients.unopened(connections.Coordinates.of(consumer.latest))
        assert failure is not None
        assert failure.failures >= 3
        assert source.reports["0"].state == "failing"
    assert consumer.stopped
