"""The SDK's own balancing, run the way users run it, for the side-by-side benchmark.

Each worker is one process (one pod of the local kubelet) with the azure-eventhub
``EventHubConsumerClient`` and the ``BlobCheckpointStore`` of
azure-eventhub-checkpointstoreblob-aio: the SDK's EventProcessor with its default strategy
(greedy), ``load_balancing_interval`` set to the operator's cycle, and the ownership expiry
at its default (6 x the interval). It records every batch exactly as our pods do
(`recording`), checkpoints after each batch, and on SIGTERM closes the client, which
releases its ownerships. It serves /readyz (the client is receiving) and /state (its owner
id and the partitions it is receiving) for the kubelet and for `SdkSystem.snapshot`.

Facts of azure-eventhub 5.15.1 that the figures depend on (read in its source):
- ``OwnershipManager.claim_ownership`` lists the partition ids only once
  (``if not self.cached_parition_ids``), so a running client never sees partitions added to
  the hub: after the hub grows, the new partitions stay unowned until the workers restart.
- ``EventProcessor.stop`` polls its tasks every second, and a consumer that lost its
  partition waits out ``load_balancing_interval`` on close: worker shutdown takes seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from eventhub_balancer_devstack import kubelet, recording
from eventhub_balancer_devstack.scenarios import systems

logger = logging.getLogger(__name__)

#: The SDK's default ratio of ownership expiry to the balancing interval (EventProcessor).
OWNERSHIP_EXPIRY_RATIO = 6
#: A worker's close waits at most this long (the SDK's close can wait out a whole interval).
CLOSE_TIMEOUT_S = 10.0
#: How long the snapshot waits for a worker's /state.
STATE_TIMEOUT_S = 1.0
#: What a worker's /readyz answers until its EventProcessor runs.
NOT_STARTED = "starting"


# -- the worker process


async def _worker(args: argparse.Namespace) -> int:
    from aiohttp import web
    from azure.eventhub.aio import EventHubConsumerClient
    from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore

    pod = os.environ["POD_NAME"]
    record_dir = os.environ[recording.ENV_RECORD_DIR]
    store = BlobCheckpointStore.from_connection_string(
        os.environ["EHB_BLOB_CONNECTION_STRING"], args.container
    )
    client = EventHubConsumerClient.from_connection_string(
        os.environ["EHB_EVENTHUB_CONNECTION_STRING"],
        systems.CONSUMER_GROUP,
        eventhub_name=args.hub,
        checkpoint_store=store,
        load_balancing_interval=args.interval,
    )
    receiving: set[str] = set()

    async def on_event_batch(context: Any, events: list[Any]) -> None:
        if not events:
            return
        recording.append(
            record_dir,
            pod=pod,
            partition=context.partition_id,
            epoch=0,
            sequence_numbers=[e.sequence_number for e in events],
        )
        await context.update_checkpoint(events[-1])

    async def on_partition_initialize(context: Any) -> None:
        receiving.add(context.partition_id)

    async def on_partition_close(context: Any, reason: Any) -> None:
        receiving.discard(context.partition_id)

    receiver = asyncio.create_task(
        client.receive_batch(
            on_event_batch,
            max_batch_size=systems.BATCH_SIZE,
            max_wait_time=systems.MAX_WAIT_S,
            starting_position="-1",
            on_partition_initialize=on_partition_initialize,
            on_partition_close=on_partition_close,
        )
    )

    def owner_id() -> str:
        # The SDK keeps its owner id on the EventProcessor it creates inside receive_batch.
        processors = getattr(client, "_event_processors", {}) or {}
        for processor in processors.values():
            return str(getattr(processor, "_id", ""))
        return ""

    async def readyz(_: web.Request) -> web.Response:
        ok = not receiver.done() and bool(owner_id())
        return web.Response(status=200 if ok else 503, text="ok" if ok else NOT_STARTED)

    async def state(_: web.Request) -> web.Response:
        body = {"owner_id": owner_id(), "receiving": sorted(receiving)}
        return web.Response(text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/state", state)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({receiver, stopper}, return_when=asyncio.FIRST_COMPLETED)
    try:
        # close() releases the ownerships (owner id ""), as a graceful shutdown does.
        await asyncio.wait_for(client.close(), timeout=CLOSE_TIMEOUT_S)
    except TimeoutError:
        logger.warning("the consumer client did not close within %.0f s", CLOSE_TIMEOUT_S)
    receiver.cancel()
    stopper.cancel()
    await asyncio.gather(receiver, stopper, return_exceptions=True)
    await runner.cleanup()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one SDK EventProcessorClient worker")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hub", required=True)
    parser.add_argument("--container", required=True)
    parser.add_argument("--interval", type=float, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    return asyncio.run(_worker(args))


# -- the system, seen from the scenario runner


class SdkSystem:
    """SDK workers as pods; who holds what, from the ownership blobs and the workers."""

    label = "sdk"

    def __init__(self, site: systems.Site) -> None:
        self.site = site
        self.kubelet: kubelet.LocalKubelet | None = None
        self._container: Any = None
        self._container_cm: Any = None

    def start(self) -> None:
        self.site.loop.run(
            systems.ensure_container(self.site.blob_connection_string, self.site.container)
        )

    def stop(self) -> None:
        return None

    def attach(self, pods: kubelet.LocalKubelet) -> None:
        self.kubelet = pods

    def up(self, port: int) -> bool:
        return systems.answers_readyz(port, not_yet=NOT_STARTED)

    def template(self) -> kubelet.PodTemplate:
        site = self.site

        def command(name: str, port: int) -> list[str]:
            return [
                sys.executable,
                "-m",
                __name__,
                "--port",
                str(port),
                "--hub",
                site.hub,
                "--container",
                site.container,
                "--interval",
                str(site.interval_seconds),
            ]

        return kubelet.PodTemplate(
            name_prefix=f"{site.consumer}-sdk",
            labels={"app": f"{site.consumer}-sdk"},
            command=command,
            env=systems.record_env(site),
            termination_grace_s=systems.TERMINATION_GRACE_S,
            log_dir=site.log_dir,
        )

    async def _ownerships(self) -> list[tuple[str, str, float]]:
        """(partition, owner id, last modified as a Unix time) of every ownership blob."""
        from eventhub_balancer.adapters import blobs

        result = []
        async with blobs.open_container(
            container_name=self.site.container,
            connection_string=self.site.stack.blob_connection_string,
        ) as container:
            async for item in container.list_blobs(include=["metadata"]):
                parts = str(item.name).split("/")
                if len(parts) < 2 or parts[-2] != "ownership":
                    continue
                modified: datetime.datetime = item.last_modified
                owner = (item.metadata or {}).get("ownerid", "")
                result.append((parts[-1], owner, modified.timestamp()))
        return result

    def _state(self, pod: str) -> tuple[str, set[str]] | None:
        assert self.kubelet is not None
        try:
            url = f"http://127.0.0.1:{self.kubelet.port(pod)}/state"
            with urllib.request.urlopen(url, timeout=STATE_TIMEOUT_S) as response:
                body = json.loads(response.read())
        except (KeyError, OSError, ValueError, urllib.error.URLError):
            return None
        return str(body.get("owner_id", "")), set(body.get("receiving", []))

    def snapshot(self, *, members: Sequence[str], ready: frozenset[str]) -> systems.Snapshot:
        expiry = OWNERSHIP_EXPIRY_RATIO * self.site.interval_seconds
        now = time.time()
        active = {
            partition: owner
            for partition, owner, modified in self.site.loop.run(self._ownerships())
            if owner and modified + expiry > now
        }
        states = {pod: s for pod in members if pod in ready and (s := self._state(pod))}
        pod_of = {owner: pod for pod, (owner, _) in states.items() if owner}
        owners: dict[str, str] = {}
        for partition, owner in active.items():
            pod = pod_of.get(owner)
            if pod is not None and partition in states[pod][1]:
                owners[partition] = pod
        receivers: dict[str, int] = {}
        for _, partitions in states.values():
            for partition in partitions:
                receivers[partition] = receivers.get(partition, 0) + 1
        overlapping = sum(1 for n in receivers.values() if n > 1)
        pending = [
            pod
            for pod, (owner, partitions) in states.items()
            if partitions != {p for p, o in active.items() if o == owner}
        ]
        return systems.judge(
            partitions=self.site.partitions(),
            members=members,
            ready=ready,
            owners=owners,
            in_flight=overlapping,
            pending=pending,
        )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
