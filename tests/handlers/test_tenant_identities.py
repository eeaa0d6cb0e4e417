"""A consumer with ``spec.serviceAccountName`` is read with its own ServiceAccount's identity.

Tenant B's namespace is lent no operator identity. With ``serviceAccountName`` its cycle asks
the (fake) API for a token of B's ServiceAccount (audience ``api://AzureADTokenExchange``) and
builds the Event Hubs and Blob clients with a credential made of that ServiceAccount's client
id and that token, never the operator's ``DefaultAzureCredential`` and never another
ServiceAccount's. A missing ServiceAccount, a missing annotation or a refused TokenRequest is a
condition naming what to change, before any client exists; the token is renewed before it
expires (fake time).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, eventhubs, hubclients, tenantidentities
from eventhub_balancer.handlers import cycles, memories
from tests.support import fakes

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
TENANT = "11111111-2222-3333-4444-555555555555"
B_CLIENT = "bbbbbbbb-0000-0000-0000-000000000001"
A_CLIENT = "aaaaaaaa-0000-0000-0000-000000000001"
SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "tenant-b.servicebus.windows.net",
        "name": "payments",
        "credentials": {"workloadIdentity": {}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "accountUrl": "https://tenantb.blob.core.windows.net",
        "credentials": {"workloadIdentity": {}},
    },
    "selector": {"matchLabels": {"app": "c"}},
    "serviceAccountName": "payments-reader",
}
ANNOTATED = {
    tenantidentities.CLIENT_ID_ANNOTATION: B_CLIENT,
    tenantidentities.TENANT_ID_ANNOTATION: TENANT,
}
#: The ServiceAccount's own consent to lend its identity.
OPTED_IN = {tenantidentities.OPT_IN_LABEL: tenantidentities.OPT_IN_VALUE}


class Exchanges:
    """The credentials built, as (kind, tenant id, client id, assertion at first use)."""

    def __init__(self) -> None:
        self.built: list[tuple[str, str, str, str]] = []
        self.clients: list[tuple[str, Any]] = []


@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> Exchanges:
    """Azure: a credential class that records what it is made of, clients that record the
    credential they were given, and the operator's own identity that fails the test."""
    import azure.identity.aio

    seen = Exchanges()

    class TenantCredential:
        def __init__(self, tenant_id: str, client_id: str, func: Callable[[], str], **_: Any):
            seen.built.append(("assertion", tenant_id, client_id, func()))

        async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise AssertionError("the fake clients never ask for a token")

        async def close(self) -> None:
            return None

    class OperatorCredential:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("the operator's own identity was used for a tenant")

    class Producer:
        def __init__(self, *, credential: Any, **_: Any) -> None:
            seen.clients.append(("eventhubs", credential))

        async def get_partition_ids(self) -> list[str]:
            return ["0", "1", "2"]

        async def close(self) -> None:
            return None

    class Container:
        def __init__(self, account_url: str, container_name: str, *, credential: Any, **_: Any):
            seen.clients.append(("blobs", credential))

        async def __aenter__(self) -> Container:
            return self

        async def __aexit__(self, *_: object) -> None:
            return None

        async def list_blobs(self, **_: Any) -> AsyncIterator[Any]:
            for item in ():
                yield item

    monkeypatch.setattr(azure.identity.aio, "ClientAssertionCredential", TenantCredential)
    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", OperatorCredential)
    monkeypatch.setattr(hubclients, "EventHubProducerClient", Producer)
    monkeypatch.setattr(blobs, "ContainerClient", Container)
    return seen


def tenant_hubs(kube: fakes.FakeKube) -> eventhubs.EventHubs:
    """The operator as ``ehb operator`` builds it: its identity lent to no namespace."""
    return eventhubs.EventHubs(
        identity_policy=eventhubs.IdentityPolicy(namespaces=()),
        tenant_identities=tenantidentities.TenantIdentities(kube),
    )


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return decoded


async def cycle(kube: fakes.FakeKube, hubs: eventhubs.EventHubs, memory: memories.Memory) -> None:
    await cycles.run_cycle(
        kube=kube, hubs=hubs, namespace="tenant-b", name="payments", memory=memory, now=T0
    )


async def test_the_tenants_clients_use_its_own_service_accounts_client_id_and_token(
    exchanges: Exchanges,
) -> None:
    kube = fakes.FakeKube()
    kube.add_service_account("tenant-b", "payments-reader", annotations=ANNOTATED, labels=OPTED_IN)
    # Another tenant's ServiceAccount of the same name: never the one used.
    kube.add_service_account(
        "tenant-a",
        "payments-reader",
        annotations={**ANNOTATED, tenantidentities.CLIENT_ID_ANNOTATION: A_CLIENT},
        labels=OPTED_IN,
    )
    kube.add_consumer("tenant-b", "payments", SPEC)
    kube.add_pod("tenant-b", "c-0", labels={"app": "c"}, since=T0)
    await cycle(kube, tenant_hubs(kube), memories.Memory())

    hub = kube.condition("tenant-b", "payments", "EventHubReachable")
    assert hub["status"] == "True", hub
    assert kube.status("tenant-b", "payments")["partitionCount"] == 3
    store = kube.condition("tenant-b", "payments", "CheckpointStoreReachable")
    assert store["status"] == "True", store
    assert {kind for kind, _ in exchanges.clients} == {"eventhubs", "blobs"}
    # One token, of B's own ServiceAccount, for the token exchange, asked for the identity's
    # own short lifetime.
    ((namespace, account, audience, expiration, token),) = kube.tokens
    assert (namespace, account) == ("tenant-b", "payments-reader")
    assert audience == "api://AzureADTokenExchange"
    assert expiration == tenantidentities.TOKEN_SECONDS
    assert claims(token)["sub"] == "system:serviceaccount:tenant-b:payments-reader"
    # Every client's credential was built from B's client id, tenant and token.
    assert exchanges.built
    assert set(exchanges.built) == {("assertion", TENANT, B_CLIENT, token)}


async def test_the_tenant_id_falls_back_to_the_operators(exchanges: Exchanges) -> None:
    kube = fakes.FakeKube()
    kube.add_service_account(
        "tenant-b",
        "payments-reader",
        annotations={tenantidentities.CLIENT_ID_ANNOTATION: B_CLIENT},
        labels=OPTED_IN,
    )
    hubs = eventhubs.EventHubs(
        identity_policy=eventhubs.IdentityPolicy(namespaces=()),
        tenant_identities=tenantidentities.TenantIdentities(kube, default_tenant_id=TENANT),
    )
    ids, _ = await hubs.partitions(
        consumer="tenant-b/payments",
        fully_qualified_namespace="tenant-b.servicebus.windows.net",
        eventhub_name="payments",
        connection_string=None,
        client_id=None,
        now=0.0,
        namespace="tenant-b",
        service_account="payments-reader",
    )
    assert ids == ("0", "1", "2")
    assert [(t, c) for _, t, c, _ in exchanges.built] == [(TENANT, B_CLIENT)]


def no_client(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a client was built although the tenant's identity is unusable")


@pytest.mark.parametrize(
    ("setup", "reason", "says"),
    [
        (lambda kube: None, "ServiceAccountNotFound", "does not exist: create it"),
        (
            # A CR's author names a ServiceAccount that did not opt in: nothing is borrowed.
            lambda kube: kube.add_service_account(
                "tenant-b", "payments-reader", annotations=ANNOTATED
            ),
            "ServiceAccountNotOptedIn",
            "has not opted in to lending its identity: whoever may change it labels it "
            "eventhub-balancer.dev/token-requests=allowed",
        ),
        (
            lambda kube: kube.add_service_account("tenant-b", "payments-reader", labels=OPTED_IN),
            "ServiceAccountNotAnnotated",
            "has no azure.workload.identity/client-id annotation: annotate it",
        ),
        (
            lambda kube: kube.add_service_account(
                "tenant-b",
                "payments-reader",
                annotations={tenantidentities.CLIENT_ID_ANNOTATION: B_CLIENT},
                labels=OPTED_IN,
            ),
            "ServiceAccountNotAnnotated",
            "no azure.workload.identity/tenant-id annotation and the operator has no "
            "AZURE_TENANT_ID",
        ),
        (
            lambda kube: (
                kube.add_service_account(
                    "tenant-b", "payments-reader", annotations=ANNOTATED, labels=OPTED_IN
                ),
                kube.fail(
                    "request_service_account_token",
                    errors.Forbidden("TokenRequest: forbidden"),
                    times=2,
                ),
            ),
            "TokenRequestForbidden",
            "either namespace tenant-b has not opted in (a RoleBinding there to the ClusterRole "
            "eventhub-balancer-tenant",
        ),
        (
            lambda kube: (
                kube.add_service_account(
                    "tenant-b", "payments-reader", annotations=ANNOTATED, labels=OPTED_IN
                ),
                kube.fail(
                    "read_service_account", errors.Forbidden("ServiceAccount: forbidden"), times=2
                ),
            ),
            "TokenRequestForbidden",
            "cannot be read (403): namespace tenant-b has not opted in",
        ),
    ],
)
async def test_an_unusable_service_account_is_a_condition_before_any_client(
    monkeypatch: pytest.MonkeyPatch,
    setup: Callable[[fakes.FakeKube], object],
    reason: str,
    says: str,
) -> None:
    monkeypatch.setattr(hubclients, "_open", no_client)
    monkeypatch.setattr(blobs, "open_container", no_client)
    kube = fakes.FakeKube()
    setup(kube)
    kube.add_consumer("tenant-b", "payments", SPEC)
    kube.add_pod("tenant-b", "c-0", labels={"app": "c"}, since=T0)
    await cycle(kube, tenant_hubs(kube), memories.Memory())
    for type_ in ("EventHubReachable", "CheckpointStoreReachable"):
        condition = kube.condition("tenant-b", "payments", type_)
        assert (condition["status"], condition["reason"]) == ("False", reason)
        assert condition["message"].startswith(
            "spec.serviceAccountName: ServiceAccount tenant-b/payments-reader "
        )
        assert says in condition["message"]
        assert "Traceback" not in condition["message"]
    assert "partitionCount" not in kube.status("tenant-b", "payments")  # unknown, not 0
    assert kube.tokens == []  # no token was minted for a ServiceAccount that cannot lend it


@pytest.mark.looptime
async def test_the_token_is_renewed_before_it_expires() -> None:
    kube = fakes.FakeKube()
    kube.add_service_account("tenant-b", "payments-reader", annotations=ANNOTATED, labels=OPTED_IN)
    tenants = tenantidentities.TenantIdentities(kube)
    loop = asyncio.get_running_loop()
    start = loop.time()
    identity = await tenants.identity(namespace="tenant-b", service_account="payments-reader")
    first = identity.assertion()
    assert [t[-1] for t in kube.tokens] == [first]
    used: list[tuple[float, str]] = []
    # A consumer's cycle every 5 s for half an hour of fake time.
    for _ in range(360):
        await asyncio.sleep(5)
        identity = await tenants.identity(namespace="tenant-b", service_account="payments-reader")
        used.append((loop.time() - start, identity.assertion()))
    issued = {token: claims(token)["exp"] for *_, token in kube.tokens}
    # Renewed at half its life: every use had at least 5 minutes left, never an expired one.
    renewals = len(kube.tokens) - 1
    assert 5 <= renewals <= 6, renewals
    for at, token in used:
        age = at - next(u for u, t in used if t == token)
        assert age < tenantidentities.TOKEN_SECONDS * tenantidentities.RENEW_FRACTION, (at, age)
        assert token in issued
    # An assertion callable handed out earlier returns the renewed token.
    assert identity.assertion() == kube.tokens[-1][-1] != first


async def test_the_cache_is_bounded_and_forgets_a_failed_identity() -> None:
    kube = fakes.FakeKube()
    for i in range(5):
        kube.add_service_account("tenant-b", f"sa-{i}", annotations=ANNOTATED, labels=OPTED_IN)
    tenants = tenantidentities.TenantIdentities(kube, max_service_accounts=3)
    for i in range(5):
        await tenants.identity(namespace="tenant-b", service_account=f"sa-{i}")
    assert len(tenants._entries) == 3
    await tenants.identity(namespace="tenant-b", service_account="sa-4")
    assert len(kube.tokens) == 5  # kept: no new request
    tenants.forget(namespace="tenant-b", service_account="sa-4")
    await tenants.identity(namespace="tenant-b", service_account="sa-4")
    assert len(kube.tokens) == 6
    # Names that never resolve (a tenant trying ever new ones) keep nothing either.
    for i in range(50):
        with pytest.raises(errors.ServiceAccountNotFound):
            await tenants.identity(namespace="tenant-b", service_account=f"absent-{i}")
    assert len(tenants._entries) == 3
    assert len(tenants._locks) <= 3 + 1  # the kept ones and the last one looked up


def test_the_spec_takes_a_service_account_name() -> None:
    from eventhub_balancer.contracts import specs

    assert specs.parse_spec(SPEC).service_account_name == "payments-reader"
    assert specs.parse_spec({**SPEC, "serviceAccountName": None}).service_account_name == ""
    for bad in ("", "Payments", "a/b", "x" * 254, 7):
        with pytest.raises(errors.InvalidInput, match=r"^spec\.serviceAccountName: "):
            specs.parse_spec({**SPEC, "serviceAccountName": bad})
