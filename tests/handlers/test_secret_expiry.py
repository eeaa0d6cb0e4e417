"""A Secret's value is dropped once `serving.REFRESH_SECONDS` have passed, whatever is read
after it: the connection strings of consumers deleted do not stay in the operator's memory
because no other consumer happened to read a Secret since (on fake loop time, looptime)."""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.handlers.cache import serving
from tests.support import fakes

pytestmark = pytest.mark.looptime


def loop_clock() -> float:
    return asyncio.get_running_loop().time()


async def test_the_secrets_of_consumers_deleted_last_are_dropped_after_the_refresh() -> None:
    kube = fakes.FakeKube()
    values = serving.SecretValues(kube.read_secret_key, clock=loop_clock)
    for i in range(20):  # consumers in namespaces of their own, then all deleted
        kube.add_secret(
            f"ns-{i}",
            "eh",
            {"cs": f"Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey={i}"},
        )
        await values.get(namespace=f"ns-{i}", name="eh", key="cs")
        await asyncio.sleep(1)
    assert len(values) == 20
    await asyncio.sleep(serving.REFRESH_SECONDS)  # nobody reads a Secret any more
    assert len(values) == 0, "deleted consumers' connection strings are still held"


async def test_a_value_read_again_is_kept_for_the_refresh_from_its_new_read() -> None:
    kube = fakes.FakeKube()
    values = serving.SecretValues(kube.read_secret_key, clock=loop_clock)
    kube.add_secret("ns", "eh", {"cs": "first"})
    assert await values.get(namespace="ns", name="eh", key="cs") == "first"
    values.forget(namespace="ns", name="eh")  # rejected: read afresh at the next attempt
    await asyncio.sleep(serving.REFRESH_SECONDS / 2)
    kube.add_secret("ns", "eh", {"cs": "rotated"})
    assert await values.get(namespace="ns", name="eh", key="cs") == "rotated"
    await asyncio.sleep(serving.REFRESH_SECONDS / 2 + 1)  # the first read's time has passed
    assert len(values) == 1
    reads = values.reads
    assert await values.get(namespace="ns", name="eh", key="cs") == "rotated"
    assert values.reads == reads  # still the one read: kept for its own refresh
    await asyncio.sleep(serving.REFRESH_SECONDS / 2)
    assert len(values) == 0
