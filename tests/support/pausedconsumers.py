"""A paused EventHubConsumer on in-memory fakes, and ``ehb`` run in-process against it.

The admin commands (``ehb checkpoints reset | import``, ``ehb deadletters``) read the CR and
its Secrets through `kubeapi.KubeAPI.from_environment`, open the checkpoint container with
`blobs.open_container` and the hub with `receiving.make_client`; `install` points the three
at fakes, so that a test of what a command says about a bad input needs no service. The
container holds dead-letter blobs by name and no checkpoint blob; it records whether it was
opened, which is how a test shows that a refused input wrote nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import types
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from eventhub_balancer import cli
from eventhub_balancer.adapters import blobs, kubeapi, receiving
from eventhub_balancer.adapters import deadletters as dl
from eventhub_balancer.contracts import checkpointblobs
from tests.support import fakes, sdkclients

NAMESPACE = "shop"
NAME = "orders"
FQNS = "shop.servicebus.windows.net"
SPEC: Mapping[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": FQNS,
        "name": "orders",
        "consumerGroup": "billing",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "orders-checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "orders"}},
    "paused": True,
}
PAUSED: Mapping[str, Any] = {
    "conditions": [{"type": "Paused", "status": "True", "observedGeneration": 1}]
}
#: Where the dead letters of `SPEC`'s hub and consumer group sit in the container.
DEAD_LETTER_PREFIX = checkpointblobs.blob_prefix(
    fully_qualified_namespace=FQNS, eventhub_name="orders", consumer_group="billing", kind=dl.KIND
)


class Container(sdkclients.NoCheckpoints):
    """A checkpoint container: dead-letter blobs by name, no checkpoint blob."""

    container_name = "orders-checkpoints"

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.opened = 0

    async def list_blobs(self, name_starts_with: str = "", include: Any = None) -> Any:
        for name in sorted(self.blobs):
            if name.startswith(name_starts_with):
                yield types.SimpleNamespace(name=name, metadata={})

    async def download_blob(self, name: str) -> Any:
        data = self.blobs[name]

        async def readall() -> bytes:
            return data

        properties = types.SimpleNamespace(metadata={}, etag='"0x1"')
        return types.SimpleNamespace(readall=readall, properties=properties)

    def add_dead_letter(self, short_name: str, body: Mapping[str, Any]) -> None:
        """A blob as ``ehb deadletters list`` names it (``0/5-6``), holding ``body``."""
        self.blobs[f"{DEAD_LETTER_PREFIX}{short_name}.json"] = json.dumps(body).encode()


class _HubClient(sdkclients.FakeSdkClient):
    async def get_partition_ids(self) -> list[str]:
        return list(self.hub.partitions)


@dataclasses.dataclass(frozen=True)
class PausedConsumer:
    kube: fakes.FakeKube
    container: Container
    hub: sdkclients.FakeEventHub


def install(monkeypatch: pytest.MonkeyPatch, *, partitions: int = 2) -> PausedConsumer:
    """The paused consumer ``shop/orders``, its Secrets, hub and container, as ``ehb`` sees
    them from now on."""
    kube = fakes.FakeKube()
    kube.add_consumer(NAMESPACE, NAME, SPEC, status=PAUSED)
    kube.add_secret(NAMESPACE, "blob", {"cs": "AccountName=shop;AccountKey=c2VjcmV0"})
    kube.add_secret(
        NAMESPACE,
        "eh",
        {"cs": f"Endpoint=sb://{FQNS}/;SharedAccessKeyName=l;SharedAccessKey=c2VjcmV0"},
    )
    monkeypatch.setattr(kube, "close", lambda: None, raising=False)
    monkeypatch.setattr(kubeapi.KubeAPI, "from_environment", classmethod(lambda c, k=None: kube))
    container = Container()

    @contextlib.asynccontextmanager
    async def open_container(**options: Any) -> AsyncIterator[Container]:
        container.opened += 1
        yield container

    monkeypatch.setattr(blobs, "open_container", open_container)
    hub = sdkclients.FakeEventHub(
        {str(p): sdkclients.FakePartition(count=0) for p in range(partitions)}
    )
    monkeypatch.setattr(receiving, "make_client", lambda address: _HubClient(hub))
    return PausedConsumer(kube=kube, container=container, hub=hub)


def ehb(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``ehb ARGV``; an exception escaping `cli.main`
    (a traceback for the user) fails the test."""
    try:
        status = cli.main(list(argv))
    except SystemExit as e:
        status = int(e.code or 0)
    out, err = capsys.readouterr()
    return status, out, err
