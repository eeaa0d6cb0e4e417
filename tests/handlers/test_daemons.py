"""The per-consumer daemon keeps balancing through errors; only a deleted resource stops it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import cycles, registering

SPEC = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "b", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "c"}},
    "balancing": {"intervalSeconds": 1},
}


class Stopped:
    """What kopf hands a daemon: falsy until stopped, with an awaitable wait()."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


class Kube:
    def __init__(self, *, consumer_exists: bool) -> None:
        self.consumer_exists = consumer_exists

    async def get_consumer(self, *, namespace: str, name: str) -> dict[str, Any]:
        if not self.consumer_exists:
            raise errors.NotFound(f"{namespace}/{name} not found")
        return {"metadata": {"name": name, "namespace": namespace}, "spec": SPEC}


async def run(monkeypatch: pytest.MonkeyPatch, *, consumer_exists: bool) -> list[str]:
    calls: list[str] = []
    stopped = Stopped()

    async def run_cycle(**_: Any) -> Any:
        calls.append("cycle")
        if len(calls) == 1:
            raise errors.NotFound("configmap ehb-orders-pod-a: gone with its pod")
        stopped.event.set()
        return cycles.Result(writes=0, moves=(), balanced=True, next_in=None)

    monkeypatch.setattr(cycles, "run_cycle", run_cycle)
    monkeypatch.setattr(registering, "RETRY_SECONDS", 0.01)
    kube: Any = Kube(consumer_exists=consumer_exists)
    runtime = registering.Runtime(kube=kube, hubs=None)  # type: ignore[arg-type]
    await asyncio.wait_for(
        registering.run_daemon(
            runtime, namespace="shop", name="orders", spec=SPEC, stopped=stopped
        ),
        timeout=10,
    )
    return calls


async def test_a_vanished_configmap_does_not_stop_balancing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await run(monkeypatch, consumer_exists=True) == ["cycle", "cycle"]


async def test_a_deleted_consumer_stops_its_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await run(monkeypatch, consumer_exists=False) == ["cycle"]
