"""A pod whose storage key rotates again and again holds no more for it.

Each rotation of the checkpoint store's connection string file opens a new container client
and closes the one before the last (`connections._Containers`). Each also left a closing
callback, with its exit stack, on the backend for the backend's life: ten objects a
rotation, never released, for a pod that runs for weeks. Counted here after 10 rotations and
after 40: as many exit stacks are alive at both. No request is made (a container client
connects on its first request): only the clients' swap is counted.
"""

from __future__ import annotations

import contextlib
import gc

from eventhub_balancer.consumer import assignments, connections, partitions
from tests.support.consumerfakes import configmap

EVENTHUB = (
    "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=s;"
    "UseDevelopmentEmulator=true"
)
STORAGE = "UseDevelopmentStorage=true"


def exit_stacks() -> int:
    gc.collect()
    return sum(isinstance(o, contextlib.AsyncExitStack) for o in gc.get_objects())


async def test_rotations_of_the_storage_key_do_not_accumulate() -> None:
    backends = connections.AzureBackends(
        credentials=connections.Credentials(
            eventhub_connection_string=EVENTHUB, blob_connection_string=STORAGE
        ),
        owner_id="pod-a",
        batch=partitions.BatchSettings(),
    )
    assignment = assignments.from_configmap(configmap(1, {"0": (1, "owned")}))
    alive: list[int] = []
    async with backends(assignment) as backend:
        for rotations in (10, 30):
            for _ in range(rotations):
                await backend.renew(eventhub_string=False, blob_string=True)
            alive.append(exit_stacks())
    assert alive[1] == alive[0]
    # The clients kept open are closed with the backend.
    assert exit_stacks() <= alive[0]
