"""A ServiceAccount that withdraws its opt-in (or is deleted) is no longer acted as: not by
the cycle, which admission refuses, and not by the growth watch, which lists a hub with the
coordinates of its consumers' last admitted reads and is never admitted itself. The refusal
drops the cached list of every consumer acting as it, and the token kept for it, so that a
credential built earlier is not handed it again; a transient failure to read it keeps both.
On the in-memory API (`fakes.FakeKube`), Event Hubs faked at
`hubclients.fetch_partition_ids`, fake loop time (looptime)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import eventhubs, hubclients, tenantidentities
from tests.handlers.test_tenant_identities import ANNOTATED, OPTED_IN, tenant_hubs
from tests.support import fakes

pytestmark = pytest.mark.looptime
NAMESPACE = "tenant-b"
READER = "payments-reader"


class Hub:
    """Event Hubs: the partitions of every hub, and the identity each listing came as."""

    def __init__(self) -> None:
        self.count = 3
        self.asked: list[tuple[str, str] | None] = []

    async def partition_ids(self, coordinates: hubclients.Coordinates, **_: Any) -> list[str]:
        identity = coordinates.identity
        self.asked.append(
            (identity.namespace, identity.service_account) if identity is not None else None
        )
        return [str(i) for i in range(self.count)]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    fake = Hub()
    monkeypatch.setattr(hubclients, "fetch_partition_ids", fake.partition_ids)
    return fake


async def read(
    hubs: eventhubs.EventHubs,
    consumer: str,
    *,
    now: float,
    name: str = "payments",
    service_account: str = READER,
) -> tuple[tuple[str, ...], bool]:
    """A consumer's cycle in tenant-b reading its hub as its ServiceAccount."""
    return await hubs.partitions(
        consumer=consumer,
        fully_qualified_namespace="tenant-b.servicebus.windows.net",
        eventhub_name=name,
        connection_string=None,
        client_id=None,
        now=now,
        namespace=NAMESPACE,
        service_account=service_account,
    )


def the_hub(hubs: eventhubs.EventHubs, consumer: str) -> Hashable:
    [found] = [h for h in hubs.hubs() if consumer in hubs.consumers(h)]
    return found


def withdraw(kube: fakes.FakeKube, name: str = READER) -> None:
    """Whoever may change the ServiceAccount removes its opt-in label."""
    kube.add_service_account(NAMESPACE, name, annotations=ANNOTATED, labels={})


async def test_the_growth_watch_no_longer_lists_as_a_service_account_that_opted_out(
    hub: Hub,
) -> None:
    kube = fakes.FakeKube()
    kube.add_service_account(NAMESPACE, READER, annotations=ANNOTATED, labels=OPTED_IN)
    hubs = tenant_hubs(kube)
    await read(hubs, "tenant-b/payments", now=0.0)
    payments = the_hub(hubs, "tenant-b/payments")
    withdraw(kube)
    await asyncio.sleep(tenantidentities.TOKEN_SECONDS)  # past the renewal: read again
    with pytest.raises(errors.ServiceAccountNotOptedIn):
        await read(hubs, "tenant-b/payments", now=600.0)
    hub.asked.clear()
    hub.count = 6  # the hub grows
    # What the growth watch does four times a second, with the hub it knew.
    assert hubs.hubs() == []
    assert await hubs.list_hub(payments) is None
    assert hubs.grow("tenant-b/payments", payments, ("0", "1", "2", "3", "4", "5")) is False
    assert hub.asked == [], "listed as the ServiceAccount that withdrew its opt-in"
    assert hubs.cached("tenant-b/payments") is None


async def test_every_consumer_acting_as_the_refused_service_account_is_dropped_at_once(
    hub: Hub,
) -> None:
    kube = fakes.FakeKube()
    for name in (READER, "orders-reader"):
        kube.add_service_account(NAMESPACE, name, annotations=ANNOTATED, labels=OPTED_IN)
    hubs = tenant_hubs(kube)
    await read(hubs, "tenant-b/payments", now=0.0)
    await read(hubs, "tenant-b/refunds", now=0.0, name="refunds")  # the same identity
    await read(hubs, "tenant-b/orders", now=0.0, name="orders", service_account="orders-reader")
    refunds = the_hub(hubs, "tenant-b/refunds")
    withdraw(kube)
    await asyncio.sleep(tenantidentities.TOKEN_SECONDS)
    with pytest.raises(errors.ServiceAccountNotOptedIn):
        await read(hubs, "tenant-b/payments", now=600.0)
    # refunds' cycle has not come round yet: the watch must not list as the identity meanwhile.
    hub.asked.clear()
    assert await hubs.list_hub(refunds) is None
    assert hub.asked == []
    assert hubs.cached("tenant-b/refunds") is None
    assert hubs.cached("tenant-b/orders") == ("0", "1", "2")  # another identity: untouched


async def test_a_transient_failure_to_read_the_service_account_keeps_the_list(
    hub: Hub,
) -> None:
    kube = fakes.FakeKube()
    kube.add_service_account(NAMESPACE, READER, annotations=ANNOTATED, labels=OPTED_IN)
    hubs = tenant_hubs(kube)
    await read(hubs, "tenant-b/payments", now=0.0)
    await asyncio.sleep(tenantidentities.TOKEN_SECONDS)
    kube.fail("read_service_account", errors.ApiUnavailable("the API server restarts"))
    with pytest.raises(errors.ApiUnavailable):
        await read(hubs, "tenant-b/payments", now=600.0)
    assert hubs.cached("tenant-b/payments") == ("0", "1", "2")
    assert len(hubs.hubs()) == 1


async def test_a_refused_renewal_hands_the_kept_token_to_no_credential() -> None:
    kube = fakes.FakeKube()
    kube.add_service_account(NAMESPACE, READER, annotations=ANNOTATED, labels=OPTED_IN)
    tenants = tenantidentities.TenantIdentities(kube)
    identity = await tenants.identity(namespace=NAMESPACE, service_account=READER)
    token = identity.assertion()  # what a credential built now exchanges
    withdraw(kube)
    await asyncio.sleep(tenantidentities.TOKEN_SECONDS)
    with pytest.raises(errors.ServiceAccountNotOptedIn):
        await tenants.identity(namespace=NAMESPACE, service_account=READER)
    with pytest.raises(errors.TenantIdentityUnavailable, match="no token kept"):
        identity.assertion()
    # Opted in again: the credential built earlier gets the new token.
    kube.add_service_account(NAMESPACE, READER, annotations=ANNOTATED, labels=OPTED_IN)
    await tenants.identity(namespace=NAMESPACE, service_account=READER)
    assert identity.assertion() == kube.tokens[-1][-1] != token
