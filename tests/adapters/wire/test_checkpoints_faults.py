"""The store behind the fault proxy: no checkpoint lost or regressed; a clear error when spent."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, retrying
from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer_devstack.faultproxy import FaultProxy

#: Quick backoff so a faulty run stays within seconds; attempts enough for a 30% fault rate.
QUICK = retrying.RetryPolicy(
    attempts=30,
    budget_seconds=20,
    attempt_timeout_seconds=2,
    base_delay_seconds=0.01,
    max_delay_seconds=0.1,
    seed=5,
)


def store(container: Any, *, retry: retrying.RetryPolicy = QUICK) -> cp.CheckpointStore:
    return cp.CheckpointStore(
        container,
        fully_qualified_namespace="faults.servicebus.windows.net",
        eventhub_name="hub",
        consumer_group="$default",
        owner_id="pod-a",
        retry=retry,
    )


async def direct_sequence_numbers(azurite: Any, container: Any) -> dict[str, int]:
    """What Azurite itself holds, read around the proxy."""
    async with blobs.open_container(
        container_name=container.container_name, connection_string=azurite.connection_string
    ) as direct:
        return {c.partition: c.sequence_number for c in await store(direct).list()}


async def test_no_checkpoint_lost_or_regressed_under_mixed_faults(
    azurite: Any, fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    a = store(proxied_container)
    partitions = [str(p) for p in range(4)]
    for p in partitions:
        await a.fence(p, 1)
    fault_proxy.faults.set(
        delay=0.005,
        delay_rate=0.3,
        status_5xx_rate=0.1,
        drop_rate=0.05,
        drop_response_rate=0.1,
        seed=11,
    )
    seen: dict[str, list[int]] = {p: [] for p in partitions}
    stop = asyncio.Event()

    async def watch() -> None:
        async with blobs.open_container(
            container_name=proxied_container.container_name,
            connection_string=azurite.connection_string,
        ) as direct:
            reader = store(direct)
            while not stop.is_set():
                for c in await reader.list():
                    seen[c.partition].append(c.sequence_number)
                await asyncio.sleep(0.01)

    async def drive(partition: str) -> None:
        for n in range(30):
            written = await a.update(partition, offset=f"{n}", sequence_number=n)
            assert written.sequence_number == n

    watching = asyncio.create_task(watch())
    async with asyncio.timeout(90):
        await asyncio.gather(*(drive(p) for p in partitions))
    stop.set()
    await watching

    stats = fault_proxy.faults.stats
    assert stats.injected_5xx > 0
    assert stats.dropped > 0
    assert stats.dropped_responses > 0
    assert await direct_sequence_numbers(azurite, proxied_container) == {p: 29 for p in partitions}
    for p in partitions:
        assert seen[p] == sorted(seen[p]), f"partition {p} went backwards: {seen[p]}"


async def test_a_burst_of_412_is_reconciled(
    azurite: Any, fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    a = store(proxied_container)
    await a.fence("0", 1)
    await a.update("0", offset="1", sequence_number=1)
    fault_proxy.faults.set(burst_412=6)
    written = await a.update("0", offset="2", sequence_number=2)
    assert written.sequence_number == 2
    assert fault_proxy.faults.stats.injected_412 == 6
    assert await direct_sequence_numbers(azurite, proxied_container) == {"0": 2}


async def test_a_lost_answer_to_our_own_write_is_not_a_conflict(
    azurite: Any, fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    a = store(proxied_container)
    await a.fence("0", 1)
    # Every answer is lost: the write lands, the retry gets 412, the re-read shows our write.
    fault_proxy.faults.set(drop_response_rate=1.0)
    with pytest.raises(errors.CheckpointStoreUnreachable):
        await a.update("0", offset="5", sequence_number=5)
    fault_proxy.faults.set(drop_response_rate=0.5, seed=3)
    written = await a.update("0", offset="6", sequence_number=6)
    assert written.sequence_number == 6
    assert fault_proxy.faults.stats.dropped_responses > 0
    assert await direct_sequence_numbers(azurite, proxied_container) == {"0": 6}


@pytest.mark.parametrize(
    ("plan", "says"),
    [
        ({"status_5xx_rate": 1.0, "seed": 1}, "HTTP 50"),
        ({"drop_rate": 1.0}, "Server disconnected"),
        # Longer than the budget: a slower answer would come within a later, longer attempt.
        ({"delay": 10.0}, "timed out"),
    ],
)
async def test_a_permanent_fault_spends_the_budget_and_says_so(
    azurite: Any,
    fault_proxy: FaultProxy,
    proxied_container: Any,
    plan: dict[str, Any],
    says: str,
) -> None:
    retry = retrying.RetryPolicy(
        attempts=4, budget_seconds=5, attempt_timeout_seconds=0.3, base_delay_seconds=0.01, seed=1
    )
    a = store(proxied_container, retry=retry)
    await a.fence("0", 1)
    await a.update("0", offset="1", sequence_number=1)
    fault_proxy.faults.set(**plan)
    with pytest.raises(errors.CheckpointStoreUnreachable) as caught:
        await a.update("0", offset="2", sequence_number=2)
    message = str(caught.value)
    assert "gave up after 4 attempt(s) over" in message
    assert "partition 0" in message
    assert says in message
    fault_proxy.faults.clear()
    # A delayed write still reaches Azurite after we gave up on it: it may land, never regress.
    landed = {1, 2} if "delay" in plan else {1}
    assert (await direct_sequence_numbers(azurite, proxied_container))["0"] in landed


def test_the_proxy_runs_in_its_own_thread(azurite: Any) -> None:
    with FaultProxy(azurite.port) as proxy:
        url = f"{proxy.url}/devstoreaccount1?comp=list"
        with pytest.raises(urllib.error.HTTPError) as forwarded:
            urllib.request.urlopen(url, timeout=5)
        forwarded.value.close()  # an HTTPError holds its response, and the response its socket
        assert forwarded.value.code == 403  # Azurite's answer to an unsigned request
        proxy.faults.set(status_5xx_rate=1.0, seed=2)
        with pytest.raises(urllib.error.HTTPError) as injected:
            urllib.request.urlopen(url, timeout=5)
        injected.value.close()
        assert injected.value.code in (500, 503)
        assert injected.value.headers["x-ms-error-code"] in ("InternalError", "ServerBusy")
        assert proxy.faults.stats.injected_5xx == 1
