"""The cycle with a reachable checkpoint store: lag weighting from the checkpoint blobs, and the
blobs' epochs as the last floor when every ConfigMap and status.epochs are lost.

These run `cycles.run_cycle` directly (no kopf) over the real adapters: the local Kubernetes
API, the Event Hubs emulator and Azurite, so that each cycle is one deterministic step.
"""

from __future__ import annotations

import datetime
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer.adapters import checkpointing, eventhubs, kubeapi
from eventhub_balancer.contracts import checkpointblobs, specs
from eventhub_balancer.handlers import checkpointreads, cycles, dependencylines, memories, observing
from eventhub_balancer.handlers.cache import serving
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.azurite import Azurite
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support.fixtures.eventhubs import EventHubTarget

NS = "store"
FQNS = "shop.servicebus.windows.net"
#: A bound on the cycles a test runs before it must see its outcome.
MAX_CYCLES = 6


def setup(
    cluster: clusters.LocalCluster,
    hub: EventHubTarget,
    azurite: Azurite,
    container: str,
    weighting: str,
) -> None:
    cluster.secret(NS, name="eh", key="cs", value=hub.namespace_connection_string)
    cluster.secret(NS, name="blob", key="cs", value=azurite.connection_string)
    cluster.kube.create_object(
        clusters.CR,
        {
            "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
            "kind": specs.KIND,
            "metadata": {"name": "orders"},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": FQNS,
                    "name": hub.name,
                    "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
                },
                "checkpointStore": {
                    "containerName": container,
                    "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
                },
                "selector": {"matchLabels": {"app": "c"}},
                "balancing": {"weighting": weighting},
            },
        },
        namespace=NS,
    )
    for pod in ("a", "b"):
        cluster.pod(NS, pod, app="c")


def store(container: Any, hub: EventHubTarget, owner: str) -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(
        container,
        fully_qualified_namespace=FQNS,
        eventhub_name=hub.name,
        consumer_group="$Default",
        owner_id=owner,
    )


async def cycle(
    operator_api: kubeapi.KubeAPI, hubs: eventhubs.EventHubs, memory: memories.Memory
) -> None:
    await cycles.run_cycle(
        kube=serving.CachedKube(operator_api),  # no roster: every read goes to the API server
        hubs=hubs,
        namespace=NS,
        name="orders",
        memory=memory,
        now=datetime.datetime.now(datetime.UTC),
    )


async def read_blobs(
    operator_api: kubeapi.KubeAPI, hubs: eventhubs.EventHubs
) -> dict[str, tuple[int, int]]:
    """{partition: (epoch, sequence number)} as a cycle reads the blobs when it needs them."""
    memory, wall = memories.Memory(), datetime.datetime.now(datetime.UTC).timestamp()
    view = serving.CachedKube(operator_api)  # no roster: every read goes to the API server
    observation = await observing.observe(
        kube=view, hubs=hubs, namespace=NS, name="orders", memory=memory, wall=wall
    )
    store, _pacing = await checkpointreads.read_store(
        kube=view,
        hubs=hubs,
        observation=observation,
        store=memory.store,
        wall=wall,
        needed=True,
        lines=dependencylines.DependencyLines(),
    )
    assert store is not None
    assert store.checkpoints is not None
    return dict(store.checkpoints)


async def test_lag_weighting_spreads_the_backlog(
    operator_api: kubeapi.KubeAPI,
    local_kube: LocalKubeAPI,
    eventhubs_hub: EventHubTarget,
    azurite: Azurite,
    blob_container: Any,
) -> None:
    cluster = clusters.LocalCluster(local_kube)
    setup(cluster, eventhubs_hub, azurite, blob_container.container_name, "lag")
    # 1,100 events in every partition (sequence numbers 0..1099); checkpoints leave partitions
    # 0 and 1 with a backlog of 1,090 and partitions 2 and 3 with 10 (the operator weighs what
    # is beyond the 1,000 events a pod that keeps up may have in flight: 90 and 0).
    async with EventHubProducerClient.from_connection_string(
        eventhubs_hub.connection_string
    ) as producer:
        for pid in ("0", "1", "2", "3"):
            batch = await producer.create_batch(partition_id=pid)
            for i in range(1_100):
                batch.add(EventData(str(i)))
            await producer.send_batch(batch)
    seeded = store(blob_container, eventhubs_hub, "seeder")
    for pid, done in (("0", 9), ("1", 9), ("2", 1_089), ("3", 1_089)):
        await seeded.seed(pid, checkpointblobs.Position(offset="", sequence_number=done))

    hubs, memory = eventhubs.EventHubs(timeout=5.0), memories.Memory()
    for _ in range(MAX_CYCLES):
        await cycle(operator_api, hubs, memory)
        if sum(len(p) for p in cluster.assignment(NS).values()) == 4:
            break
    owned = {pod: set(parts) for pod, parts in cluster.assignment(NS).items()}
    assert sorted(len(p) for p in owned.values()) == [2, 2], owned
    # By count the planner gives each pod a contiguous pair ({0,1} and {2,3}): 2,180 events of
    # backlog against 20. By lag each pod gets one of the two heavy partitions.
    assert all(len(parts & {"0", "1"}) == 1 for parts in owned.values()), owned
    sequences = {p: seq for p, (_epoch, seq) in (await read_blobs(operator_api, hubs)).items()}
    assert sequences == {"0": 9, "1": 9, "2": 1_089, "3": 1_089}
    reachable = cluster.condition(NS, "orders", "CheckpointStoreReachable")
    assert (reachable["status"], reachable["reason"]) == ("True", "CheckpointsListed")


async def test_checkpoint_epochs_are_the_floor_when_configmaps_and_status_are_lost(
    operator_api: kubeapi.KubeAPI,
    local_kube: LocalKubeAPI,
    eventhubs_hub: EventHubTarget,
    azurite: Azurite,
    blob_container: Any,
) -> None:
    cluster = clusters.LocalCluster(local_kube)
    setup(cluster, eventhubs_hub, azurite, blob_container.container_name, "count")
    hubs = eventhubs.EventHubs(timeout=5.0)
    await cycle(operator_api, hubs, memories.Memory())
    first = cluster.epochs(NS)
    assert first == {"0": 1, "1": 1, "2": 1, "3": 1}
    # The pods fence their partitions with the epochs they were given, as the runtime does.
    for pod, parts in cluster.assignment(NS).items():
        owner = store(blob_container, eventhubs_hub, pod)
        for pid, entry in parts.items():
            await owner.fence(pid, entry.epoch)

    # Everything the operator wrote is lost (its record in the status too); the operator
    # restarts (a fresh Memory).
    for cm in local_kube.list_objects("v1/configmaps", namespace=NS):
        local_kube.delete_object("v1/configmaps", cm["metadata"]["name"], namespace=NS)
    local_kube.patch_object(
        clusters.CR,
        "orders",
        {"status": {"epochs": None, "assignment": None, "consumers": None}},
        namespace=NS,
        subresource="status",
    )
    assert "epochs" not in cluster.status(NS, "orders")
    assert "assignment" not in cluster.status(NS, "orders")
    memory = memories.Memory()
    for _ in range(MAX_CYCLES):
        await cycle(operator_api, hubs, memory)
        if len(cluster.epochs(NS)) == 4:
            break
    after = cluster.epochs(NS)
    # Above the fenced epochs: the old owners' epoch 1 cannot fence out the new owners.
    assert after == {"0": 2, "1": 2, "2": 2, "3": 2}, after
    assert {
        p: epoch for p, (epoch, _seq) in (await read_blobs(operator_api, hubs)).items()
    } == first
    assert cluster.status(NS, "orders")["epochs"] == after
