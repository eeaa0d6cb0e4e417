"""An SDK EventProcessorClient forgotten on the consumer group, beside a consumer pod, for real.

The Event Hubs emulator and Azurite; a consumer pod's runtime holds the hub's four partitions
with its epoch receivers; the SDK's own EventHubConsumerClient with its BlobCheckpointStore
runs on the same consumer group and container (under the pods' namespace: the emulator names
the SDK's namespace 127.0.0.1:<port>, so its store is wrapped to write where ours does). The
operator's store probe (`checkpointreads.read_store`, over the real adapter) runs a few seconds
apart in real time, each one due on the wall clock it is handed (a minute apart), so that the
ETags it sees change as they do between probes a minute apart: found after two rewritten
intervals, gone after two quiet ones once the SDK's client is closed (its clean stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
from azure.eventhub.aio import CheckpointStore, EventHubConsumerClient
from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore

from eventhub_balancer.adapters import eventhubs
from eventhub_balancer.consumer import partitions
from eventhub_balancer.contracts import specs, storeaddresses
from eventhub_balancer.handlers import checkpointreads, dependencylines, memories
from eventhub_balancer.reconciling import conditions, foreignreaders, observations
from tests.support import fakes
from tests.support.consumerfakes import Recorder, configmap
from tests.support.fixtures.consumer import running_pod

pytestmark = pytest.mark.slow

NS, NAME = "shop", "orders"
#: The pods' namespace, as the assignment ConfigMap names it (`consumerfakes.configmap`).
FQNS = "local.servicebus.windows.net"
GROUP = "$Default"
SETTINGS = partitions.BatchSettings(batch_size=10, max_wait=0.05, retry_backoff=0.01)
#: Real seconds between two probes: several of the SDK's balancing passes.
APART = 3.0


class OurNamespace(CheckpointStore):  # type: ignore[misc]
    """The SDK's blob store, writing under the pods' namespace instead of the emulator's."""

    def __init__(self, inner: BlobCheckpointStore) -> None:
        self.inner = inner

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str, **kw: Any
    ) -> Iterable[dict[str, Any]]:
        return await self.inner.list_ownership(FQNS, eventhub_name, consumer_group, **kw)

    async def claim_ownership(
        self, ownership_list: Iterable[dict[str, Any]], **kw: Any
    ) -> Iterable[dict[str, Any]]:
        moved = [{**o, "fully_qualified_namespace": FQNS} for o in ownership_list]
        return await self.inner.claim_ownership(moved, **kw)

    async def update_checkpoint(self, checkpoint: dict[str, Any], **kw: Any) -> None:
        await self.inner.update_checkpoint({**checkpoint, "fully_qualified_namespace": FQNS}, **kw)

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str, **kw: Any
    ) -> Iterable[dict[str, Any]]:
        return await self.inner.list_checkpoints(FQNS, eventhub_name, consumer_group, **kw)


@contextlib.asynccontextmanager
async def sdk_processor(eventhub_cs: str, blob_cs: str, container: str) -> AsyncIterator[None]:
    """The SDK's processor on consumer group ``$Default`` of hub ``orders``, balancing every
    half second; closed (its ownership claims released) when the block ends."""
    store = OurNamespace(BlobCheckpointStore.from_connection_string(blob_cs, container))
    client = EventHubConsumerClient.from_connection_string(
        eventhub_cs,
        consumer_group=GROUP,
        eventhub_name=NAME,
        checkpoint_store=store,
        load_balancing_interval=0.5,
    )

    async def on_event(context: Any, event: Any) -> None:
        """Nothing reaches it: the pods' epochs refuse its receivers."""

    task = asyncio.create_task(client.receive(on_event=on_event))
    try:
        yield
    finally:
        async with asyncio.timeout(20):
            await client.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        async with asyncio.timeout(10):
            await store.inner.close()


class Probes:
    """The operator's store probes of consumer ``orders``, over the real adapter."""

    def __init__(self, azurite: Any, container: str) -> None:
        self.kube = fakes.FakeKube()
        self.blob_cs = azurite.connection_string
        self.kube.add_secret(NS, "blob", {"cs": self.blob_cs})
        body: dict[str, Any] = {
            "metadata": {"namespace": NS, "name": NAME},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": FQNS,
                    "name": NAME,
                    "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
                },
                "checkpointStore": {
                    "containerName": container,
                    "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
                },
                "selector": {"matchLabels": {"app": "c"}},
            },
        }
        self.spec = specs.parse_spec(body["spec"])
        self.observation = observations.Observation(
            namespace=NS, name=NAME, body=body, spec=self.spec
        )
        self.hubs = eventhubs.EventHubs(timeout=5.0)
        self.store = memories.StorePacing()
        self.wall = 1_700_000_000.0

    async def probe(self) -> str:
        """One probe, a minute after the last: the store condition's reason after it."""
        await asyncio.sleep(APART)
        self.wall += 60.0
        read, self.store = await checkpointreads.read_store(
            kube=self.kube,
            hubs=self.hubs,
            observation=self.observation,
            store=self.store,
            wall=self.wall,
            needed=False,
            lines=dependencylines.DependencyLines(),
        )
        assert read is not None
        assert read.fault is None, read.fault
        return conditions.store(read, spec=self.spec).reason

    async def until(self, reason: str, *, most: int) -> list[str]:
        """Probes until one says ``reason``, at most ``most``: the reasons they said."""
        seen: list[str] = []
        while reason not in seen and len(seen) < most:
            seen.append(await self.probe())
        assert seen[-1] == reason, seen
        return seen


async def test_a_forgotten_sdk_processor_is_told_and_its_clean_stop_ends_it(
    consumer_emulator: Any, azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    eventhub_cs = consumer_emulator.connection_string()
    container = blob_container.container_name
    probes = Probes(azurite, container)
    recorder = Recorder()
    async with (
        asyncio.timeout(90),
        running_pod(
            pod="pod-a",
            eventhub_connection_string=eventhub_cs,
            blob_connection_string=azurite.connection_string,
            batch=SETTINGS,
            processor=recorder,
        ) as (_consumer, source),
    ):
        owned = {p: (1, "owned") for p in "0123"}
        source.put(configmap(1, owned, checkpointContainer=container))
        fenced = 0

        async def count_fenced() -> None:
            nonlocal fenced
            fenced = sum(1 for (epoch, _seq) in (await listed(probes)).values() if epoch == 1)

        for _ in range(40):  # the pod fences its four partitions within seconds
            await count_fenced()
            if fenced == 4:
                break
            await asyncio.sleep(0.25)
        assert fenced == 4
        async with sdk_processor(eventhub_cs, azurite.connection_string, container):
            # The first probe keeps the ETags; the next two see them rewritten (the SDK
            # rewrites its claims every half second, so a loaded machine may need a probe
            # more: they are counted, not timed).
            seen = await probes.until(foreignreaders.REASON, most=6)
            assert seen[:2] == ["CheckpointsListed", "CheckpointsListed"], seen
        # Closed: its claims released (rewritten once more, unless it held none at the
        # moment it closed), then two quiet intervals end it. One quiet interval never does.
        seen = await probes.until("CheckpointsListed", most=3)
        assert seen[0] == foreignreaders.REASON, seen
        # The pod kept its partitions all along: its epochs stand in every blob.
        assert {e for e, _s in (await listed(probes)).values()} == {1}
    told = [r for r in caplog.records if "another reader on consumer group" in r.getMessage()]
    assert len(told) == 1
    assert "of Event Hub 'orders'" in told[0].getMessage()
    await probes.hubs.close()


async def listed(probes: Probes) -> dict[str, tuple[int, int]]:
    return await probes.hubs.checkpoints(
        storeaddresses.StoreAddress(
            fully_qualified_namespace=FQNS,
            eventhub_name=NAME,
            consumer_group=GROUP,
            container_name=probes.spec.checkpoint_container,
            connection_string=probes.blob_cs,
        )
    )
