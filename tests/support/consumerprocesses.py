"""``ehb consume`` as a child process on the local stack, for the wire tests that run the CLI.

One place for what every such test repeated: the environment of a consumer that reads its
assignment from a file (no Kubernetes), the command line with the flags that keep a test
quick, and the checkpoint positions a run leaves in Azurite.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from eventhub_balancer.adapters import blobs, checkpointing
from tests.support import consumerfakes, paths, sparkarchive

#: The Event Hubs namespace the assignment files name (`consumerfakes.configmap`): the
#: checkpoint blobs are named after it.
FULLY_QUALIFIED_NAMESPACE = consumerfakes.configmap(1, {})["data"]["fullyQualifiedNamespace"]


def file_consumer_env(
    tmp_path: Path, *, eventhub: str, blob: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a consumer without Kubernetes: no pod identity from the test's own
    environment, a kubeconfig that does not exist (a Kubernetes call would fail the run), no
    Spark settings of the test's own session, crash markers in the test's directory, and the
    local emulators allowed."""
    env = {
        k: v
        for k, v in sparkarchive.child_environment(os.environ).items()
        if k not in ("POD_NAME", "POD_NAMESPACE", "KUBECONFIG")
    }
    env.update(
        {
            "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
            "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
            "EHB_EVENTHUB_CONNECTION_STRING": eventhub,
            "EHB_BLOB_CONNECTION_STRING": blob,
            # The test's own: tests that run the same pod name never share crash markers.
            "EHB_CRASH_MARKER_DIR": str(tmp_path / "crash-markers"),
            **(extra or {}),
        }
    )
    return env


def consume_command(
    handler: str,
    *flags: str,
    handler_paths: Sequence[Path] = (paths.HANDLERS,),
    verbose: bool = False,
    shutdown_timeout: float = 10,
) -> list[str]:
    """``ehb consume --handler HANDLER ... FLAGS``: metrics on a free loopback port, batches
    that wait 0.2 s for more events, and a bounded shutdown."""
    return [
        sys.executable,
        "-m",
        "eventhub_balancer",
        *(["-v"] if verbose else []),
        "consume",
        "--handler",
        handler,
        *(f"--handler-path={p}" for p in handler_paths),
        "--max-wait",
        "0.2",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--shutdown-timeout",
        f"{shutdown_timeout:g}",
        *flags,
    ]


async def checkpoint_positions(
    blob_connection_string: str,
    container: str,
    *,
    fully_qualified_namespace: str = FULLY_QUALIFIED_NAMESPACE,
    hub: str = "orders",
) -> dict[str, int]:
    """partition -> the sequence number of its checkpoint (consumer group ``$Default``)."""
    async with blobs.open_container(
        container_name=container, connection_string=blob_connection_string
    ) as client:
        store = checkpointing.CheckpointStore(
            client,
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=hub,
            consumer_group="$Default",
            owner_id="reader",
        )
        return {c.partition: c.sequence_number for c in await store.list()}
