"""Where credentials may go: the allowed DNS suffixes, checked before any token is requested."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import eventhubs
from eventhub_balancer.consumer import connections, settings
from eventhub_balancer.contracts import endpoints, specs
from tests.contracts.test_contracts import SPEC
from tests.support import fakes

STRICT = endpoints.EndpointPolicy()
EMULATOR = "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=s;UseDevelopmentEmulator=true"
AZURITE = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=k;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",
        "shop.servicebus.windows.net.attacker.example",
        "a.b.servicebus.windows.net",
        "",
    ],
)
def test_an_eventhub_host_outside_the_suffixes_is_refused(host: str) -> None:
    with pytest.raises(errors.EndpointNotAllowed) as caught:
        STRICT.check_eventhub(fully_qualified_namespace=host, connection_string=None)
    assert caught.value.reason == "EndpointNotAllowed"
    assert "spec.eventHub.fullyQualifiedNamespace" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://attacker.example",
        "http://shop.blob.core.windows.net",
        "https://x.blob.core.windows.net.evil.io",
    ],
)
def test_a_blob_endpoint_outside_the_suffixes_is_refused(url: str) -> None:
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_blob(account_url=url, connection_string=None)


#: URLs that ``urllib.parse.urlsplit`` refuses with a ValueError ("Invalid IPv6 URL"), as a
#: hand-edited ConfigMap or Secret may hold them: refused as any other host, never raised.
UNPARSABLE = ("https://[orders.blob.core.windows.net", "https://orders].blob.core.windows.net")


@pytest.mark.parametrize("url", UNPARSABLE)
def test_a_url_that_does_not_parse_is_refused_as_not_allowed(url: str) -> None:
    with pytest.raises(errors.EndpointNotAllowed) as caught:
        STRICT.check_blob(account_url=url, connection_string=None)
    assert "spec.checkpointStore.accountUrl" in str(caught.value)
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_blob(
            account_url=None,
            connection_string=f"AccountName=orders;AccountKey=k;BlobEndpoint={url}",
        )
    sb = url.replace("https://", "sb://").replace("blob.core", "servicebus")
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_eventhub(
            fully_qualified_namespace="orders.servicebus.windows.net",
            connection_string=f"Endpoint={sb};SharedAccessKeyName=k;SharedAccessKey=s",
        )
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_eventhub(fully_qualified_namespace=sb, connection_string=None)


def test_the_public_cloud_and_configured_sovereign_clouds_are_allowed() -> None:
    STRICT.check_eventhub(
        fully_qualified_namespace="shop.servicebus.windows.net", connection_string=None
    )
    STRICT.check_blob(account_url="https://shop.blob.core.windows.net", connection_string=None)
    china = endpoints.EndpointPolicy(
        eventhub_suffixes=endpoints.normalise_suffixes(
            ["servicebus.chinacloudapi.cn"], field="x", example=".servicebus.windows.net"
        ),
        blob_suffixes=(".blob.core.chinacloudapi.cn",),
    )
    china.check_eventhub(
        fully_qualified_namespace="shop.servicebus.chinacloudapi.cn", connection_string=None
    )
    with pytest.raises(errors.EndpointNotAllowed):
        china.check_eventhub(
            fully_qualified_namespace="shop.servicebus.windows.net", connection_string=None
        )


def test_connection_strings_are_checked_at_their_endpoint_and_emulators_need_the_install() -> None:
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_eventhub(
            fully_qualified_namespace="shop.servicebus.windows.net",
            connection_string="Endpoint=sb://attacker.example/;SharedAccessKeyName=k;SharedAccessKey=s",
        )
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_eventhub(fully_qualified_namespace="x", connection_string=EMULATOR)
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_blob(account_url=None, connection_string=AZURITE)
    local = endpoints.EndpointPolicy(allow_development=True)
    local.check_eventhub(fully_qualified_namespace="x", connection_string=EMULATOR)
    local.check_blob(account_url=None, connection_string=AZURITE)
    remote = EMULATOR.replace("127.0.0.1", "attacker.example")
    with pytest.raises(errors.EndpointNotAllowed):
        local.check_eventhub(fully_qualified_namespace="x", connection_string=remote)


def test_the_operator_refuses_before_any_client_or_token() -> None:
    hubs = eventhubs.EventHubs(endpoint_policy=STRICT)

    async def ask() -> None:
        await hubs.partitions(
            consumer="shop/orders",
            fully_qualified_namespace="attacker.example",
            eventhub_name="orders",
            connection_string=None,
            client_id=None,
            now=0.0,
        )

    with pytest.raises(errors.EndpointNotAllowed):
        asyncio.run(ask())
    with pytest.raises(errors.EndpointNotAllowed):
        asyncio.run(hubs.checkpoints(fakes.store_address(account_url="https://attacker.example")))


def test_the_pod_applies_its_own_policy_strict_unless_configured() -> None:
    strict = settings.credentials_from({}).endpoint_policy
    assert (strict.eventhub_suffixes, strict.blob_suffixes, strict.allow_development) == (
        endpoints.PUBLIC_EVENTHUB_SUFFIXES,
        endpoints.PUBLIC_BLOB_SUFFIXES,
        False,
    )
    policy = settings.credentials_from(
        {
            "EHB_ALLOWED_EVENTHUB_SUFFIXES": ".servicebus.usgovcloudapi.net",
            "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
        }
    ).endpoint_policy
    assert policy.eventhub_suffixes == (".servicebus.usgovcloudapi.net",)
    assert policy.allow_development


def test_owner_ids_carry_the_pod_uid() -> None:
    credentials = settings.credentials_from({"POD_UID": "u-2"})
    backends = connections.AzureBackends(
        credentials=credentials, owner_id="orders-0", batch=connections.partitions.BatchSettings()
    )
    assert backends.owner_id == "orders-0/u-2"
    assert connections.owner_id_of("orders-0", "u-1") != connections.owner_id_of("orders-0", "u-2")


def test_a_client_id_in_the_spec_is_refused_naming_the_field() -> None:
    spec = {
        **SPEC,
        "eventHub": {**SPEC["eventHub"], "credentials": {"workloadIdentity": {"clientId": "x"}}},
    }
    with pytest.raises(errors.InvalidInput) as caught:
        specs.parse_spec(spec)
    assert caught.value.field == "spec.eventHub.credentials.workloadIdentity.clientId"
    bad = {
        **SPEC,
        "checkpointStore": {**SPEC["checkpointStore"], "accountUrl": "https://a.example/x?y"},
    }
    with pytest.raises(errors.InvalidInput):
        specs.parse_spec(bad)


def check_eventhub() -> None:
    STRICT.check_eventhub(fully_qualified_namespace="x", connection_string=EMULATOR)


def check_blob() -> None:
    STRICT.check_blob(account_url=None, connection_string=AZURITE)


@pytest.mark.parametrize(
    ("check", "field"),
    [
        (check_eventhub, "the Event Hubs connection string's Endpoint"),
        (check_blob, "the checkpoint store's connection string"),
    ],
    ids=["eventhub", "blob"],
)
def test_a_refused_emulator_says_how_to_allow_it_not_an_empty_suffix_list(
    check: Callable[[], None], field: str
) -> None:
    """``ehb consume`` with the local stack's connection strings and without
    --allow-development-endpoints said ``host '127.0.0.1' is not allowed (allowed DNS
    suffixes: none); use an endpoint under one of them``: the public suffixes are allowed, and
    no suffix would let an emulator on loopback through."""
    with pytest.raises(errors.EndpointNotAllowed) as refused:
        check()
    assert str(refused.value) == (
        f"{field}: host '127.0.0.1' is a development endpoint (a local emulator), refused "
        "unless development endpoints are allowed (--allow-development-endpoints, for the "
        "local stack only)"
    )
