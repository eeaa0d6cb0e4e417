"""One tenant's slow Azure never holds up another tenant's balancing.

The operator's calls to Event Hubs and the checkpoint stores take turns at one gate
(`adapters.callgates`). Tenant A's many consumers, whose Event Hubs namespace and storage
account answer only after seconds, once filled every turn and queued far more calls behind
them: tenant B's cycle after a pod deletion waited minutes for its one listing of the
checkpoint blobs (replayed with 200 of A's consumers answering in 9 s: 143-178 s, against
0.1 s with A quiet). Run on fake time over the real adapter, with the SDK's calls replaced by
ones that answer after a delay per tenant.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer.adapters import checkpointlistings, consumergroups, eventhubs, hubclients
from eventhub_balancer.contracts import storeaddresses
from eventhub_balancer.handlers import registering
from tests.support import fakes, watches

pytestmark = pytest.mark.looptime

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
EH = "Endpoint=sb://{ns}.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"
BLOB = (
    "DefaultEndpointsProtocol=https;AccountName={ns};AccountKey=a2V5;"
    "EndpointSuffix=core.windows.net"
)
#: Tenant A's Event Hubs namespace and storage account answer after this (within the timeout).
SLOW_SECONDS = 9.0
#: Turns at the gate in these tests (the operator has `hubclients.CONCURRENT_CALLS`).
TURNS = 8
#: Tenant A's consumers: three times what the turns can serve at A's pace.
NOISY = 40


def spec(namespace: str, app: str) -> dict[str, Any]:
    return {
        "eventHub": {
            "fullyQualifiedNamespace": f"{namespace}.servicebus.windows.net",
            "name": app,
            "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
        },
        "checkpointStore": {
            "containerName": f"cp-{app}",
            "credentials": {"connectionStringSecretRef": {"name": "b", "key": "cs"}},
        },
        "selector": {"matchLabels": {"app": app}},
        "balancing": {"intervalSeconds": 10},
    }


def loop_time() -> float:
    return asyncio.get_running_loop().time()


def clock() -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=loop_time())


class Stopped:
    """What kopf hands a daemon: falsy until stopped."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


async def answered(where: str, result: Any) -> Any:
    """Tenant A's namespace and account (named "noisy") answer after `SLOW_SECONDS`."""
    if where.startswith("noisy"):
        await asyncio.sleep(SLOW_SECONDS)
    return result


@pytest.fixture(autouse=True)
def azure(monkeypatch: pytest.MonkeyPatch) -> None:
    async def ids(coordinates: hubclients.Coordinates, **_: Any) -> list[str]:
        return list(await answered(coordinates.fully_qualified_namespace, ["0", "1", "2", "3"]))

    async def ends(coordinates: hubclients.Coordinates, *_: Any, **__: Any) -> dict[str, Any]:
        return dict(await answered(coordinates.fully_qualified_namespace, {}))

    async def group(coordinates: hubclients.Coordinates, *_: Any, **__: Any) -> None:
        await answered(coordinates.fully_qualified_namespace, None)

    async def blobs(address: storeaddresses.StoreAddress, **_: Any) -> dict[str, Any]:
        assert address.connection_string is not None
        account = address.connection_string.split("AccountName=")[1]
        return dict(await answered(account, {}))

    monkeypatch.setattr(hubclients, "fetch_partition_ids", ids)
    monkeypatch.setattr(hubclients, "fetch_last_sequence_numbers", ends)
    monkeypatch.setattr(consumergroups, "probe", group)
    monkeypatch.setattr(checkpointlistings, "read_checkpoints", blobs)
    monkeypatch.setattr(checkpointlistings, "read_claims", blobs)


class Fleet:
    """Tenant A's ``noisy`` consumers of one pod each, and tenant B's one consumer of two."""

    def __init__(self, noisy: int) -> None:
        self.kube = kube = fakes.FakeKube()
        for namespace in ("noisy", "quiet"):
            kube.add_secret(namespace, "eh", {"cs": EH.format(ns=namespace)})
            kube.add_secret(namespace, "b", {"cs": BLOB.format(ns=namespace)})
        self.keys = [("noisy", f"a{i}") for i in range(noisy)] + [("quiet", "b")]
        for namespace, name in self.keys:
            kube.add_consumer(namespace, name, spec(namespace, name))
        for i in range(noisy):
            kube.add_pod("noisy", f"a{i}-0", labels={"app": f"a{i}"}, since=T0)
        for pod in ("p0", "p1"):
            kube.add_pod("quiet", pod, labels={"app": "b"}, since=T0)
        self.hubs = eventhubs.EventHubs(concurrent_calls=TURNS)
        self.operator = registering.Operator(kube=kube, hubs=self.hubs, clock=clock)
        self.watch = watches.Watch(kube, self.operator.cache, operator=self.operator)
        self.stopped = Stopped()

    def owned(self, pod: str) -> dict[str, tuple[int, str]]:
        return self.kube.assignment("quiet").get(pod, {})

    def b_balanced(self) -> bool:
        held = [self.owned(pod) for pod in ("p0", "p1")]
        owned = {p for each in held for p, (_e, state) in each.items() if state == "owned"}
        return all(held) and owned == {"0", "1", "2", "3"}

    async def until(self, done: Any, *, limit: float) -> float:
        """Loop seconds until ``done()``, the watch delivering as it goes; at most ``limit``."""
        start = loop_time()
        while not done() and loop_time() - start < limit:
            self.watch.deliver()
            await asyncio.sleep(0.05)
        return loop_time() - start


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    fleet = Fleet(NOISY)
    tasks = [
        asyncio.create_task(
            registering.run_daemon(
                fleet.operator,
                namespace=namespace,
                name=name,
                spec=spec(namespace, name),
                stopped=fleet.stopped,
            )
        )
        for namespace, name in fleet.keys
    ]
    yield fleet
    fleet.stopped.event.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_quiet_tenant_balances_at_once_beside_a_noisy_one(fleet: Fleet) -> None:
    assert await fleet.until(fleet.b_balanced, limit=300) < 1.0


async def test_a_quiet_tenants_deleted_pod_is_replaced_at_once_beside_a_noisy_one(
    fleet: Fleet,
) -> None:
    await fleet.until(fleet.b_balanced, limit=300)
    await fleet.until(lambda: False, limit=120)  # A's consumers keep every turn busy
    waited = []
    for gone, other in (("p1", "p0"), ("p0", "p1"), ("p1", "p0")):
        fleet.kube.remove_pod("quiet", gone)
        waited.append(
            await fleet.until(
                lambda other=other: (
                    set(fleet.owned(other)) == {"0", "1", "2", "3"}
                    and all(state == "owned" for _e, state in fleet.owned(other).values())
                ),
                limit=600,
            )
        )
        fleet.kube.add_pod("quiet", gone, labels={"app": "b"}, since=clock())
        await fleet.until(fleet.b_balanced, limit=600)
        await fleet.until(lambda: False, limit=37)
    assert max(waited) < 1.0, waited
