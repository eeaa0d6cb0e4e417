"""The processes an operator benchmark runs on: the API server, the emulator and Azurite.

`operating` and `churning` both start them: the API server (the local one or the real
control plane, `processes`' ``apiserver``), ``ehb local eventhubs`` with one hub per
consumer, and Azurite with the checkpoint container; all stopped on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from eventhub_balancer.adapters import blobs
from eventhub_balancer_devstack import azurite
from eventhub_balancer_devstack.benchmarks import clusterviews, processes


@contextlib.contextmanager
def started(*, hubs: list[str], kube: str) -> Iterator[tuple[Path, str, str, processes.Child]]:
    """The API server process, the emulator process (``ehb local eventhubs``) and Azurite
    (the checkpoint store the operator reads when it gives partitions out): the kubeconfig
    and the two connection strings; all stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="ehb-bench-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        server = processes.Child("apiserver", "--kubeconfig", str(kubeconfig), "--kube", kube)
        emulator = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("ehb")),
                "local",
                "eventhubs",
                "--port",
                "0",
                *(f"--hub={hub}" for hub in hubs),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert emulator.stdout is not None
            connection_string = emulator.stdout.readline().strip()
            drain(emulator.stdout)
            with azurite.Azurite() as blob_store:
                asyncio.run(create_container(blob_store.connection_string))
                yield (kubeconfig, connection_string, blob_store.connection_string, server)
        finally:
            emulator.terminate()
            try:
                emulator.wait(processes.STOP_SECONDS)
            except subprocess.TimeoutExpired:
                emulator.kill()
                emulator.wait(processes.STOP_SECONDS)
            server.stop()


def drain(stream: IO[str]) -> None:
    """Read what the emulator prints after its connection string (one line per hub) until it
    exits: nobody needs it, and a full pipe blocks the emulator's loop in ``print``. At 1,000
    hubs the listing outgrew the pipe, the emulator stopped accepting connections, and every
    partition listing of the operator timed out."""
    threading.Thread(target=lambda: all(True for _ in stream), daemon=True).start()


async def create_container(connection_string: str) -> None:
    async with blobs.open_container(
        container_name=clusterviews.CONTAINER, connection_string=connection_string
    ) as container:
        await blobs.ensure_container(container)
